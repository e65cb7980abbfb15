package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/fakebackend"
)

// TestSlowBodyCut: a client that sends its body a byte now and then is
// cut off once it falls below the minimum rate, instead of holding the
// connection for ever (slowloris). A 100,000-byte body would take 100 s
// at the test's rate, so its deadline moves with each read; a 1,000-byte
// one gets its whole time (grace + 1 s) at once.
func TestSlowBodyCut(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{Limits: Limits{MinBodyRate: 1000, BodyGrace: 300 * time.Millisecond}})
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
	_, px := newProxy(t, be.URL, Config{Limits: Limits{MaxInflight: 1, QueueWait: 100 * time.Millisecond}})
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
	_, px := newProxy(t, be.URL, Config{MaxBody: 4000, Limits: Limits{BodyMemory: 5000, QueueWait: 100 * time.Millisecond}})
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

// deadlineWriter is a ResponseWriter whose connection takes read
// deadlines, counting how often one is set.
type deadlineWriter struct {
	http.ResponseWriter
	sets int
	last time.Time
}

func (d *deadlineWriter) SetReadDeadline(t time.Time) error {
	d.sets++
	d.last = t
	return nil
}

// TestRateBodyDeadlines: a body the rate allows at most wholeBodyTime
// costs two deadline changes however it is read, the first its whole
// time; a longer one moves its deadline with every read. Both end with
// no deadline, so the answer may take its time.
func TestRateBodyDeadlines(t *testing.T) {
	g := newGate(Limits{MinBodyRate: 1000, BodyGrace: time.Second}, 1<<20, nil)
	for _, c := range []struct {
		size      int
		wantWhole bool
	}{{1000, true}, {10000, true}, {10001, false}, {20000, false}} {
		r := httptest.NewRequest(http.MethodPost, "/api/chat", iotest.OneByteReader(strings.NewReader(strings.Repeat("x", c.size))))
		r.ContentLength = int64(c.size)
		w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
		g.limitRate(w, r)
		first := w.last
		if want := time.Second + time.Duration(c.size)*time.Millisecond; c.wantWhole && time.Until(first) < want-time.Second {
			t.Errorf("%d bytes: first deadline %s away, want about %s", c.size, time.Until(first).Round(time.Millisecond), want)
		}
		if b, err := io.ReadAll(r.Body); err != nil || len(b) != c.size {
			t.Fatalf("%d bytes: read %d, %v", c.size, len(b), err)
		}
		if c.wantWhole && w.sets != 2 {
			t.Errorf("%d bytes: %d deadline changes, want 2 (set, clear)", c.size, w.sets)
		}
		if !c.wantWhole && w.sets < c.size {
			t.Errorf("%d bytes read a byte at a time: %d deadline changes, want one a read", c.size, w.sets)
		}
		if !w.last.IsZero() {
			t.Errorf("%d bytes: the deadline is still set after the body", c.size)
		}
	}
}
