package snapshots

import (
	"context"
	"errors"
	"time"
)

// Retention is how long sessions are kept, how many, and how many bytes
// they may take. The zero value keeps every session for ever.
type Retention struct {
	// TTL removes a session (and its snapshots) not updated for this
	// long; 0 keeps them.
	TTL time.Duration
	// MaxSessions removes the least recently updated sessions beyond this
	// many; 0 is no cap.
	MaxSessions int
	// MaxBytes removes the least recently updated sessions once the
	// sessions updated after them take this many bytes of storage (each
	// session's log and snapshots, as stored: Listing.Bytes); 0 is no
	// cap. It bounds the disk (or Redis memory) conversations take.
	MaxBytes int64
}

// Collect applies r to st once: sessions idle longer than r.TTL, then
// the least recently updated beyond r.MaxSessions or r.MaxBytes, are
// deleted with their snapshots, oldest first. A session updated since the
// listing is spared. It returns how many were deleted.
func Collect(ctx context.Context, st Store, r Retention, now time.Time) (int, error) {
	if r.TTL <= 0 && r.MaxSessions <= 0 && r.MaxBytes <= 0 {
		return 0, nil
	}
	list, err := st.List(ctx) // most recently updated first
	if err != nil {
		return 0, err
	}
	deleted := 0
	var total int64 // bytes of the sessions kept, newest first
	full := false   // once one session does not fit, no older one does
	for i, info := range list {
		expired := r.TTL > 0 && now.Sub(info.Updated) > r.TTL
		over := r.MaxSessions > 0 && i >= r.MaxSessions
		if !expired && !over && r.MaxBytes > 0 {
			full = full || total+info.Bytes > r.MaxBytes
			over = full
		}
		if !expired && !over {
			total += info.Bytes
			continue
		}
		// Spare a session a request has touched since the listing.
		if s, err := st.Get(ctx, info.SessionID); err == nil && s.Updated.After(info.Updated) {
			continue
		}
		switch err := st.Delete(ctx, info.SessionID); {
		case err == nil:
			deleted++
		case errors.Is(err, ErrNotFound):
		default:
			return deleted, err
		}
	}
	return deleted, nil
}
