package main

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// minIdle is how long a keep-alive connection must have been idle before
// a newcomer may take its place: a connection idle only a moment likely
// belongs to a client between two requests of a burst.
const minIdle = time.Second

// connCap keeps at most limits.max_connections client connections open,
// so that no number of clients can exhaust ctxproxy's file descriptors or
// memory.
//
// At the cap, a new connection takes the place of the one idle longest
// (a keep-alive connection between requests, idle at least minIdle),
// which is closed and counted in ctxproxy_connections_idle_closed_total,
// as nginx closes idle keep-alive connections when short of connections.
// Only when none is idle is the newcomer closed on arrival, counted in
// ctxproxy_connections_refused_total. So clients holding idle connections
// cannot lock others out, health checks included. A connection that has
// not sent its first request yet, or is in the middle of one, is never
// closed to make room.
//
// Closing an idle connection races with its client sending the next
// request on it, as any server's idle timeout does: the server marks a
// connection active only once it has read a request's header, so a
// request already on its way when the connection is closed fails, and
// the client has to send it again on a new connection (HTTP clients
// expect this of keep-alive connections; Go's retries idempotent
// requests by itself). Closing the longest idle first, and none idle
// less than minIdle, makes that rare.
type connCap struct {
	max     int
	minIdle time.Duration
	now     func() time.Time

	mu sync.Mutex
	// open holds every connection counted against max, with its place in
	// idle while it is idle (nil otherwise).
	open map[net.Conn]*list.Element
	// idle holds the idle connections as idleConn values, longest idle first.
	idle list.List

	refused, idleClosed prometheus.Counter
}

type idleConn struct {
	conn  net.Conn
	since time.Time
}

func newConnCap(max int, reg *prometheus.Registry) *connCap {
	c := &connCap{max: max, minIdle: minIdle, now: time.Now, open: map[net.Conn]*list.Element{}}
	c.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxproxy_connections_refused_total",
		Help: "Client connections closed on arrival because limits.max_connections were open and none was idle."})
	c.idleClosed = prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxproxy_connections_idle_closed_total",
		Help: "Idle keep-alive connections closed to make room for a new one at limits.max_connections."})
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ctxproxy_connections_open",
		Help: "Client connections open now."}, func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return float64(len(c.open))
	})
	reg.MustRegister(c.refused, c.idleClosed, gauge)
	return c
}

// track is the http.Server's ConnState hook. The server calls it from
// many goroutines: with StateNew from its accept loop, with the others
// from the connection's own goroutine. A connection refused or closed to
// make room is no longer in open, and what it reports later is ignored.
func (c *connCap) track(conn net.Conn, state http.ConnState) {
	if state == http.StateNew {
		c.arrive(conn)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.open[conn]
	if !ok {
		return
	}
	if e != nil {
		c.idle.Remove(e)
		c.open[conn] = nil
	}
	switch state {
	case http.StateIdle:
		c.open[conn] = c.idle.PushBack(idleConn{conn: conn, since: c.now()})
	case http.StateClosed, http.StateHijacked:
		delete(c.open, conn)
	}
}

// arrive counts a new connection in, first closing the longest idle one
// when the cap is reached; when none has been idle minIdle, it closes the
// newcomer instead.
func (c *connCap) arrive(conn net.Conn) {
	c.mu.Lock()
	var victim net.Conn
	if len(c.open) >= c.max {
		oldest := c.idle.Front()
		if oldest == nil || c.now().Sub(oldest.Value.(idleConn).since) < c.minIdle {
			c.mu.Unlock()
			c.refused.Inc()
			conn.Close()
			return
		}
		victim = oldest.Value.(idleConn).conn
		c.idle.Remove(oldest)
		delete(c.open, victim)
	}
	c.open[conn] = nil
	c.mu.Unlock()
	if victim != nil {
		// Out of open, the victim cannot be chosen twice; closing it
		// outside the lock keeps other connections' hooks from waiting.
		c.idleClosed.Inc()
		victim.Close()
	}
}
