package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// lateEOF holds a request body's last read (the one that finds its end)
// until the answer's headers have gone to the client: the order in which a
// busy machine may run the transport's goroutine that writes the request
// and the handler that copies the answer.
type lateEOF struct {
	io.ReadCloser
	answered <-chan struct{}
	n, size  int64
}

func (b *lateEOF) Read(p []byte) (int, error) {
	if b.n == b.size {
		<-b.answered
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// headersSeen closes seen when the answer's headers are flushed.
type headersSeen struct {
	http.ResponseWriter
	seen chan struct{}
	done bool
}

func (h *headersSeen) Flush() {
	h.ResponseWriter.(http.Flusher).Flush()
	if !h.done {
		h.done = true
		close(h.seen)
	}
}

func (h *headersSeen) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// TestPassthroughStreamEnds sends streamed pass-through requests (as
// "ollama pull" does: a small JSON body, an NDJSON answer ending in an
// error line) and checks every answer arrives whole. With HTTP/1, Go's
// server drains and closes a request body once the handler's answer is
// under way, unless the handler asked for full duplex; the transport's
// last read of that body then failed, and the transport closed the
// backend connection under the answer.
func TestPassthroughStreamEnds(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Model string }
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range 5 {
			fmt.Fprintf(w, "{\"status\":\"step %d\"}\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "{\"error\":\"pull model manifest: file does not exist\"}\n")
	}))
	t.Cleanup(be.Close)
	s, _ := newProxy(t, be.URL, Config{})
	px := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs := &headersSeen{ResponseWriter: w, seen: make(chan struct{})}
		r.Body = &lateEOF{ReadCloser: r.Body, answered: hs.seen, size: r.ContentLength}
		s.ServeHTTP(hs, r)
	}))
	t.Cleanup(px.Close)
	for i := range 20 {
		body := strings.NewReader(fmt.Sprintf(`{"model":"127.0.0.1:1/library/m%d","insecure":true}`, i))
		resp, err := http.Post(px.URL+"/api/pull", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sc := bufio.NewScanner(bytes.NewReader(b))
		last := ""
		for sc.Scan() {
			last = sc.Text()
		}
		if !strings.Contains(last, `"error"`) {
			t.Fatalf("run %d: the answer lost its end; got %q", i, b)
		}
	}
}

// TestEarlyAnswer: a backend that answers before it reads a large body
// (Ollama's blob upload when the blob exists, a size limit, an
// authentication error) gets its answer to the client every time, on a
// pass-through route and on a chat route.
func TestEarlyAnswer(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		fmt.Fprint(w, `{"error":"too large for this backend"}`)
	}))
	t.Cleanup(be.Close)
	_, px := newProxy(t, be.URL, Config{MaxBody: 8 << 20})
	chat := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"` + strings.Repeat("x", 2<<20) + `"}]}`)
	blob := bytes.Repeat([]byte{7}, 2<<20)
	for _, c := range []struct {
		path string
		body []byte
	}{{"/api/blobs/sha256:00", blob}, {"/api/chat", chat}} {
		for i := range 60 {
			resp, err := http.Post(px.URL+c.path, "application/octet-stream", bytes.NewReader(c.body))
			if err != nil {
				t.Fatalf("%s run %d: %v", c.path, i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "too large for this backend") {
				t.Fatalf("%s run %d: %d %s", c.path, i, resp.StatusCode, b)
			}
		}
	}
}

// TestFullDuplexBackend: a backend that answers while it reads the
// request (its answer's headers first, then a line for each piece of the
// body it reads) is served on every route.
func TestFullDuplexBackend(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		buf := make([]byte, 64<<10)
		total := 0
		for {
			n, err := r.Body.Read(buf)
			total += n
			if n > 0 {
				fmt.Fprintf(w, "{\"read\":%d}\n", total)
				w.(http.Flusher).Flush()
			}
			if err != nil {
				break
			}
		}
		fmt.Fprintf(w, "{\"done\":true,\"total\":%d}\n", total)
	}))
	t.Cleanup(be.Close)
	_, px := newProxy(t, be.URL, Config{MaxBody: 8 << 20})
	chat := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}]}`)
	for _, path := range []string{"/api/blobs/sha256:00", "/api/chat"} {
		resp, err := http.Post(px.URL+path, "application/json", bytes.NewReader(chat))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf(`{"done":true,"total":%d}`, len(chat)); !strings.Contains(string(b), want) {
			t.Errorf("%s: %d, answer ends %q, want %s", path, resp.StatusCode, b[max(0, len(b)-80):], want)
		}
	}
}

// TestHugeResponseHeaders: a backend's response headers are bounded (a
// backend that sends megabytes of them gets a 502, not ctxproxy's memory).
func TestHugeResponseHeaders(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 40 {
			w.Header().Set(fmt.Sprintf("X-Big-%d", i), strings.Repeat("h", 64<<10))
		}
		fmt.Fprint(w, `{}`)
	}))
	t.Cleanup(be.Close)
	_, px := newProxy(t, be.URL, Config{})
	for _, path := range []string{"/api/tags", "/api/chat"} {
		resp := post(t, px.URL+path, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: %d, want 502", path, resp.StatusCode)
		}
	}
}
