package plan

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// A plan is made for one server (package fleet): its kind and version
// decide the route and the counting rules, its memory the num_ctx. With
// several servers, a session's turn goes where its previous turn went
// while that server can take it: the server that holds its prompt in
// its cache. The server is the session's record's (Backend), so every
// replica on a shared store routes a session alike; each replica also
// remembers the sessions it routed, and reads the record only for a
// session it does not know, or on a store replicas share.

// maxAffinities bounds the sessions whose server a planner remembers.
const maxAffinities = 100000

// placement chooses the server of each plan.
type placement struct {
	fleet *fleet.Router
	store sessions.Store
	log   interface {
		Debug(msg string, args ...any)
	}
	// affinity remembers the server of each session's last turn;
	// shared says the store is shared by replicas, whose turns this
	// planner does not see.
	affinity *cache.LRU[string, string]
	shared   bool
}

func newPlacement(f *fleet.Router, store sessions.Store, log interface{ Debug(string, ...any) }) *placement {
	pc := &placement{fleet: f, store: store, log: log, affinity: cache.New[string, string](maxAffinities)}
	_, pc.shared = store.(snapshots.TurnOrder)
	return pc
}

// choose sets where p goes: the server the router puts first for its
// model and session (or the one the client named), the others as the
// next tries.
func (pc *placement) choose(ctx context.Context, p *Plan, session string) *wire.Error {
	prev := pc.previous(ctx, session)
	name := ""
	if pc.fleet.Several() {
		name = p.opt.Backend
	}
	ch := pc.fleet.Take(p.Model, prev, session, name)
	if len(ch.Order) == 0 {
		return wire.BadRequest("", "X-Ctxproxy-Backend: no server is named "+strconv.Quote(name)+" (backends: in the configuration)")
	}
	p.Server, p.tries = ch.Order[0], ch.Order[1:]
	if !pc.fleet.Several() {
		return nil
	}
	p.Backend = p.Server.Name
	p.Placed = session != "" && pc.shared && prev != p.Server.Name
	if ch.Moved != "" {
		p.Moved = ch.Moved
		p.warn(fmt.Sprintf("this session moved from backend %s to %s: %s; its next turns stay on %s, whose prompt cache starts cold",
			ch.Moved, p.Server.Name, ch.Why, p.Server.Name))
	}
	if session != "" {
		pc.affinity.Add(session, p.Server.Name)
	}
	return nil
}

// previous is the server of session's previous turn: "" for none, or
// for a session with one server.
func (pc *placement) previous(ctx context.Context, session string) string {
	if session == "" || !pc.fleet.Several() {
		return ""
	}
	if name, ok := pc.affinity.Get(session); ok && !pc.shared {
		return name
	}
	if pc.store == nil {
		return ""
	}
	s, err := pc.store.Get(ctx, session)
	if err != nil {
		if !errors.Is(err, snapshots.ErrNotFound) {
			pc.log.Debug("reading the session's backend failed; choosing one anew", "session", session, "err", err)
		}
		if name, ok := pc.affinity.Get(session); ok {
			return name
		}
		return ""
	}
	return s.Backend
}

// next sets q, a plan p is made again from, for the next of p's
// servers, and says why p's server was left. false when none is left.
func (pc *placement) next(p Plan, q *Plan, why string) bool {
	if len(p.tries) == 0 {
		return false
	}
	from := p.Server.Name
	q.Server, q.tries, q.Moved = p.tries[0], p.tries[1:], from
	if pc.fleet.Several() {
		q.Backend = q.Server.Name
	}
	q.Placed = q.opt.Session != "" && pc.shared
	q.warn(fmt.Sprintf("backend %s %s; ctxproxy sent the request to %s", from, why, q.Server.Name))
	if q.opt.Session != "" {
		pc.affinity.Add(q.opt.Session, q.Server.Name)
	}
	return true
}

// be is the backend of the server p goes to.
func (p *Plan) be() *backend.Backend { return p.Server.Backend }
