package sessions

import (
	"context"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Store is what the proxy needs of the session store (snapshots.FileStore
// or snapshots.RedisStore).
type Store interface {
	Get(ctx context.Context, id string) (*snapshots.Session, error)
	Update(ctx context.Context, id string, fn func(*snapshots.Session) error) error
	List(ctx context.Context) ([]snapshots.Listing, error)
	Delete(ctx context.Context, id string) error
	Clear(ctx context.Context, id string) error
	SaveSnapshot(ctx context.Context, snap *snapshots.Snapshot) (adminapi.SnapshotInfo, error)
	ListSnapshots(ctx context.Context, id string) ([]adminapi.SnapshotInfo, error)
	LoadSnapshot(ctx context.Context, id, snapID string) (*snapshots.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id, snapID string) error
}

// Writer queues session writes off the request path
// (snapshots.Writer).
type Writer interface {
	Update(id string, fn func(*snapshots.Session) error) error
	// UpdateThen is Update that calls done once the change is stored or
	// given up (never when it returns an error).
	UpdateThen(id string, fn func(*snapshots.Session) error, done func()) error
	Snapshot(id, reason string) error
	SaveSnapshot(snap *snapshots.Snapshot) error
	Flush(ctx context.Context) error
	// Health is the store's last write error (nil when the last one
	// succeeded) and since when it fails; Unsaved whether a session's
	// last change is not stored.
	Health() (since time.Time, err error)
	Unsaved(id string) bool
	// Settle waits until session id's queued changes are stored.
	Settle(ctx context.Context, id string) error
}

// maxEmergencies bounds the sessions remembered as cleared: those that
// never come back are forgotten first.
const maxEmergencies = 100000

// Cleared remembers, per session, the snapshot the memory guard took
// before clearing it, so the session's next response can say how to get
// it back.
type Cleared struct {
	lru *cache.LRU[string, string] // session → snapshot id
}

func NewCleared() *Cleared {
	return &Cleared{lru: cache.New[string, string](maxEmergencies)}
}

func (e *Cleared) Set(session, snap string) { e.lru.Add(session, snap) }

// Has reports whether session has an emergency snapshot not yet taken.
func (e *Cleared) Has(session string) bool {
	_, ok := e.lru.Peek(session)
	return ok
}

// Take returns and forgets the emergency snapshot of session.
func (e *Cleared) Take(session string) (string, bool) { return e.lru.Take(session) }

// Health is the session store's state as the writer last saw it.
func Health(w Writer) (time.Time, error) {
	if w == nil {
		return time.Time{}, nil
	}
	return w.Health()
}
