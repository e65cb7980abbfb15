package plan

import (
	"context"
	"log/slog"
	"sync"
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

// Turn is a turn announced to the other replicas: it ends once (End),
// when its record is stored or will not be. The request that holds it
// ends it, or hands it to the session writer with the turn's record
// (proxy's holds).
type Turn struct {
	order   snapshots.TurnOrder
	session string
	seq     int64
	log     *slog.Logger
	once    sync.Once
	// stored is closed when the turn has ended.
	stored chan struct{}
}

// End tells the other replicas that the turn has ended, once. A nil m
// does nothing.
func (m *Turn) End() {
	if m == nil {
		return
	}
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

// AwaitStored waits until m has ended (its record stored, or known not
// to be), at most storeWait: the reply's last byte waits for it, so that
// a turn the client has seen whole is in the shared store even if this
// replica dies the next moment. A nil m returns at once.
func (m *Turn) AwaitStored(ctx context.Context) {
	if m == nil {
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
