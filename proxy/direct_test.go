package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rawBackend is a TCP server that hands each connection to serve and
// counts the connections it accepted.
type rawBackend struct {
	ln      net.Listener
	accepts atomic.Int32
}

func newRawBackend(t *testing.T, serve func(c net.Conn)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepts.Add(1)
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return b
}

// answerEach reads requests from c and answers each with answer(n), n
// counting from 0 on the connection, until the client closes it or
// answer returns "" (the connection is then closed).
func answerEach(answer func(n int, r *http.Request) string) func(net.Conn) {
	return func(c net.Conn) {
		br := bufio.NewReader(c)
		for n := 0; ; n++ {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			a := answer(n, r)
			if a == "" {
				return
			}
			if _, err := io.WriteString(c, a); err != nil {
				return
			}
		}
	}
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

func directPost(ctx context.Context, t *testing.T, tr *directTransport, addr string) (*http.Response, error) {
	t.Helper()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/chat", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(r)
}

// mustRead returns a reader of an answer's body that fails t on any error.
func mustRead(t *testing.T) func(*http.Response, error) string {
	return func(resp *http.Response, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return readAll(t, resp.Body)
	}
}

// TestDirectReusesConnections: answers read to their end leave their
// connection for the next request; a backend's Connection: close, or an
// answer closed before its end, does not.
func TestDirectReusesConnections(t *testing.T) {
	be := newRawBackend(t, answerEach(func(n int, r *http.Request) string {
		if r.Header.Get("X-Close") != "" {
			return strings.Replace(okAnswer, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
		}
		return okAnswer
	}))
	addr := be.ln.Addr().String()
	tr := newDirectTransport(addr, Config{})
	for range 3 {
		if got := mustRead(t)(directPost(context.Background(), t, tr, addr)); got != `{"ok":true}` {
			t.Fatalf("answer %q", got)
		}
	}
	if n := be.accepts.Load(); n != 1 {
		t.Fatalf("3 requests took %d connections, want 1", n)
	}
	// Closed before its end: the connection is not reused.
	resp, err := directPost(context.Background(), t, tr, addr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mustRead(t)(directPost(context.Background(), t, tr, addr))
	if n := be.accepts.Load(); n != 2 {
		t.Fatalf("after an answer closed unread: %d connections, want 2", n)
	}
	// Connection: close from the backend.
	r, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/chat", strings.NewReader("{}"))
	r.Header.Set("X-Close", "1")
	mustRead(t)(tr.RoundTrip(r))
	mustRead(t)(directPost(context.Background(), t, tr, addr))
	if n := be.accepts.Load(); n != 3 {
		t.Fatalf("after Connection: close: %d connections, want 3", n)
	}
}

// TestDirectStaleConnection: a backend that drops an idle connection (as
// Ollama does after its keep-alive) costs the next request nothing: the
// pooled connection is found closed and a new one dialed.
func TestDirectStaleConnection(t *testing.T) {
	be := newRawBackend(t, func(c net.Conn) {
		// One answer, then the connection is closed, without a
		// Connection: close to say so.
		if r, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(c, okAnswer)
		}
	})
	addr := be.ln.Addr().String()
	tr := newDirectTransport(addr, Config{})
	for i := range 3 {
		mustRead(t)(directPost(context.Background(), t, tr, addr))
		// The backend closes its side after the answer; give the end of
		// stream time to arrive before the next request looks.
		deadline := time.Now().Add(5 * time.Second)
		for {
			tr.mu.Lock()
			stale := len(tr.idle) == 1 && !open(tr.idle[0].raw)
			tr.mu.Unlock()
			if stale || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if n := int(be.accepts.Load()); n != i+1 {
			t.Fatalf("request %d: %d connections", i, n)
		}
	}
}

// TestDirectOpen: open tells a quiet connection from one its peer closed
// or wrote to unasked.
func TestDirectOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func() (client, server net.Conn) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	waitFor := func(c net.Conn, want bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for open(c) != want {
			if time.Now().After(deadline) {
				t.Fatalf("open = %v, want %v", !want, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	c, s := dial()
	if !open(c) {
		t.Fatal("a quiet connection is not open")
	}
	s.Close()
	waitFor(c, false)
	c.Close()
	c, s = dial()
	fmt.Fprint(s, "x")
	waitFor(c, false)
	c.Close()
	s.Close()
}

// TestDirectCancel: a client that goes away mid-answer cuts the backend
// connection at once; the error is the context's, and the connection is
// not pooled.
func TestDirectCancel(t *testing.T) {
	release := make(chan struct{})
	be := newRawBackend(t, answerEach(func(n int, r *http.Request) string {
		if n > 0 {
			return ""
		}
		return "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{\"a\":1\r\n"
	}))
	defer close(release)
	addr := be.ln.Addr().String()
	tr := newDirectTransport(addr, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := directPost(ctx, t, tr, addr)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(buf) // the backend sends nothing more
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("read after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read was still waiting 5 s after its context ended")
	}
	resp.Body.Close()
	if len(tr.idle) != 0 {
		t.Fatal("a cut connection went back to the pool")
	}
	// Canceled before anything was sent: the context's error.
	if _, err := directPost(ctx, t, tr, addr); !errors.Is(err, context.Canceled) {
		t.Fatalf("request on an ended context: %v", err)
	}
}

// TestDirectHeaderTimeout: a backend that sends no headers within
// response_header_timeout fails the request with a timeout (504 from the
// proxy), and one that does answer in time is read to the end well past
// it.
func TestDirectHeaderTimeout(t *testing.T) {
	be := newRawBackend(t, answerEach(func(n int, r *http.Request) string {
		if r.Header.Get("X-Slow") != "" {
			time.Sleep(2 * time.Second)
			return ""
		}
		return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	}))
	addr := be.ln.Addr().String()
	tr := newDirectTransport(addr, Config{ResponseHeaderTimeout: 100 * time.Millisecond})
	r, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/chat", strings.NewReader("{}"))
	r.Header.Set("X-Slow", "1")
	_, err := tr.RoundTrip(r)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("slow headers: %v, want a timeout", err)
	}
	// Headers in time, then a body slower than the header timeout: the
	// deadline no longer applies.
	resp, err := directPost(context.Background(), t, tr, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 1))
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the body's read ended after the header timeout: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestDirectInformational: 1xx answers before the real one are skipped.
func TestDirectInformational(t *testing.T) {
	be := newRawBackend(t, answerEach(func(int, *http.Request) string {
		return "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + okAnswer
	}))
	addr := be.ln.Addr().String()
	tr := newDirectTransport(addr, Config{})
	resp, err := directPost(context.Background(), t, tr, addr)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := mustRead(t)(resp, nil); got != `{"ok":true}` {
		t.Fatalf("answer %q", got)
	}
}

// TestDirectPoolBound: at most max_idle_conns connections wait in the
// pool.
func TestDirectPoolBound(t *testing.T) {
	be := newRawBackend(t, answerEach(func(int, *http.Request) string { return okAnswer }))
	addr := be.ln.Addr().String()
	tr := newDirectTransport(addr, Config{MaxIdleConns: 2})
	var open []*http.Response
	for range 4 {
		resp, err := directPost(context.Background(), t, tr, addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
	}
	for _, resp := range open {
		mustRead(t)(resp, nil)
	}
	if n := len(tr.idle); n != 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}
	tr.CloseIdleConnections()
	if n := len(tr.idle); n != 0 {
		t.Fatalf("%d idle connections after closing them", n)
	}
}

// TestRouteTransport: only ctxproxy's intercepted requests to a plain-HTTP
// backend take the direct path; TLS and proxied backends never do.
func TestRouteTransport(t *testing.T) {
	std := NewTransport(Config{})
	for _, c := range []struct {
		backend string
		direct  bool
	}{
		{"http://127.0.0.1:11434", true},
		{"http://localhost:11434", true},
		{"https://api.example.com", false},
	} {
		u, _ := url.Parse(c.backend)
		if got := newRouteTransport(std, u, Config{}).direct != nil; got != c.direct {
			t.Errorf("%s: direct %v, want %v", c.backend, got, c.direct)
		}
	}
	proxied := &http.Transport{Proxy: func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy.example.com:3128") }}
	u, _ := url.Parse("http://ollama.internal:11434")
	if newRouteTransport(proxied, u, Config{}).direct != nil {
		t.Error("a backend reached through a proxy took the direct path")
	}
	// A request that is not an intercepted chat goes through std.
	be := newRawBackend(t, answerEach(func(int, *http.Request) string { return okAnswer }))
	addr := be.ln.Addr().String()
	bu, _ := url.Parse("http://" + addr)
	rt := newRouteTransport(std, bu, Config{})
	r, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/tags", nil)
	mustRead(t)(rt.RoundTrip(r))
	if len(rt.direct.idle) != 0 {
		t.Error("a passthrough request went the direct path")
	}
	r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, &exchange{}))
	mustRead(t)(rt.RoundTrip(r))
	if len(rt.direct.idle) != 1 {
		t.Error("an intercepted request did not go the direct path")
	}
	rt.CloseIdleConnections()
}

// BenchmarkDirect sends a small chat and reads its answer over the direct
// transport and over http.Transport (NewTransport), to a backend on
// loopback: the time and allocations each costs a request.
func BenchmarkDirect(b *testing.B) {
	be := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"message":{"role":"assistant","content":"The sea is wide."},"done":true}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = be.Serve(ln) }()
	defer be.Close()
	u, _ := url.Parse("http://" + ln.Addr().String() + "/api/chat")
	body := []byte(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"Write one sentence about the sea."}]}`)
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"direct", newDirectTransport(u.Host, Config{})},
		{"transport", NewTransport(Config{})},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := &http.Request{Method: http.MethodPost, URL: u, Host: u.Host, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(string(body))), ContentLength: int64(len(body))}
				resp, err := c.rt.RoundTrip(r)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// TestDirectBodies: request bodies of every kind reach the backend whole:
// empty, small and 100 KB ones gathered with their head into one write,
// one larger than maxGathered and one of unknown length streamed.
func TestDirectBodies(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %s %s", len(b), r.Header.Get("X-Sum"), r.TransferEncoding)
		if sum := fmt.Sprint(checksum(b)); sum != r.Header.Get("X-Sum") {
			t.Errorf("body of %d bytes arrived changed", len(b))
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	addr := ln.Addr().String()
	tr := newDirectTransport(addr, Config{})
	var writes atomic.Int64 // countingConn, server_test.go
	dial := tr.dial
	tr.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		return countingConn{c, &writes}, err
	}
	for _, size := range []int{0, 1, 200, 100 << 10, maxGathered, maxGathered + 1} {
		for _, unknown := range []bool{false, true} {
			body := make([]byte, size)
			for i := range body {
				body[i] = byte('a' + i%23)
			}
			r, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/chat", io.NopCloser(strings.NewReader(string(body))))
			r.ContentLength = int64(size)
			if unknown {
				r.ContentLength = -1
			}
			r.Header.Set("X-Sum", fmt.Sprint(checksum(body)))
			writes.Store(0)
			answer := mustRead(t)(tr.RoundTrip(r))
			// Gathered: the head and the body in one vectored write, or
			// two writes on a connection that cannot take one (this one).
			if n := writes.Load(); !unknown && size <= maxGathered && n > 2 {
				t.Errorf("%d bytes took %d writes, want the head and the body in one", size, n)
			}
			if !strings.HasPrefix(answer, fmt.Sprintf("%d %d", size, checksum(body))) {
				t.Errorf("%d bytes (unknown length %v): the backend answered %q", size, unknown, answer)
			}
		}
	}
	if n := len(tr.idle); n != 1 {
		t.Errorf("%d idle connections after sequential requests, want 1", n)
	}
}

func checksum(b []byte) uint32 { return crc32.ChecksumIEEE(b) }
