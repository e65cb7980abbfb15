package proxy

// Benchmarks and allocation guards of the request path's plumbing
// (docs/benchmarks.md, scripts/bench.sh). The guards count allocations with
// generous ceilings; no test here asserts a time.

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// bytesPerRequest is the heap the whole process allocates per call of
// fn, averaged over n calls.
func bytesPerRequest(n int, fn func()) uint64 {
	fn() // connections, pools
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range n {
		fn()
	}
	runtime.ReadMemStats(&b)
	return (b.TotalAlloc - a.TotalAlloc) / uint64(n)
}

func TestBufferPoolAllocs(t *testing.T) {
	p := newBufferPool()
	p.Put(p.Get())
	if n := testing.AllocsPerRun(100, func() { p.Put(p.Get()) }); n > 1 {
		t.Errorf("%v allocations per Get and Put, want none", n)
	}
	if got := len(p.Get()); got != copyBufferSize {
		t.Errorf("buffer of %d bytes, want %d", got, copyBufferSize)
	}
	p.Put(make([]byte, 10)) // dropped, not handed out later
	if got := len(p.Get()); got != copyBufferSize {
		t.Errorf("after a foreign Put: buffer of %d bytes", got)
	}
}

// passthroughServer is ctxproxy in front of a backend answering a small
// JSON body, with a client that keeps its connection.
func passthroughServer(t testing.TB) (url string, client *http.Client) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"models":[{"name":"llama3.1:8b"}]}`)
	}))
	t.Cleanup(backend.Close)
	s, err := New(Config{Backend: backend.URL}, Deps{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(s)
	t.Cleanup(px.Close)
	return px.URL, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
}

func getTags(t testing.TB, client *http.Client, url string) {
	resp, err := client.Get(url + "/api/tags")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// A passthrough copies the response through a pooled buffer: the 32 KiB
// copy buffer ReverseProxy allocates without a pool was most of what a
// small proxied request allocated.
func TestPassthroughBytesPerRequest(t *testing.T) {
	url, client := passthroughServer(t)
	// Client, ctxproxy and backend together; about 14 KB with the pool,
	// 47 KB without.
	if n := bytesPerRequest(200, func() { getTags(t, client, url) }); n > 32<<10 {
		t.Errorf("%d bytes allocated per passthrough request, want under 32 KiB (is the copy buffer pooled?)", n)
	}
}

func BenchmarkPassthroughTags(b *testing.B) {
	url, client := passthroughServer(b)
	b.ReportAllocs()
	for b.Loop() {
		getTags(b, client, url)
	}
}

// loggedExchange is a counted, cut chat exchange as logExchange sees it.
func loggedExchange() (*metrics, *exchange, *plan.Plan) {
	m := newMetrics(prometheus.NewRegistry(), Deps{})
	p := &plan.Plan{Model: "llama3.1:8b", Counter: budget.NewMessageCounter(tokenizer.Approx{}, 0), Limit: 8192, NumCtx: 8192,
		Before: budget.Estimate{Tokens: 9000}, After: budget.Estimate{Tokens: 5000},
		Result: rewrite.Result{Dropped: 10, Notice: "Context trimmed."}}
	return m, &exchange{dialect: wire.Ollama, route: "/api/chat", model: p.Model, session: "s1", status: 200,
		start: time.Now()}, p
}

// With the log level above info, logging an exchange builds no
// attributes: only the metrics are updated.
func TestLogExchangeAllocsWhenNotLogged(t *testing.T) {
	m, ex, p := loggedExchange()
	log := slog.New(slog.DiscardHandler)
	if n := testing.AllocsPerRun(100, func() { logExchange(log, m, ex, p) }); n > 4 {
		t.Errorf("%v allocations per exchange with logging off, want at most 4", n)
	}
}

func BenchmarkLogExchange(b *testing.B) {
	m, ex, p := loggedExchange()
	log := slog.New(slog.DiscardHandler)
	b.ReportAllocs()
	for b.Loop() {
		logExchange(log, m, ex, p)
	}
}
