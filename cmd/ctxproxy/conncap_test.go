package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// fakeConn is a connection that only records being closed.
type fakeConn struct {
	net.Conn
	closed atomic.Bool
}

func (f *fakeConn) Close() error {
	f.closed.Store(true)
	return nil
}

// testCap is a connCap of max connections on a clock the test moves.
func testCap(max int) (*connCap, *time.Time) {
	now := time.Unix(1_000_000, 0)
	c := newConnCap(max, prometheus.NewRegistry())
	c.now = func() time.Time { return now }
	return c, &now
}

// TestConnCapClosesLongestIdle: at the cap a newcomer takes the place of
// the connection idle longest, provided it has been idle minIdle; busy
// connections and those yet to send a request are never closed for it.
func TestConnCapClosesLongestIdle(t *testing.T) {
	c, now := testCap(3)
	a, b, d := &fakeConn{}, &fakeConn{}, &fakeConn{}
	for _, conn := range []*fakeConn{a, b, d} {
		c.track(conn, http.StateNew)
	}
	c.track(b, http.StateIdle) // b idle first
	*now = now.Add(time.Second)
	c.track(a, http.StateIdle)
	*now = now.Add(time.Second)

	// d has sent nothing and a and b are idle: b goes.
	e := &fakeConn{}
	c.track(e, http.StateNew)
	if !b.closed.Load() || a.closed.Load() || d.closed.Load() || e.closed.Load() {
		t.Fatalf("closed: a %v b %v d %v newcomer %v; want b only", a.closed.Load(), b.closed.Load(), d.closed.Load(), e.closed.Load())
	}
	c.track(b, http.StateClosed) // reported later; b is already out
	if n := testutil.ToFloat64(c.idleClosed); n != 1 {
		t.Errorf("idle closed %v, want 1", n)
	}

	// a turns active again: nothing is idle, so the next one is refused.
	c.track(a, http.StateActive)
	f := &fakeConn{}
	c.track(f, http.StateNew)
	if !f.closed.Load() || a.closed.Load() {
		t.Fatalf("with every connection busy: newcomer closed %v, a closed %v", f.closed.Load(), a.closed.Load())
	}
	c.track(f, http.StateClosed)
	if n := testutil.ToFloat64(c.refused); n != 1 {
		t.Errorf("refused %v, want 1", n)
	}

	// Idle less than minIdle is not idle enough.
	c.track(a, http.StateIdle)
	*now = now.Add(c.minIdle - time.Millisecond)
	g := &fakeConn{}
	c.track(g, http.StateNew)
	if !g.closed.Load() || a.closed.Load() {
		t.Fatalf("a just idle: newcomer closed %v, a closed %v", g.closed.Load(), a.closed.Load())
	}
	*now = now.Add(time.Millisecond)
	h := &fakeConn{}
	c.track(h, http.StateNew)
	if h.closed.Load() || !a.closed.Load() {
		t.Fatalf("a idle minIdle: newcomer closed %v, a closed %v", h.closed.Load(), a.closed.Load())
	}
	if n := testutil.ToFloat64(c.idleClosed); n != 2 {
		t.Errorf("idle closed %v, want 2", n)
	}
	for _, conn := range []*fakeConn{a, d, e, h} {
		c.track(conn, http.StateClosed)
	}
	if len(c.open) != 0 || c.idle.Len() != 0 {
		t.Errorf("all closed, yet %d open and %d idle", len(c.open), c.idle.Len())
	}
}

// TestConnCapConcurrent runs connections through their states from many
// goroutines (go test -race): the cap holds at every arrival, and every
// connection is counted out once closed.
func TestConnCapConcurrent(t *testing.T) {
	const max = 4
	c := newConnCap(max, prometheus.NewRegistry())
	c.minIdle = 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				conn := &fakeConn{}
				c.track(conn, http.StateNew)
				c.mu.Lock()
				n := len(c.open)
				c.mu.Unlock()
				if n > max {
					t.Errorf("%d open, more than %d", n, max)
				}
				for _, s := range []http.ConnState{http.StateActive, http.StateIdle, http.StateActive, http.StateIdle} {
					if conn.closed.Load() {
						break
					}
					c.track(conn, s)
				}
				c.track(conn, http.StateClosed)
			}
		})
	}
	wg.Wait()
	if len(c.open) != 0 || c.idle.Len() != 0 {
		t.Errorf("all closed, yet %d open and %d idle", len(c.open), c.idle.Len())
	}
}

// clientConn is one keep-alive connection to the proxy.
type clientConn struct {
	net.Conn
	r *bufio.Reader
}

// do sends a request and reads its whole answer; the connection stays
// open.
func (c *clientConn) do(addr, method, path, body string) (int, string, error) {
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := req.Write(c.Conn); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(c.r, req)
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), err
}

// request sends a request on a new connection, dialling again while the
// proxy closes the newcomer (until room is made), and returns the
// connection, left open, with the answer.
func request(t *testing.T, addr, method, path, body string) (*clientConn, int, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			c := &clientConn{Conn: conn, r: bufio.NewReader(conn)}
			var status int
			var text string
			if status, text, err = c.do(addr, method, path, body); err == nil {
				return c, status, text
			}
			conn.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s on a new connection: %v", method, path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counter reads a counter from the proxy's /metrics on a new connection,
// closed after (dialling again while the proxy refuses it).
func counter(t *testing.T, addr, name string) int {
	t.Helper()
	c, _, text := request(t, addr, http.MethodGet, "/metrics", "")
	c.Close()
	m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s not in /metrics", name)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// closedByPeer reports whether the proxy has closed c: a read ends in EOF
// or a reset rather than running into its deadline.
func closedByPeer(c *clientConn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.r.ReadByte()
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

const chatBody = `{"model":"llama3.1","stream":false,"messages":[{"role":"user","content":"hi"}]}`

// TestServeIdleConnectionsMakeRoom: ten clients holding idle keep-alive
// connections at limits.max_connections 10 do not lock anyone out: a
// health check, a readiness check and a chat from new connections are
// answered, each in place of an idle one (which one is
// TestConnCapClosesLongestIdle's).
func TestServeIdleConnectionsMakeRoom(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "pong"})
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, map[string]string{"CTXPROXY_LIMITS_MAX_CONNECTIONS": "10"})
	defer stop()
	http.DefaultClient.CloseIdleConnections() // startServe's polling
	var held []*clientConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 10 {
		c, status, _ := request(t, addr, http.MethodGet, "/ctxproxy/healthz", "")
		if status != http.StatusOK {
			t.Fatalf("healthz: %d", status)
		}
		held = append(held, c)
	}
	for _, r := range []struct{ method, path, body string }{
		{http.MethodGet, "/ctxproxy/healthz", ""},
		{http.MethodGet, "/ctxproxy/readyz", ""},
		{http.MethodPost, "/api/chat", chatBody},
	} {
		c, status, text := request(t, addr, r.method, r.path, r.body)
		held = append(held, c)
		if status != http.StatusOK {
			t.Errorf("%s at the cap: %d %s", r.path, status, text)
		}
	}
	if n := counter(t, addr, "ctxproxy_connections_idle_closed_total"); n < 3 {
		t.Errorf("ctxproxy_connections_idle_closed_total %d, want at least 3", n)
	}
	// The ten first held either were closed to make room or still work.
	closed := 0
	for i, c := range held[:10] {
		status, _, err := c.do(addr, http.MethodGet, "/ctxproxy/healthz", "")
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Errorf("connection %d neither answered nor closed", i)
		case err != nil:
			closed++
		case status != http.StatusOK:
			t.Errorf("connection %d: healthz %d", i, status)
		}
	}
	if closed < 3 {
		t.Errorf("%d of the idle connections closed to make room, want at least 3", closed)
	}
}

// TestServeBusyConnectionsRefuseNewcomers: at limits.max_connections 10
// with ten requests whose bodies are still arriving, a new connection is
// closed on arrival and counted, and the ten complete.
func TestServeBusyConnectionsRefuseNewcomers(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "pong"})
	addr, _, stop := startServe(t, []string{"--backend", be.URL}, map[string]string{"CTXPROXY_LIMITS_MAX_CONNECTIONS": "10"})
	defer stop()
	http.DefaultClient.CloseIdleConnections() // startServe's polling
	head := fmt.Sprintf("POST /api/chat HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", addr, len(chatBody))
	var held []*clientConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(held) < 10 {
		// The proxy asking for the body ("100 Continue") shows the
		// request is under way; a connection closed instead was refused
		// while startServe's was still counted, and is dialled again.
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c := &clientConn{Conn: conn, r: bufio.NewReader(conn)}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, head)
		line, err := c.r.ReadString('\n')
		if err == nil && strings.HasPrefix(line, "HTTP/1.1 100 ") {
			c.r.ReadString('\n') // the blank line ending it
			held = append(held, c)
			continue
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a request did not get under way: %q %v", line, err)
		}
	}

	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(extra, "GET /ctxproxy/healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	if !closedByPeer(&clientConn{Conn: extra, r: bufio.NewReader(extra)}) {
		t.Errorf("an eleventh connection was served or left open")
	}
	extra.Close()

	for i, c := range held {
		io.WriteString(c, chatBody)
		resp, err := http.ReadResponse(c.r, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("request %d: %d", i, resp.StatusCode)
		}
		c.Close()
	}
	if n := counter(t, addr, "ctxproxy_connections_refused_total"); n < 1 {
		t.Errorf("ctxproxy_connections_refused_total %d, want at least 1", n)
	}
}
