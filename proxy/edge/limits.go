package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/prometheus/client_golang/prometheus"

	"golang.org/x/sync/semaphore"
)

// Limits bound what clients can make ctxproxy hold. The zero value of
// each field means its default.
type Limits struct {
	// MaxInflight is the most requests handled at once (default 512);
	// health checks and metrics are not counted.
	MaxInflight int64
	// BodyMemory is the most request-body bytes held in memory at once
	// by intercepted routes (default 512 MiB). A chat body is read whole
	// to be counted and cut; a request takes its Content-Length (max_body
	// when it has none) from this budget before its body is read.
	BodyMemory int64
	// QueueWait is how long a request waits for room before it gets 503
	// with Retry-After (default 2s).
	QueueWait time.Duration
	// MinBodyRate is the slowest a request body may arrive, in bytes a
	// second, averaged from the start of the body, after a 10 s grace
	// (default 16 KiB/s). A client that sends a byte now and then cannot
	// hold a connection for ever. A body of stated length the rate allows
	// at most 10 s must arrive whole within the grace and that time.
	MinBodyRate int64
	// BodyGrace is the time a body may take before MinBodyRate applies
	// (default 10s).
	BodyGrace time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxInflight <= 0 {
		l.MaxInflight = 512
	}
	if l.BodyMemory <= 0 {
		l.BodyMemory = 512 << 20
	}
	if l.QueueWait <= 0 {
		l.QueueWait = 2 * time.Second
	}
	if l.MinBodyRate <= 0 {
		l.MinBodyRate = 16 << 10
	}
	if l.BodyGrace <= 0 {
		l.BodyGrace = 10 * time.Second
	}
	return l
}

// Gate holds the semaphores behind Limits, and reads bodies within them.
type Gate struct {
	lim      Limits
	maxBody  int64
	inflight *semaphore.Weighted
	memory   *semaphore.Weighted
	refused  *prometheus.CounterVec // ctxproxy_refused_requests_total
}

func NewGate(l Limits, maxBody int64, refused *prometheus.CounterVec) *Gate {
	l = l.withDefaults()
	return &Gate{lim: l, maxBody: maxBody, inflight: semaphore.NewWeighted(l.MaxInflight),
		memory: semaphore.NewWeighted(l.BodyMemory), refused: refused}
}

var errBusy = errors.New("busy")

// Acquire waits up to QueueWait for n units of sem.
func (g *Gate) Acquire(ctx context.Context, sem *semaphore.Weighted, n int64) error {
	if sem.TryAcquire(n) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.lim.QueueWait)
	defer cancel()
	if err := sem.Acquire(ctx, n); err != nil {
		return errBusy
	}
	return nil
}

// Busy answers 503 with Retry-After in the dialect's shape.
func (g *Gate) Busy(w http.ResponseWriter, r *http.Request, what string) {
	g.refused.WithLabelValues(what).Inc()
	w.Header().Set("Retry-After", "1")
	wire.WriteError(w, wire.DialectOf(r.URL.Path), wire.Error{Status: http.StatusServiceUnavailable,
		Message: fmt.Sprintf("ctxproxy is at its limit of %s; try again in a moment", what)})
}

// Admit takes r's place among the requests in flight, waiting up to
// QueueWait for one; it answers 503 itself when none comes (ok false).
// done gives the place back.
func (g *Gate) Admit(w http.ResponseWriter, r *http.Request) (done func(), ok bool) {
	if Exempt(r.URL.Path) {
		return func() {}, true
	}
	if err := g.Acquire(r.Context(), g.inflight, 1); err != nil {
		g.Busy(w, r, "requests in flight")
		return nil, false
	}
	return func() { g.inflight.Release(1) }, true
}

// MaxBody is the largest request body read whole.
func (g *Gate) MaxBody() int64 { return g.maxBody }

// Exempt routes are never queued: a load balancer's health check and
// Prometheus must get through when ctxproxy is busiest.
func Exempt(path string) bool {
	return path == "/ctxproxy/healthz" || path == "/ctxproxy/readyz" || path == "/metrics"
}

// bodyCost is what a chat body holds in memory while it is served, in
// multiples of its length: the body itself, and the copies made of it
// (decoded strings with escapes, the edited body, the session's record).
// Measured with scripts/limits.sh (docs/security.md, Limits).
const bodyCost = 2

// BodyBudget takes room for r's body from the memory budget, returning
// the release; ok false when none came in time (503 already written).
func (g *Gate) BodyBudget(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	n := r.ContentLength
	if n < 0 || n > g.maxBody || compressed(r) {
		n = g.maxBody // chunked or compressed: as much as it may be
	}
	n = min(max(n, 1)*bodyCost, g.lim.BodyMemory)
	if err := g.Acquire(r.Context(), g.memory, n); err != nil {
		g.Busy(w, r, "memory for request bodies")
		return nil, false
	}
	return func() { g.memory.Release(n) }, true
}

// TakeBody reads an intercepted request's body within the body-memory
// budget, answering the client itself when it cannot; release gives the
// budget back once the exchange is over.
func (g *Gate) TakeBody(w http.ResponseWriter, r *http.Request, d wire.Dialect) (body []byte, release func(), status int) {
	release, ok := g.BodyBudget(w, r)
	if !ok {
		return nil, nil, http.StatusServiceUnavailable
	}
	body, aerr := ReadBody(r, g.maxBody)
	if aerr == nil {
		body, aerr = DecodeBody(r, body, g.maxBody)
	}
	if aerr != nil {
		release()
		wire.WriteError(w, d, *aerr)
		return nil, nil, aerr.Status
	}
	return body, release, 0
}

// RateBody makes reading r's body fail once it falls below the minimum
// rate: each read moves the connection's read deadline to what the bytes
// so far have earned. A body of known length that the rate allows at most
// wholeBodyTime is given its whole time at once instead (grace +
// length/rate to arrive, never less than its bytes would earn), so that
// it costs two deadline changes, set and clear, rather than one per read:
// on an idle machine each change of a connection's deadline showed in a
// request's latency. Such a body can hold its connection at most
// BodyGrace + wholeBodyTime.
type RateBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	rate  int64
	grace time.Duration
	n     int64
	// whole: the deadline set at the start covers the whole body.
	whole bool
	// eof is set once the body has been read to its end, broken once a
	// read failed: the transport reads it on a goroutine of its own while
	// the handler looks.
	eof, broken atomic.Bool
}

// Finished reports whether the body has been read to its end.
func (b *RateBody) Finished() bool { return b.eof.Load() }

// Failed reports whether a read of the body Failed before its end.
func (b *RateBody) Failed() bool { return b.broken.Load() }

// wholeBodyTime is the most time past the grace a body is given at once:
// at the default rate, 160 KiB, more than most chats.
const wholeBodyTime = 10 * time.Second

func (g *Gate) LimitRate(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	b := &RateBody{ReadCloser: r.Body, rc: http.NewResponseController(w), start: time.Now(),
		rate: g.lim.MinBodyRate, grace: g.lim.BodyGrace}
	deadline := b.earned(0)
	if n := r.ContentLength; n >= 0 && b.earned(n).Sub(b.start) <= b.grace+wholeBodyTime {
		b.whole, deadline = true, b.earned(n)
	}
	if b.rc.SetReadDeadline(deadline) != nil {
		return // not a connection that takes deadlines (HTTP/2, tests)
	}
	r.Body = b
}

// earned is the deadline n bytes of body have earned: the grace, and
// the time n bytes take at the minimum rate.
func (b *RateBody) earned(n int64) time.Time {
	return b.start.Add(b.grace + time.Duration(n*int64(time.Second)/b.rate))
}

func (b *RateBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	switch {
	case err == nil:
		if !b.whole {
			_ = b.rc.SetReadDeadline(b.earned(b.n))
		}
	case errors.Is(err, io.EOF):
		b.eof.Store(true)
		_ = b.rc.SetReadDeadline(time.Time{}) // done: the response may take its time
	default:
		b.broken.Store(true)
	}
	// Any other error (the deadline passed) leaves the deadline in the
	// past, so the server cannot wait for the rest of the body either and
	// closes the connection.
	return n, err
}

// ReadBody reads a chat request body, refusing one over MaxBody before it
// is read whole.
func ReadBody(r *http.Request, maxBody int64) ([]byte, *wire.Error) {
	tooLarge := &wire.Error{Status: http.StatusRequestEntityTooLarge,
		Message: fmt.Sprintf("request body is larger than the %d bytes ctxproxy accepts (max_body)", maxBody)}
	if r.ContentLength > maxBody {
		return nil, tooLarge
	}
	var body []byte
	var err error
	if n := r.ContentLength; n >= 0 {
		// One buffer of the announced size: io.ReadAll's doubling would
		// hold up to twice the body while it grows.
		body = make([]byte, n)
		if _, err = io.ReadFull(r.Body, body); err == nil {
			var extra [1]byte
			if m, _ := r.Body.Read(extra[:]); m > 0 {
				err = errors.New("body longer than its Content-Length")
			}
		}
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	}
	if err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Message: "reading the request body failed"}
	}
	if int64(len(body)) > maxBody {
		return nil, tooLarge
	}
	return body, nil
}
