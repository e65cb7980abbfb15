package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/gpu"
)

// With several servers /metrics has each one's series, labelled with
// its name; with one it has none of them.
func TestMetricsPerServer(t *testing.T) {
	single, err := New(Config{Backend: "http://127.0.0.1:1"}, Deps{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name := range scrape(t, serve(t, single)) {
		if strings.HasPrefix(name, "ctxproxy_backend_server_") {
			t.Errorf("one backend has the per-server series %s", name)
		}
	}

	mon := gpu.NewMonitor(memProbe{total: 24 << 30, free: 16 << 30}, gpu.Config{}, gpu.MonitorOptions{Logger: slog.New(slog.DiscardHandler)})
	mon.Sample(context.Background())
	server := func(name, raw string, mem fleet.Memory) *fleet.Node {
		u, _ := url.Parse(raw)
		be := backend.New(backend.Config{URL: u, Kind: backend.KindOllama, Client: &http.Client{}, Log: slog.New(slog.DiscardHandler)})
		return &fleet.Node{Name: name, URL: u, Backend: be, Memory: mem}
	}
	a, b := server("gpu1", "http://127.0.0.1:1", fleet.Local{Monitor: mon}), server("gpu2", "http://127.0.0.1:2", nil)
	a.Begin()
	defer a.End()
	b.Begin()
	b.End()
	b.Begin()
	b.End()
	b.Failed("connection refused")
	r, err := fleet.New([]*fleet.Node{a, b}, "")
	if err != nil {
		t.Fatal(err)
	}
	two, err := New(Config{Backend: "http://127.0.0.1:1"}, Deps{Backend: a.Backend, Fleet: r, Monitor: mon}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := scrape(t, serve(t, two))
	for name, want := range map[string]float64{
		`ctxproxy_backend_server_up{backend="gpu1"}`:                                           1,
		`ctxproxy_backend_server_up{backend="gpu2"}`:                                           0,
		`ctxproxy_backend_server_inflight{backend="gpu1"}`:                                     1,
		`ctxproxy_backend_server_inflight{backend="gpu2"}`:                                     0,
		`ctxproxy_backend_server_requests_total{backend="gpu1"}`:                               1,
		`ctxproxy_backend_server_requests_total{backend="gpu2"}`:                               2,
		`ctxproxy_backend_server_info{backend="gpu1",kind="ollama",memory="local",version=""}`: 1,
		`ctxproxy_backend_server_info{backend="gpu2",kind="ollama",memory="none",version=""}`:  1,
		`ctxproxy_backend_server_memory_free_bytes{backend="gpu1"}`:                            16 << 30,
		`ctxproxy_backend_server_memory_total_bytes{backend="gpu1"}`:                           24 << 30,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if _, ok := m[`ctxproxy_backend_server_memory_free_bytes{backend="gpu2"}`]; ok {
		t.Error("free memory for a server whose memory is read nowhere")
	}
}

// serve serves s on loopback and returns its URL.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL
}
