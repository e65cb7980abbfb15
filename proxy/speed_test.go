package proxy

// Benchmarks and allocation guards of the request path's plumbing
// (BENCHMARKS.md, scripts/bench.sh). The guards count allocations with
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

// rebuildBody edits a body in one copy; it must give what the member
// edits one after another give.
func TestRebuildBodyMatchesEditsInTurn(t *testing.T) {
	msgs := []rewrite.Message{{Role: "user", Content: "hi"}}
	for _, in := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a"}]}`,
		`{"model":"m","options":{"temperature":0.2},"messages":[],"stream":false}`,
		`{"options":{"num_ctx":1024,"seed":1},"messages":[{"role":"user","content":"a"}],"truncate":true}`,
		` { "messages" : [ ] , "options" : null } `,
		`{"messages":[{"role":"user","content":"a"}],"options":{}}`,
		`{"messages":[],"messages":[1]}`,
	} {
		for _, setMsgs := range []bool{false, true} {
			for _, numCtx := range []int{0, 8192} {
				for _, noTrunc := range []bool{false, true} {
					body := []byte(in)
					want := body
					var err error
					if setMsgs {
						arr, _ := encodeMessages(msgs)
						want, err = setMember(want, "messages", arr)
					}
					if err == nil && numCtx > 0 {
						want, err = setOption(want, "num_ctx", appendInt(nil, numCtx))
					}
					if err == nil && noTrunc {
						want, err = setMember(want, "truncate", []byte("false"))
					}
					if err != nil {
						t.Fatal(err)
					}
					for _, ms := range [][]member{nil, mustMembers(t, body)} {
						parts, err := rebuildBody(body, ms, msgs, setMsgs, numCtx, noTrunc)
						got := parts.bytes()
						if read, _ := io.ReadAll(parts.reader()); string(read) != string(got) {
							t.Errorf("the payload reads %s, joins %s", read, got)
						}
						if err != nil || string(got) != string(want) {
							t.Errorf("rebuildBody(%s, messages %v, num_ctx %d, truncate %v) = %s, %v; want %s",
								in, setMsgs, numCtx, noTrunc, got, err, want)
						}
					}
					if string(body) != in {
						t.Fatalf("the body was changed in place: %s", body)
					}
				}
			}
		}
	}
}

func mustMembers(t *testing.T, b []byte) []member {
	ms, err := members(b)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// A 100 KB chat whose num_ctx is set and truncate added: no copy of the
// body (the payload is its own bytes around the edits) and no scan of it
// (the members come from decodeChat).
func TestRebuildBodyAllocs(t *testing.T) {
	req, err := decodeChat(Ollama, chatBody100K())
	if err != nil {
		t.Fatal(err)
	}
	edit := func() {
		if _, err := rebuildBody(req.body, req.members, req.messages, false, 131072, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(20, edit); n > 12 {
		t.Errorf("%v allocations to set num_ctx and truncate, want at most 12", n)
	}
	// Setting them one after the other copied the body twice; splicing
	// them into one new body copied it once.
	if n := bytesPerRequest(20, edit); n > 1024 {
		t.Errorf("%d bytes allocated to edit a %d-byte body, want no copy of it", n, len(req.body))
	}
}

func BenchmarkRebuildBody(b *testing.B) {
	req, err := decodeChat(Ollama, chatBody100K())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("spliced", func(b *testing.B) {
		b.SetBytes(int64(len(req.body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rebuildBody(req.body, req.members, req.messages, false, 131072, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What the request path did before: each member set in turn, each
	// scanning and copying the body.
	b.Run("edits-in-turn", func(b *testing.B) {
		b.SetBytes(int64(len(req.body)))
		b.ReportAllocs()
		for b.Loop() {
			out, err := setOption(req.body, "num_ctx", appendInt(nil, 131072))
			if err == nil {
				_, err = setMember(out, "truncate", []byte("false"))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// loggedExchange is a counted, cut chat exchange as logExchange sees it.
func loggedExchange() (*recorder, *exchange) {
	m := newMetrics(prometheus.NewRegistry(), Deps{})
	rec := &recorder{metrics: m, log: slog.New(slog.DiscardHandler)}
	p := &plan{model: "llama3.1:8b", counter: budget.NewMessageCounter(budget.Approx{}, 0), limit: 8192, numCtx: 8192,
		before: budget.Estimate{Tokens: 9000}, after: budget.Estimate{Tokens: 5000},
		result: rewrite.Result{Dropped: 10, Notice: "Context trimmed."}}
	return rec, &exchange{dialect: Ollama, route: "/api/chat", model: p.model, session: "s1", status: 200,
		start: time.Now(), plan: p}
}

// With the log level above info, logging an exchange builds no
// attributes: only the metrics are updated.
func TestLogExchangeAllocsWhenNotLogged(t *testing.T) {
	rec, ex := loggedExchange()
	if n := testing.AllocsPerRun(100, func() { rec.logExchange(ex) }); n > 4 {
		t.Errorf("%v allocations per exchange with logging off, want at most 4", n)
	}
}

func BenchmarkLogExchange(b *testing.B) {
	rec, ex := loggedExchange()
	b.ReportAllocs()
	for b.Loop() {
		rec.logExchange(ex)
	}
}
