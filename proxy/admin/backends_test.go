package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// oneDevice is a probe of one 16 GiB device with 6 GiB free.
type oneDevice struct{}

func (oneDevice) Name() string { return gpu.ProbeNVIDIA }
func (oneDevice) Devices(context.Context) ([]gpu.Device, error) {
	return []gpu.Device{{Vendor: "nvidia", Name: "GPU", Total: 16 << 30, Used: 10 << 30, Free: 6 << 30}}, nil
}
func (oneDevice) Close() error { return nil }

func testServer(t *testing.T, name, raw string, mem fleet.Memory) *fleet.Node {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	be := backend.New(backend.Config{URL: u, Kind: backend.KindOllama, Client: &http.Client{}, Log: slog.New(slog.DiscardHandler)})
	return &fleet.Node{Name: name, URL: u, Backend: be, Memory: mem}
}

func statusOf(t *testing.T, r *fleet.Router, mon *gpu.Monitor) []byte {
	t.Helper()
	first := r.First()
	st := NewStatus(StatusConfig{Version: "test", BackendURL: first.URL, Backend: first.Backend, Monitor: mon, Fleet: r,
		Trimmer: &atomic.Pointer[rewrite.Trimmer]{}, Inflight: &atomic.Int64{}, Log: slog.New(slog.DiscardHandler)})
	b, err := json.Marshal(st.Report(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// With several servers the status lists each: its health, load, memory
// source and last reading; with one, it has no backends at all.
func TestStatusBackends(t *testing.T) {
	mon := gpu.NewMonitor(oneDevice{}, gpu.Config{}, gpu.MonitorOptions{Logger: slog.New(slog.DiscardHandler)})
	mon.Sample(context.Background())
	one, _ := fleet.New([]*fleet.Node{testServer(t, "solo", "http://127.0.0.1:1", fleet.Local{Monitor: mon})}, "")
	if b := statusOf(t, one, mon); strings.Contains(string(b), `"backends"`) {
		t.Errorf("one server: status has backends: %s", b)
	}

	a := testServer(t, "gpu1", "http://127.0.0.1:1", fleet.Local{Monitor: mon})
	b := testServer(t, "gpu2", "http://user:pw@127.0.0.2:1", nil)
	b.Failed("connection refused")
	a.Begin()
	defer a.End()
	two, err := fleet.New([]*fleet.Node{a, b}, "")
	if err != nil {
		t.Fatal(err)
	}
	raw := statusOf(t, two, mon)
	var got struct {
		Backends []map[string]any `json:"backends"`
	}
	if err := json.Unmarshal(raw, &got); err != nil || len(got.Backends) != 2 {
		t.Fatalf("backends: %s (%v)", raw, err)
	}
	g1, g2 := got.Backends[0], got.Backends[1]
	if g1["name"] != "gpu1" || g1["up"] != true || g1["inflight"] != 1.0 || g1["served"] != 1.0 || g1["memory"] != "local" ||
		g1["kind"] != "ollama" || g1["down_until"] != nil {
		t.Errorf("gpu1: %v", g1)
	}
	if mem, _ := g1["gpu"].(map[string]any); mem == nil || mem["free"] != float64(6<<30) || mem["probe"] != "nvidia" {
		t.Errorf("gpu1's memory: %v", g1["gpu"])
	}
	if g2["up"] != false || g2["last_error"] != "connection refused" || g2["down_until"] == nil || g2["memory"] != "none" ||
		g2["gpu"] != nil || g2["url"] != "http://user:xxxxx@127.0.0.2:1" {
		t.Errorf("gpu2: %v", g2)
	}
	if strings.Contains(string(raw), "pw@") {
		t.Errorf("a password in the status: %s", raw)
	}
}
