package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// memProbe reports one device with fixed memory.
type memProbe struct{ total, free uint64 }

func (memProbe) Name() string { return "nvidia" }
func (p memProbe) Devices(context.Context) ([]gpu.Device, error) {
	return []gpu.Device{{Vendor: "nvidia", Name: "Test GPU", Total: p.total, Used: p.total - p.free, Free: p.free}}, nil
}
func (memProbe) Close() error { return nil }

// fullServer is a Server with every part ctxproxy runs with: counting,
// trimming, num_ctx sizing from a fake GPU, and a file store.
func fullServer(t testing.TB, backendURL string) (*Server, string) {
	t.Helper()
	tokens := budget.NewRegistry(budget.Config{Encoding: tokenizer.EncodingApproximate,
		Models: map[string]budget.Model{"llama3.1": {MaxTokens: 4096, MaxOutputTokens: 512}}}, nil)
	trimmer, err := rewrite.NewTrimmer(rewrite.Config{Mode: "smart"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	gcfg := gpu.Config{}
	mon := gpu.NewMonitor(memProbe{total: 24 << 30, free: 16 << 30}, gcfg, gpu.MonitorOptions{
		Loaded: func(context.Context) ([]modelinfo.Loaded, error) {
			return []modelinfo.Loaded{{Name: "llama3.1:8b", Size: 6 << 30, SizeVRAM: 6 << 30, NumCtx: 8192}}, nil
		}})
	mon.Sample(context.Background())
	store, err := snapshots.Open(context.Background(), snapshots.Config{Store: "file", Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	writer := snapshots.NewWriter(store, snapshots.Config{}, nil)
	t.Cleanup(func() { writer.Close(context.Background()) })
	s, err := New(Config{Backend: backendURL}, Deps{Tokens: tokens, Trimmer: trimmer, Sizer: gpu.NewSizer(gcfg),
		Monitor: mon, Store: store, Writer: writer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// scrape reads /metrics into a map from "name{labels}" to value.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// longChat is an Ollama chat request of n turns of about 100 tokens each.
func longChat(n int, stream bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":"llama3.1:8b","stream":%v,"messages":[{"role":"system","content":"Be brief."}`, stream)
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `,{"role":%q,"content":%q}`, role, strings.Repeat(fmt.Sprintf("turn %d words ", i), 100))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func TestMetricsChangeAsRequestsFlow(t *testing.T) {
	hold := make(chan struct{})
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	s, base := fullServer(t, be.URL)

	before := scrape(t, base)
	for _, name := range []string{
		`ctxproxy_gpu_memory_total_bytes{device="0"}`, `ctxproxy_gpu_memory_used_bytes{device="0"}`,
		`ctxproxy_gpu_guard_level`, `ctxproxy_loaded_model_num_ctx{model="llama3.1:8b"}`,
		`ctxproxy_inflight_streams`, `ctxproxy_store_writes_total`, `ctxproxy_snapshots_total`,
		`ctxproxy_summarizer_failures_total{reason="timeout"}`, `ctxproxy_config_reloads_total{result="rejected"}`,
	} {
		if _, ok := before[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if got, want := before[`ctxproxy_gpu_memory_total_bytes{device="0"}`], float64(24<<30); got != want {
		t.Errorf("gpu total = %v, want %v", got, want)
	}
	if got, want := before[`ctxproxy_loaded_model_num_ctx{model="llama3.1:8b"}`], 8192.0; got != want {
		t.Errorf("loaded model num_ctx = %v, want %v", got, want)
	}

	// A small request, and a long one that must be trimmed.
	for i, body := range [][]byte{longChat(1, false), longChat(60, false)} {
		resp := post(t, base+"/api/chat", body, map[string]string{"X-Session-ID": fmt.Sprintf("metrics-session-%d", i)})
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}

	// A stream held open after its first chunk is in flight.
	be.SetOptions(fakebackend.Options{Reply: "streamed reply", Hold: hold})
	resp := post(t, base+"/api/chat", longChat(1, true), map[string]string{"X-Session-ID": "metrics-stream"})
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	during := scrape(t, base)
	if during["ctxproxy_inflight_streams"] != 1 || during["ctxproxy_inflight_requests"] < 1 {
		t.Errorf("during the stream: inflight_streams %v, inflight_requests %v; want 1 and ≥ 1",
			during["ctxproxy_inflight_streams"], during["ctxproxy_inflight_requests"])
	}
	close(hold)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	s.ObserveSummary(1500*time.Millisecond, nil)
	s.ObserveSummary(2*time.Second, fmt.Errorf("summarize: %w", context.DeadlineExceeded))
	s.ObserveSummary(100*time.Millisecond, errors.New("backend said no"))
	s.Apply(Settings{})
	s.ReloadRejected()

	// Session writes happen off the request path: wait for them.
	var after map[string]float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		after = scrape(t, base)
		written := after["ctxproxy_session_updates_total"] >= 3 && after["ctxproxy_snapshots_total"] >= 1
		if written && after["ctxproxy_inflight_requests"] == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	delta := func(name string) float64 { return after[name] - before[name] }
	tests := []struct {
		name   string
		metric string
		want   func(float64) bool
		says   string
	}{
		{"requests by route, dialect, status", `ctxproxy_requests_total{dialect="ollama",route="/api/chat",status="200"}`, eq(3), "3"},
		{"tokens before", `ctxproxy_prompt_tokens_before_count`, eq(3), "3"},
		{"tokens after", `ctxproxy_prompt_tokens_after_count`, eq(3), "3"},
		{"messages dropped", `ctxproxy_messages_dropped_total`, gt(0), "> 0"},
		{"num_ctx chosen", `ctxproxy_num_ctx_count`, eq(3), "3"},
		{"added latency", `ctxproxy_added_latency_seconds_count`, eq(3), "3"},
		{"summarizer calls", `ctxproxy_summarizer_calls_total`, eq(3), "3"},
		{"summarizer timeouts", `ctxproxy_summarizer_failures_total{reason="timeout"}`, eq(1), "1"},
		{"summarizer errors", `ctxproxy_summarizer_failures_total{reason="error"}`, eq(1), "1"},
		{"summarizer latency", `ctxproxy_summarizer_duration_seconds_sum`, eq(3.6), "3.6"},
		{"session updates", `ctxproxy_session_updates_total`, ge(3), "≥ 3"},
		{"store writes", `ctxproxy_store_writes_total`, ge(3), "≥ 3"},
		{"store bytes", `ctxproxy_store_write_bytes_total`, gt(0), "> 0"},
		{"snapshot before the first cut", `ctxproxy_snapshots_total`, ge(1), "≥ 1"},
		{"reloads applied", `ctxproxy_config_reloads_total{result="applied"}`, eq(1), "1"},
		{"reloads rejected", `ctxproxy_config_reloads_total{result="rejected"}`, eq(1), "1"},
		{"streams done", `ctxproxy_inflight_streams`, eq(0), "0"},
	}
	for _, tt := range tests {
		if got := delta(tt.metric); !tt.want(got) {
			t.Errorf("%s: %s changed by %v, want %s", tt.name, tt.metric, got, tt.says)
		}
	}
	if after["ctxproxy_config_last_reload_failed"] != 1 {
		t.Errorf("ctxproxy_config_last_reload_failed = %v, want 1", after["ctxproxy_config_last_reload_failed"])
	}

	// No session id, nor anything else a client invents, is a label.
	for name := range after {
		if strings.Contains(name, "metrics-") {
			t.Errorf("series %s carries a session id", name)
		}
	}
}

func eq(want float64) func(float64) bool {
	return func(got float64) bool { return got > want-1e-9 && got < want+1e-9 }
}
func gt(n float64) func(float64) bool { return func(got float64) bool { return got > n } }
func ge(n float64) func(float64) bool { return func(got float64) bool { return got >= n } }

// A model name a client invents never becomes a series: only models the
// backend has loaded are labels.
func TestMetricsModelLabelsBounded(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, base := fullServer(t, be.URL)
	for i := range 20 {
		body := fmt.Sprintf(`{"model":"invented-%d","stream":false,"messages":[{"role":"user","content":"hi"}]}`, i)
		resp := post(t, base+"/api/chat", []byte(body), nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for name := range scrape(t, base) {
		if strings.Contains(name, "invented-") {
			t.Errorf("series %s carries a client's model name", name)
		}
	}
}

// BenchmarkMetricsPerRequest is what one intercepted chat request costs in
// metrics: every observation logExchange, the recorder (metrics.recorded) and forward make.
// Compare it with BenchmarkPassthrough/proxy-chat-100KB, the whole request.
func BenchmarkMetricsPerRequest(b *testing.B) {
	s, err := New(Config{}, Deps{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	m := s.metrics
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			done := m.track(true)
			m.added.Observe(0.0004)
			m.requests.WithLabelValues("/api/chat", "ollama", "200").Inc()
			m.duration.WithLabelValues("/api/chat").Observe(0.2)
			m.tokensBefore.Observe(9000)
			m.tokensAfter.Observe(6000)
			m.dropped.Add(4)
			m.summarized.Add(0)
			m.observeNumCtx(16384)
			m.calibrationError.Observe(0.03)
			done()
		}
	})
}

// BenchmarkScrape is one Prometheus scrape of a server with every
// collector (GPU monitor, store, writer). It runs off the request path.
func BenchmarkScrape(b *testing.B) {
	be := fakebackend.New(b, fakebackend.Ollama, fakebackend.Options{})
	s, _ := fullServer(b, be.URL)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
	}
}

// BenchmarkChatWithMetrics is the whole request path with every part
// ctxproxy runs with (counting, trimming, num_ctx sizing, the session
// store) and every metric observed, for a 40-turn conversation that is
// trimmed. BenchmarkMetricsPerRequest is the metrics' share of it.
func BenchmarkChatWithMetrics(b *testing.B) {
	be := fakebackend.New(b, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	_, base := fullServer(b, be.URL)
	body := longChat(40, false)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(base+"/api/chat", "application/json", strings.NewReader(string(body)))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// TestStoreOperationMetrics: every operation of the session store is
// counted by store, operation and result, so a store that fails is seen
// per operation, and a miss is not counted as a failure.
func TestStoreOperationMetrics(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	ops := NewStoreOps()
	dir := t.TempDir()
	cfg := snapshots.Config{Dir: dir, Observe: ops.Observe}
	store, err := snapshots.NewFileStore(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := snapshots.NewWriter(store, cfg, nil)
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	s, err := New(Config{Backend: be.URL}, Deps{Store: store, Writer: w, StoreOps: ops}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	resp := post(t, ts.URL+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"X-Session-ID": "counted"})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(context.Background(), "never-sent"); !errors.Is(err, snapshots.ErrNotFound) {
		t.Fatalf("get of a missing session: %v", err)
	}
	m := scrape(t, ts.URL)
	for key, ok := range map[string]bool{
		// One turn is one update, and the one missing session one miss:
		// each operation counted once, not by the writer and the store both.
		`ctxproxy_store_operations_total{op="update",result="ok",store="file"}`:     m[`ctxproxy_store_operations_total{op="update",result="ok",store="file"}`] == 1,
		`ctxproxy_store_operations_total{op="get",result="not_found",store="file"}`: m[`ctxproxy_store_operations_total{op="get",result="not_found",store="file"}`] == 1,
		`ctxproxy_store_operations_total{op="update",result="error",store="file"}`:  m[`ctxproxy_store_operations_total{op="update",result="error",store="file"}`] == 0,
	} {
		if !ok {
			t.Errorf("%s = %v", key, m[key])
		}
	}
	if _, ok := m["ctxproxy_store_torn_logs_total"]; !ok {
		t.Error("ctxproxy_store_torn_logs_total is not served")
	}
}
