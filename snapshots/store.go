package snapshots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// ErrNotFound reports a session or snapshot that does not exist.
var ErrNotFound = errors.New("snapshots: not found")

// Store is what FileStore and RedisStore both provide. The proxy declares
// the subset it needs; Writer, Open and the helpers in this package use
// this one.
type Store interface {
	// Get returns the session id, or ErrNotFound.
	Get(ctx context.Context, id string) (*Session, error)
	// Update reads session id (a new one when there is none), lets fn
	// change it and writes it back, atomically: concurrent updates of one
	// session, from this process or (RedisStore) from other replicas, all
	// apply, none is lost. An error from fn aborts the update and is
	// returned as is. fn may run more than once (RedisStore retries on a
	// conflict) and must not call the store's session methods for id.
	Update(ctx context.Context, id string, fn func(*Session) error) error
	// List returns every session, most recently updated first.
	List(ctx context.Context) ([]Listing, error)
	// Delete removes session id and all its snapshots, or returns
	// ErrNotFound when there was neither.
	Delete(ctx context.Context, id string) error
	// Clear removes session id's messages, stats and summaries and keeps
	// its metadata and model (/clear), or returns ErrNotFound. It
	// takes no snapshot: to make a /clear undoable, TakeSnapshot with
	// ReasonClear first.
	Clear(ctx context.Context, id string) error

	// SaveSnapshot stores snap, making its ID and Created when they are
	// empty, and then deletes the session's oldest snapshots beyond
	// snapshots.max_count.
	SaveSnapshot(ctx context.Context, snap *Snapshot) (adminapi.SnapshotInfo, error)
	// ListSnapshots returns session id's snapshots newest first, from the
	// in-memory index, so listing reads no file; none is not an error.
	ListSnapshots(ctx context.Context, id string) ([]adminapi.SnapshotInfo, error)
	// LoadSnapshot returns snapshot snapID of session id, or ErrNotFound,
	// or an error wrapping ErrCorrupt.
	LoadSnapshot(ctx context.Context, id, snapID string) (*Snapshot, error)
	// DeleteSnapshot removes a snapshot and its index entry.
	DeleteSnapshot(ctx context.Context, id, snapID string) error

	// Counters returns the store's running totals, for metrics.
	Counters() Counters
	Close() error
}

var (
	_ Store = (*FileStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// Counters are a store's running totals since it was opened, meant for
// Prometheus counters (one per number).
type Counters struct {
	// Writes counts records written, WriteBytes their compressed bytes,
	// WriteErrors the writes that failed (disk full, read-only, Redis
	// down) and the file store's background fsyncs that failed.
	Writes      uint64
	WriteBytes  uint64
	WriteErrors uint64
	// Reads counts sessions and snapshots read (a session served from
	// the cache of decoded sessions included), ReadErrors the reads that
	// failed for a reason other than absence or corruption.
	Reads      uint64
	ReadErrors uint64
	// Corrupt counts records that failed their checks and were set aside
	// (or, at the end of a session log with nothing valid after them,
	// copied and cut off).
	Corrupt uint64
	// Skipped counts the corrupt records replay skipped in session logs,
	// keeping the records after them, once a copy of them was kept
	// (logrecover.go): in a file, a bad record with valid ones after it;
	// in Redis, any bad element of a log that has good ones. Each is also
	// in Corrupt.
	Skipped uint64
	// Torn counts session logs found ending in an interrupted write (a
	// crash while a record was being written, before it was
	// acknowledged) and cut back to their last whole record.
	Torn uint64
	// CorruptCopies says where the copies of corrupt records are kept,
	// for a report of Corrupt to point at: the store's directory (each
	// copy beside its file, named after it with .corrupt) or the pattern
	// of the Redis keys set aside. Not a total; empty for a store that
	// keeps none.
	CorruptCopies string
}

type counters struct {
	writes, writeBytes, writeErrors, reads, readErrors, corrupt, skipped, torn atomic.Uint64
	// copies is Counters.CorruptCopies, set when the store is made.
	copies string
}

func (c *counters) get() Counters {
	return Counters{
		Writes:        c.writes.Load(),
		WriteBytes:    c.writeBytes.Load(),
		WriteErrors:   c.writeErrors.Load(),
		Reads:         c.reads.Load(),
		ReadErrors:    c.readErrors.Load(),
		Corrupt:       c.corrupt.Load(),
		Skipped:       c.skipped.Load(),
		Torn:          c.torn.Load(),
		CorruptCopies: c.copies,
	}
}

// Operation names given to Config.Observe.
const (
	OpGet            = "get"
	OpUpdate         = "update"
	OpClear          = "clear"
	OpList           = "list"
	OpDelete         = "delete"
	OpSaveSnapshot   = "save_snapshot"
	OpListSnapshots  = "list_snapshots"
	OpLoadSnapshot   = "load_snapshot"
	OpDeleteSnapshot = "delete_snapshot"
	// OpCompact is a background rewrite of a session log; no caller
	// waits on it, so this is the only place its failures show.
	OpCompact = "compact"
	// OpSync is the file store's background fsync of a session log
	// appended to (Config.FsyncInterval); the Update that appended has
	// returned, so this is the only place its failures show.
	OpSync = "sync"
)

// observer hands each operation's outcome to Config.Observe.
type observer struct {
	store string
	fn    func(store, op string, err error)
}

// done reports op with the error *err holds when it returns; deferred by
// each operation with its named error result.
func (o observer) done(op string, err *error) {
	if o.fn != nil {
		o.fn(o.store, op, *err)
	}
}

// Open returns the store cfg.Store names, FileStore or RedisStore.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Store == StoreRedis {
		st, err := NewRedisStore(ctx, cfg, log)
		if err != nil {
			// Start degraded rather than not at all: the client
			// reconnects by itself, readiness says the store is down,
			// and writes are retried (Writer) until it is back.
			if log == nil {
				log = discard
			}
			log.Warn("snapshots: Redis does not answer; starting without it, and reconnecting", "redis", cfg.Redis.where(), "err", err)
			return redisStoreOn(cfg.Redis.client(), cfg, log), nil
		}
		return st, nil
	}
	return NewFileStore(cfg, log)
}

// TakeSnapshot saves a snapshot of session id as it is stored now.
func TakeSnapshot(ctx context.Context, st Store, id, reason string) (adminapi.SnapshotInfo, error) {
	s, err := st.Get(ctx, id)
	if err != nil {
		return adminapi.SnapshotInfo{}, err
	}
	return st.SaveSnapshot(ctx, NewSnapshot(s, reason))
}

// Restore replaces session id's conversation and metadata with those of
// snapshot snapID. The session keeps its request counters and summaries;
// its token count and usage become the snapshot's.
//
// A restore can be undone: the conversation it replaces is first saved as
// a ReasonRestore snapshot, returned as undo (zero when the session had no
// messages). When that save fails nothing is restored.
func Restore(ctx context.Context, st Store, id, snapID string) (undo adminapi.SnapshotInfo, err error) {
	snap, err := st.LoadSnapshot(ctx, id, snapID)
	if err != nil {
		return undo, err
	}
	cur, err := st.Get(ctx, id)
	switch {
	case err == nil && len(cur.Messages) > 0:
		if undo, err = st.SaveSnapshot(ctx, NewSnapshot(cur, ReasonRestore)); err != nil {
			return undo, fmt.Errorf("snapshots: restore %s: save the current state first: %w", snapID, err)
		}
	case err != nil && !errors.Is(err, ErrNotFound):
		return undo, err
	}
	return undo, st.Update(ctx, id, func(s *Session) error {
		s.Messages = slices.Clone(snap.Messages)
		s.Metadata = snap.Metadata
		if snap.Model != "" {
			s.Model = snap.Model
		}
		s.Stats = Stats{
			Tokens:         snap.Tokens,
			Limit:          s.Stats.Limit,
			Usage:          snap.Usage,
			Requests:       s.Stats.Requests,
			Truncations:    s.Stats.Truncations,
			LastTruncation: s.Stats.LastTruncation,
		}
		return nil
	})
}

// keyLocks hands out one mutex per key, kept only while in use, so that
// updates of one session serialize in this process and updates of others
// do not wait on them.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	refs int
}

// lock locks k and returns its unlock.
func (l *keyLocks) lock(k string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*keyLock)
	}
	kl := l.m[k]
	if kl == nil {
		kl = new(keyLock)
		l.m[k] = kl
	}
	kl.refs++
	l.mu.Unlock()
	kl.Lock()
	return func() {
		kl.Unlock()
		l.mu.Lock()
		if kl.refs--; kl.refs == 0 {
			delete(l.m, k)
		}
		l.mu.Unlock()
	}
}

// discard is the logger used when none is given.
var discard = slog.New(slog.DiscardHandler)
