package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/proxy/edge"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// TestSlowBodyCut: a client that sends its body a byte now and then is
// cut off once it falls below the minimum rate, instead of holding the
// connection for ever (slowloris). A 100,000-byte body would take 100 s
// at the test's rate, so its deadline moves with each read; a 1,000-byte
// one gets its whole time (grace + 1 s) at once.
func TestSlowBodyCut(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{Limits: edge.Limits{MinBodyRate: 1000, BodyGrace: 300 * time.Millisecond}})
	for _, c := range []struct{ path, length string }{
		{"/api/chat", "100000"}, {"/api/blobs/sha256:abc", "100000"}, {"/api/chat", "1000"}, {"/api/blobs/sha256:abc", "1000"},
	} {
		path := c.path + " with Content-Length " + c.length
		conn, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %s\r\n\r\n", c.path, c.length)
		start := time.Now()
		cut := make(chan time.Duration, 1)
		go func() {
			_, _ = io.Copy(io.Discard, conn) // ends when the server closes
			cut <- time.Since(start)
		}()
		for i := 0; i < 60; i++ {
			if _, err := conn.Write([]byte("{")); err != nil {
				break
			}
			select {
			case d := <-cut:
				t.Logf("%s: cut after %s", path, d.Round(time.Millisecond))
				conn.Close()
				goto next
			case <-time.After(100 * time.Millisecond):
			}
		}
		conn.Close()
		t.Errorf("%s: a body at 10 bytes a second was still read after 6 s", path)
	next:
	}
}

// TestInflightCap: beyond max_inflight a request waits queue_wait, then
// gets 503 with Retry-After; health checks and metrics still answer.
func TestInflightCap(t *testing.T) {
	stall := make(chan struct{})
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Stall: stall})
	_, px := newProxy(t, be.URL, Config{Limits: edge.Limits{MaxInflight: 1, QueueWait: 100 * time.Millisecond}})
	chat := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	var wg sync.WaitGroup
	wg.Go(func() {
		resp := post(t, px.URL+"/api/chat", chat, nil)
		io.Copy(io.Discard, resp.Body)
	})
	time.Sleep(100 * time.Millisecond) // the first is held by the backend
	resp := post(t, px.URL+"/api/chat", chat, nil)
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "requests in flight") {
		t.Errorf("second request: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	for _, p := range []string{"/ctxproxy/healthz", "/metrics"} {
		if r, err := http.Get(px.URL + p); err != nil || r.StatusCode != 200 {
			t.Errorf("%s while saturated: %v %v", p, err, r)
		}
	}
	close(stall)
	wg.Wait()
}

// TestBodyMemoryBudget: bodies held in memory are bounded, each charged
// what it costs to serve (twice its length: two 2 KB bodies do not fit in
// 5 KB); one that would pass the budget waits, then gets 503, and is
// served once room is back.
func TestBodyMemoryBudget(t *testing.T) {
	stall := make(chan struct{})
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Stall: stall})
	_, px := newProxy(t, be.URL, Config{MaxBody: 4000, Limits: edge.Limits{BodyMemory: 5000, QueueWait: 100 * time.Millisecond}})
	big := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`)
	var wg sync.WaitGroup
	wg.Go(func() {
		resp := post(t, px.URL+"/api/chat", big, nil)
		io.Copy(io.Discard, resp.Body)
	})
	time.Sleep(100 * time.Millisecond)
	resp := post(t, px.URL+"/api/chat", big, nil)
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "memory for request bodies") {
		t.Errorf("over the budget: %d %s", resp.StatusCode, body)
	}
	close(stall)
	wg.Wait()
	resp = post(t, px.URL+"/api/chat", big, nil)
	if io.Copy(io.Discard, resp.Body); resp.StatusCode != 200 {
		t.Errorf("after the budget came back: %d", resp.StatusCode)
	}
	_ = bytes.MinRead
}
