package plan

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Turn order across replicas (snapshots.TurnOrder): a turn built on the
// stored history waits for the turns of its session that other replicas
// answered and have not stored yet, then announces itself, and ends once
// its own record is stored or will not be.

// turnWaitWarning is told to a client whose turn went without a turn that
// another replica answered and had not stored in time.
const turnWaitWarning = "an earlier turn of this session, answered by another ctxproxy replica, was not stored within " +
	"snapshots.redis.turn_wait; this turn was sent without it"

// awaitTurns waits, when the store is shared by replicas, for the turns of
// session begun elsewhere, and announces this one. It returns the turn to
// end (nil when the store orders no turns), how long it waited, and
// whether it gave up waiting.
func awaitTurns(ctx context.Context, store sessions.Store, session string, log *slog.Logger) (*Turn, time.Duration, bool) {
	order, waited, gaveUp := sessions.AwaitTurns(ctx, store, session, log)
	if order == nil {
		return nil, 0, false
	}
	seq, err := order.BeginTurn(ctx, session)
	if err != nil {
		log.Warn("announcing the turn to other replicas failed", "session", session, "err", err)
		return nil, waited, gaveUp
	}
	return &Turn{order: order, session: session, seq: seq, log: log, stored: make(chan struct{})}, waited, gaveUp
}

// Turn is a turn announced to the other replicas: it ends once, when
// its record is stored or will not be. The request that holds it
// releases it, or hands it to the writer with the turn's record.
type Turn struct {
	order   snapshots.TurnOrder
	session string
	seq     int64
	log     *slog.Logger
	// handed says the writer ends it, once the record is stored.
	handed atomic.Bool
	once   sync.Once
	// stored is closed when the turn has ended.
	stored chan struct{}
}

// Hand gives the end of m to the writer, which stores the turn's record:
// it returns what the writer calls when done. A nil m returns nil.
func (m *Turn) Hand() func() {
	if m == nil {
		return nil
	}
	m.handed.Store(true)
	return m.end
}

// Release ends m at the end of its request, unless the writer has it.
func (m *Turn) Release() {
	if m != nil && !m.handed.Load() {
		m.end()
	}
}

func (m *Turn) end() {
	m.once.Do(func() {
		defer close(m.stored)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.order.EndTurn(ctx, m.session, m.seq); err != nil {
			m.log.Warn("telling other replicas the turn ended failed; their next turn waits for it", "session", m.session, "err", err)
		}
	})
}

// storeWait bounds how long the last byte of a reply waits for its turn
// to be stored (AwaitStored).
const storeWait = 5 * time.Second

// AwaitStored waits, when the writer has m's turn, until it is stored
// (or will not be), at most storeWait: relay holds the reply's last byte
// until then, so that a turn the client has seen whole is in the shared
// store even if this replica dies the next moment. A nil m, or one whose
// turn is not recorded, returns at once.
func (m *Turn) AwaitStored(ctx context.Context) {
	if m == nil || !m.handed.Load() {
		return
	}
	t := time.NewTimer(storeWait)
	defer t.Stop()
	select {
	case <-m.stored:
	case <-ctx.Done():
	case <-t.C:
		m.log.Warn("the turn was not stored within "+storeWait.String()+"; the reply ends without waiting for it",
			"session", m.session)
	}
}
