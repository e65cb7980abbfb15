// Package fleet is the set of servers behind ctxproxy and the choice of
// one for each request. A configuration of one backend is a fleet of one,
// and every choice is that server.
//
// With several, a request goes only to servers that have its model (their
// /api/tags, read by each server's backend.Poller); a session's turn goes
// to the server that served its previous turn, where its prompt is in
// the cache, while that server is healthy and below its in-flight cap;
// a new session, or one whose server is gone or saturated, to a server
// with the model loaded and the fewest requests in flight for its
// weight (a server that must load the model first counts as two
// requests busier, so that one with it loaded takes new sessions but
// is not buried under them). The order Router.Order returns is the order of the tries: a
// request refused before its answer's headers moves to the next.
//
// A server's health is what its requests and a light probe (Router.Watch)
// say: a server that could not be reached is taken out until it answers
// again, with backoff.
package fleet

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/gpu"
)

// Routing policies.
const (
	// RouteSessions keeps each session on its server (the default).
	RouteSessions = "sessions"
	// RouteRoundRobin sends each request to the next server that has its
	// model, whatever its session: the way of a plain load balancer,
	// kept for comparison and for loads without sessions.
	RouteRoundRobin = "round_robin"
)

// Router chooses the server of each request. It is safe for concurrent
// use.
type Router struct {
	servers []*Node
	policy  string
	next    atomic.Uint64 // round robin's turn
	now     func() time.Time
	// taking makes Take's choice and count one step.
	taking sync.Mutex
}

// New returns a Router over servers, which must have distinct names.
// policy is RouteSessions ("" too) or RouteRoundRobin.
func New(servers []*Node, policy string) (*Router, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("fleet: no server")
	}
	seen := map[string]bool{}
	for _, s := range servers {
		if seen[s.Name] {
			return nil, fmt.Errorf("fleet: two servers named %q", s.Name)
		}
		seen[s.Name] = true
	}
	switch policy {
	case "", RouteSessions:
		policy = RouteSessions
	case RouteRoundRobin:
	default:
		return nil, fmt.Errorf("fleet: routing %q is neither %q nor %q", policy, RouteSessions, RouteRoundRobin)
	}
	return &Router{servers: servers, policy: policy, now: time.Now}, nil
}

// One returns the fleet of one server, b, whose memory is this
// machine's (mon).
func One(b *backend.Backend, mon *gpu.Monitor) *Router {
	u := b.URL()
	var tr *http.Transport
	if c := b.Client(); c != nil {
		tr, _ = c.Transport.(*http.Transport)
	}
	return &Router{servers: []*Node{{Name: u.Host, URL: u, Backend: b, Transport: tr, Memory: Local{Monitor: mon}}},
		policy: RouteSessions, now: time.Now}
}

// Servers returns the servers in the configuration's order.
func (r *Router) Servers() []*Node { return r.servers }

// First is the first server configured: the one ctxproxy's own calls
// that name no model go to.
func (r *Router) First() *Node { return r.servers[0] }

// Several reports whether there is more than one server.
func (r *Router) Several() bool { return len(r.servers) > 1 }

// Named returns the server called name, nil when there is none.
func (r *Router) Named(name string) *Node {
	for _, s := range r.servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// A Choice is the order of the tries for one request, and why the first
// is not the session's previous server when it is not.
type Choice struct {
	Order []*Node
	// Moved is the session's previous server when the request leaves
	// it, and Why says why ("down", "saturated", "lacks the model").
	Moved, Why string
}

// Order returns where a request for model goes, in the order of the
// tries. previous is the server of the session's previous turn ("" for
// none); key (the session, or "") breaks ties alike on every replica.
// Every server is in the order, those without the model last, so that a
// request for a model no server lists still gets the answer of one.
func (r *Router) Order(model, previous, key string) Choice {
	if len(r.servers) == 1 {
		return Choice{Order: r.servers}
	}
	now := r.now()
	type cand struct {
		s       *Node
		rank    int // 0 best
		load    float64
		tiebrk  uint64
		isPrevs bool
	}
	cands := make([]cand, 0, len(r.servers))
	rr := r.next.Add(1) - 1
	for i, s := range r.servers {
		c := cand{s: s, load: float64(s.InFlight()+1) / float64(s.weight())}
		has, known := s.Has(model)
		switch {
		case !s.Serves(model) || known && !has:
			c.rank = 3
		case !s.Up(now):
			c.rank = 2
		case s.Saturated():
			c.rank = 1
		}
		if r.policy == RouteRoundRobin {
			c.tiebrk = uint64((i - int(rr%uint64(len(r.servers))) + len(r.servers)) % len(r.servers))
			c.load = 0
		} else {
			c.tiebrk = rendezvous(key, s.Name)
			if c.rank == 0 && !s.IsLoaded(model) {
				// A server that would load the model first counts as
				// that much busier: the one with it loaded takes new
				// sessions until it has that many more in flight.
				c.load += float64(loadPenalty) / float64(s.weight())
			}
		}
		c.isPrevs = previous != "" && s.Name == previous && r.policy == RouteSessions
		cands = append(cands, c)
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		if a.rank != b.rank {
			return cmp.Compare(a.rank, b.rank)
		}
		if a.isPrevs != b.isPrevs {
			if a.isPrevs {
				return -1
			}
			return 1
		}
		if a.load != b.load {
			return cmp.Compare(a.load, b.load)
		}
		return cmp.Compare(a.tiebrk, b.tiebrk)
	})
	ch := Choice{Order: make([]*Node, len(cands))}
	for i, c := range cands {
		ch.Order[i] = c.s
		if c.isPrevs && i > 0 {
			ch.Moved = c.s.Name
			switch c.rank {
			case 3:
				ch.Why = "it does not have the model"
			case 2:
				ch.Why = "it is down"
			case 1:
				ch.Why = "it is at its in-flight cap"
			default:
				ch.Why = "another server ranks first"
			}
		}
	}
	return ch
}

// Take is Order with the request counted in flight on the first server
// (Node.Begin; the caller ends it), both under one lock: requests
// placed at the same moment see each other and spread over the servers.
// name, when set, is the server the client named: first whatever the
// order (nil Order when no server has that name).
func (r *Router) Take(model, previous, key, name string) Choice {
	if len(r.servers) == 1 {
		r.servers[0].Begin()
		return Choice{Order: r.servers}
	}
	r.taking.Lock()
	defer r.taking.Unlock()
	ch := r.Order(model, previous, key)
	if name != "" {
		named := r.Named(name)
		if named == nil {
			return Choice{}
		}
		ch = Choice{Order: append([]*Node{named}, slices.DeleteFunc(ch.Order, func(s *Node) bool { return s == named })...)}
	}
	ch.Order[0].Begin()
	return ch
}

// loadPenalty is how many requests in flight a server that must load a
// model first counts as busier than one that has it loaded.
const loadPenalty = 2

// rendezvous is the weight of server for key in highest-random-weight
// order (lowest first here): every replica breaks a tie between servers
// alike for one session, and a server's leaving moves only its own.
func rendezvous(key, server string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(server))
	return h.Sum64()
}

// Watch probes every server every interval until ctx ends: one that was
// taken out answers again, and one that stopped answering between
// requests is taken out before a request finds it gone.
func (r *Router) Watch(ctx context.Context, interval time.Duration) {
	if len(r.servers) == 1 || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, s := range r.servers {
			s.probe(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
