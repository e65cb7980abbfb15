package fleet

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/gpu"
)

// Memory is where a server's free memory is read for sizing num_ctx.
type Memory interface {
	// Reading returns the server's memory now, or false when it is not
	// known (then num_ctx is left to the server's default and the
	// model's own limit).
	Reading(ctx context.Context) (gpu.Reading, bool)
	// Where says where it is read, for the status page ("local",
	// "ctxproxy at http://…", "none").
	Where() string
}

// Node is one server behind ctxproxy: its backend view (kind,
// version, models, tokenizers), its transport, what it serves and how
// much, and what ctxproxy has seen of its health.
type Node struct {
	// Name names it in X-Ctxproxy-Backend, metrics, the status page
	// and a session's record.
	Name string
	// URL is its root.
	URL *url.URL
	// Backend is ctxproxy's view of it.
	Backend *backend.Backend
	// Transport carries every request to it.
	Transport *http.Transport
	// Weight is its share of new sessions against the others' (0 is 1).
	Weight int
	// Models, when set, are the only models it is sent (path.Match
	// patterns: "qwen3*", "llama3.1:8b").
	Models []string
	// MaxInFlight is how many requests it is sent at once before a
	// session moves off it (0: no cap).
	MaxInFlight int
	// Memory is where its free memory is read; nil is nowhere.
	Memory Memory

	inflight atomic.Int64
	served   atomic.Uint64
	mu       sync.Mutex
	down     time.Time // taken out until then
	backoff  time.Duration
	lastErr  string
}

func (s *Node) weight() int { return max(s.Weight, 1) }

// Serves reports whether the configuration lets s have requests for
// model (its Models filter).
func (s *Node) Serves(model string) bool {
	if len(s.Models) == 0 || model == "" {
		return true
	}
	for _, p := range s.Models {
		if ok, _ := path.Match(p, model); ok {
			return true
		}
		if ok, _ := path.Match(p, model+":latest"); ok {
			return true
		}
	}
	return false
}

// Has reports whether s lists model; known is false while its models
// were never listed (then it may have it).
func (s *Node) Has(model string) (has, known bool) {
	if model == "" {
		return true, false
	}
	return s.Backend.Listing().Has(model)
}

// IsLoaded reports whether s had model loaded when last listed.
func (s *Node) IsLoaded(model string) bool { return s.Backend.Listing().IsLoaded(model) }

// Begin counts a request in flight on s until End.
func (s *Node) Begin() {
	s.inflight.Add(1)
	s.served.Add(1)
}

// End ends a request Begin counted.
func (s *Node) End() { s.inflight.Add(-1) }

// InFlight is how many requests s has now.
func (s *Node) InFlight() int { return int(s.inflight.Load()) }

// Served is how many requests s was sent.
func (s *Node) Served() uint64 { return s.served.Load() }

// Saturated reports whether s is at its in-flight cap.
func (s *Node) Saturated() bool {
	return s.MaxInFlight > 0 && s.InFlight() >= s.MaxInFlight
}

// Backoff bounds for a server taken out.
const (
	downMin = time.Second
	downMax = 30 * time.Second
)

// Failed takes s out after it could not be reached or refused a request
// as unable to serve it: no request is sent it until the backoff ends
// (1 s, doubling to 30 s) or it answers a probe.
func (s *Node) Failed(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backoff = min(max(2*s.backoff, downMin), downMax)
	s.down = time.Now().Add(s.backoff)
	s.lastErr = why
}

// Answered puts s back: it answered.
func (s *Node) Answered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down, s.backoff, s.lastErr = time.Time{}, 0, ""
}

// Up reports whether s is in (not taken out at now).
func (s *Node) Up(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !now.Before(s.down)
}

// Health is s's state for the status page and metrics.
type Health struct {
	Up       bool
	Until    time.Time // taken out until then, when not Up
	LastErr  string
	InFlight int
}

// Health returns s's state now.
func (s *Node) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	h := Health{Up: !now.Before(s.down), LastErr: s.lastErr, InFlight: s.InFlight()}
	if !h.Up {
		h.Until = s.down
	}
	return h
}

// probe asks s whether it answers; a server taken out whose backoff has
// not ended is asked too, and put back when it answers.
func (s *Node) probe(ctx context.Context) {
	if s.Backend.Probe(ctx) {
		s.Answered()
		return
	}
	s.Failed("no answer to a probe")
}

// Local reads this machine's memory: ctxproxy runs beside the server.
type Local struct{ Monitor *gpu.Monitor }

// Reading is the monitor's sample, no older than poll_active; without a
// monitor, an empty reading (num_ctx is sized without one).
func (l Local) Reading(ctx context.Context) (gpu.Reading, bool) {
	if l.Monitor == nil {
		return gpu.Reading{}, true
	}
	return l.Monitor.Current(ctx), true
}

// Where is "local".
func (Local) Where() string { return "local" }
