package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// An intercepted chat request is sent to a plain-HTTP backend on the
// goroutine that handles it: the request is written, and the answer's
// headers and body read, on that goroutine, over a kept-alive connection.
// http.Transport writes each request on a goroutine of its own and reads
// each answer's headers on another, and on an idle machine waking those
// goroutines costs more than the rest of a small request: a bare reverse
// proxy answered 50–130 µs sooner, unloaded, with the request written
// and the answer read this way. The framing is net/http's own
// (Request.Write, ReadResponse); only keeping connections is done here.
//
// Everything else, and any backend reached over TLS or through a proxy,
// goes through http.Transport (routeTransport).

// routeTransport sends ctxproxy's intercepted chat requests through
// direct and every other request through std.
type routeTransport struct {
	std    *http.Transport
	direct *directTransport // nil: the backend is not plain HTTP
}

// newRouteTransport returns the transport of the reverse proxy to the
// backend at u, std carrying what direct does not.
func newRouteTransport(std *http.Transport, u *url.URL, cfg Config) *routeTransport {
	rt := &routeTransport{std: std}
	if u.Scheme != "http" {
		return rt
	}
	if std.Proxy != nil {
		probe := &http.Request{Method: http.MethodPost, URL: u, Header: http.Header{}}
		if p, err := std.Proxy(probe); err != nil || p != nil {
			return rt
		}
	}
	rt.direct = newDirectTransport(u.Host, cfg)
	return rt
}

func (rt *routeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if rt.direct != nil && exchangeFrom(r.Context()) != nil && r.URL.Scheme == "http" && r.Header.Get("Upgrade") == "" {
		return rt.direct.RoundTrip(r)
	}
	return rt.std.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of both transports.
func (rt *routeTransport) CloseIdleConnections() {
	rt.std.CloseIdleConnections()
	if rt.direct != nil {
		rt.direct.CloseIdleConnections()
	}
}

// directTransport keeps connections to one plain-HTTP backend address.
type directTransport struct {
	addr          string
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration
	idleTimeout   time.Duration
	maxIdle       int

	mu   sync.Mutex
	idle []*directConn // most recently used last
}

func newDirectTransport(addr string, cfg Config) *directTransport {
	cfg = cfg.withDefaults()
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "80")
	}
	return &directTransport{addr: addr,
		dial:          (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		headerTimeout: cfg.ResponseHeaderTimeout, idleTimeout: idleConnTimeout, maxIdle: cfg.MaxIdleConns}
}

// idleConnTimeout is how long a connection to the backend may wait in a
// pool, http.Transport's (NewTransport) or the direct transport's.
const idleConnTimeout = 90 * time.Second

// directConn is one connection to the backend.
type directConn struct {
	raw       net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// aLongTimeAgo is a deadline that has passed: setting it interrupts any
// read or write in progress.
var aLongTimeAgo = time.Unix(1, 0)

// RoundTrip sends r and returns the backend's answer. The answer's body
// reads the connection; once it is read to the end the connection goes
// back to the pool. When r's context ends first, the connection is cut
// and the error is the context's.
func (t *directTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	c, err := t.get(ctx)
	if err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fail(ctx, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.raw.SetDeadline(aLongTimeAgo) })
	resp, err := t.exchange(c, r)
	if err != nil {
		stop()
		c.raw.Close()
		return nil, fail(ctx, err)
	}
	reuse := !resp.Close && !r.Close
	if resp.Body == http.NoBody {
		t.release(c, stop, reuse)
		return resp, nil
	}
	resp.Body = &directBody{ReadCloser: resp.Body, t: t, c: c, ctx: ctx, stop: stop, reuse: reuse}
	return resp, nil
}

// exchange writes r on c and reads the answer's headers, within the
// response header timeout; informational (1xx) answers are skipped.
func (t *directTransport) exchange(c *directConn, r *http.Request) (*http.Response, error) {
	if err := c.write(r); err != nil {
		return nil, err
	}
	if t.headerTimeout > 0 {
		if err := c.raw.SetReadDeadline(time.Now().Add(t.headerTimeout)); err != nil {
			return nil, err
		}
	}
	for {
		resp, err := http.ReadResponse(c.br, r)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			resp.Body.Close()
			return nil, errors.New("the backend switched protocols on a request that did not ask to")
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			continue
		}
		if t.headerTimeout > 0 {
			if err := c.raw.SetReadDeadline(time.Time{}); err != nil {
				return nil, err
			}
			// A context that ended between the two deadlines had its
			// cut undone by the second.
			if err := r.Context().Err(); err != nil {
				return nil, err
			}
		}
		return resp, nil
	}
}

// fail is the error of a request whose context may have ended: the
// context's own error then, as http.Transport gives it.
func fail(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// release ends a request on c: c goes back to the pool when reuse holds
// and its context did not cut it, and is closed otherwise.
func (t *directTransport) release(c *directConn, stop func() bool, reuse bool) {
	if stop() && reuse {
		t.put(c)
		return
	}
	c.raw.Close()
}

// get returns a pooled connection that is still open, or dials one.
func (t *directTransport) get(ctx context.Context) (*directConn, error) {
	now := time.Now()
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		c := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if now.Sub(c.idleSince) < t.idleTimeout && c.br.Buffered() == 0 && open(c.raw) {
			return c, nil
		}
		c.raw.Close()
	}
	raw, err := t.dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	return &directConn{raw: raw, br: bufio.NewReaderSize(raw, 4<<10),
		bw: bufio.NewWriterSize(pooledConn{raw}, 4<<10)}, nil
}

// put returns c to the pool, closing it when the pool is full.
func (t *directTransport) put(c *directConn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	if len(t.idle) < t.maxIdle {
		t.idle = append(t.idle, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.raw.Close()
	}
}

// CloseIdleConnections closes the pooled connections.
func (t *directTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.raw.Close()
	}
}

// directBody is an answer's body: read to its end, it puts its connection
// back in the pool; closed before, or failing, it closes it.
type directBody struct {
	io.ReadCloser
	t     *directTransport
	c     *directConn
	ctx   context.Context
	stop  func() bool
	reuse bool
	done  atomic.Bool
}

func (b *directBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.finish(true)
	case err != nil:
		err = fail(b.ctx, err)
		b.finish(false)
	}
	return n, err
}

func (b *directBody) Close() error {
	b.finish(false)
	return nil
}

func (b *directBody) finish(complete bool) {
	if b.done.Swap(true) {
		return
	}
	b.t.release(b.c, b.stop, b.reuse && complete)
}

// maxGathered is the largest body written in one system call with its
// request's head; a larger one, or one of unknown length, is streamed.
const maxGathered = 4 << 20

// write sends r on c. A body of known length up to maxGathered goes out
// with the head in one vectored write: written as Request.Write does it,
// through a buffer, the head went first and a 100 KB chat followed in
// 32 KiB pieces, five writes to a backend that each could wake it.
func (c *directConn) write(r *http.Request) error {
	if r.ContentLength < 0 || r.ContentLength > maxGathered {
		if err := r.Write(c.bw); err != nil {
			return err
		}
		return c.bw.Flush()
	}
	g := gathers.Get().(*gather)
	defer g.release()
	// Room for the body and the read that finds its end, which
	// bytes.Buffer makes room for too.
	g.body.Grow(int(r.ContentLength) + bytes.MinRead)
	if err := r.Write(g); err != nil {
		return err
	}
	bufs := net.Buffers{g.Bytes(), g.body.Bytes()}
	_, err := bufs.WriteTo(c.raw)
	return err
}

// gather is the writer Request.Write is given to collect a request: its
// Buffer the head, body the body, which Request.Write hands to ReadFrom
// (behind an io.LimitedReader of its Content-Length). Being a
// bytes.Buffer, it is an io.ByteWriter, which keeps Request.Write from
// wrapping it in a bufio.Writer.
type gather struct {
	bytes.Buffer
	body bytes.Buffer
}

var gathers = sync.Pool{New: func() any { return new(gather) }}

// ReadFrom reads the request's body into g.body.
func (g *gather) ReadFrom(r io.Reader) (int64, error) { return g.body.ReadFrom(r) }

// release empties g and returns it to the pool, unless a large body made
// it too big to keep.
func (g *gather) release() {
	if g.body.Cap() > 1<<20 {
		g.body = bytes.Buffer{}
	}
	g.Reset()
	g.body.Reset()
	gathers.Put(g)
}
