package fleet_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

const gib = 1 << 30

// probe reports two fixed GPUs.
type probe struct{}

func (probe) Name() string { return gpu.ProbeNVIDIA }
func (probe) Devices(context.Context) ([]gpu.Device, error) {
	return []gpu.Device{
		{Vendor: "nvidia", Name: "GPU 0", Total: 24 * gib, Used: 4 * gib, Free: 20 * gib},
		{Vendor: "nvidia", Name: "GPU 1", Total: 24 * gib, Used: 8 * gib, Free: 16 * gib},
	}, nil
}
func (probe) Close() error { return nil }

// otherCtxproxy serves the admin API of a ctxproxy whose monitor has
// sampled probe, behind token, as the real admin routes build it (so
// the shape Remote reads cannot drift from what a ctxproxy answers);
// calls counts its status requests.
func otherCtxproxy(t *testing.T, token string) (srv *httptest.Server, calls *atomic.Int64) {
	t.Helper()
	mon := gpu.NewMonitor(probe{}, gpu.Config{}, gpu.MonitorOptions{Logger: slog.New(slog.DiscardHandler)})
	mon.Sample(context.Background())
	u, _ := url.Parse("http://127.0.0.1:1") // its backend is not asked for memory
	be := backend.New(backend.Config{URL: u, Kind: backend.KindOllama, Client: &http.Client{}, Log: slog.New(slog.DiscardHandler)})
	st := admin.NewStatus(admin.StatusConfig{Version: "test", BackendURL: u, Backend: be, Monitor: mon,
		Sizer: gpu.NewSizer(gpu.Config{}), Trimmer: &atomic.Pointer[rewrite.Trimmer]{}, Inflight: &atomic.Int64{},
		Log: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	admin.Routes(mux, admin.Config{Token: token, Status: st, Backend: be, BackendURL: u,
		Sessions: &sessions.Service{Log: slog.New(slog.DiscardHandler)}})
	calls = &atomic.Int64{}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ctxproxy/status" {
			calls.Add(1)
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, calls
}

func TestRemoteReadsAnotherCtxproxy(t *testing.T) {
	srv, _ := otherCtxproxy(t, "s3cret")
	u, _ := url.Parse(srv.URL + "/")
	loaded := []modelinfo.Loaded{{Name: "qwen3:8b", Size: 6 * gib, SizeVRAM: 6 * gib, NumCtx: 8192}}
	r := &fleet.Remote{URL: u, Token: "s3cret",
		Loaded: func(context.Context) ([]modelinfo.Loaded, error) { return loaded, nil }}
	rd, ok := r.Reading(context.Background())
	if !ok {
		t.Fatalf("no reading: %v", r.Err())
	}
	if rd.Probe != gpu.ProbeNVIDIA || len(rd.Devices) != 2 || rd.Free() != 36*gib || rd.Total() != 48*gib || rd.Used() != 12*gib {
		t.Errorf("reading = probe %q, %d devices, free %d, total %d", rd.Probe, len(rd.Devices), rd.Free(), rd.Total())
	}
	if rd.Devices[1].Name != "GPU 1" || rd.Seq != 1 || rd.Err != nil || rd.Level != gpu.LevelNormal {
		t.Errorf("reading = %+v", rd)
	}
	if m, ok := rd.Model("qwen3:8b"); !ok || !rd.ModelsKnown || m.SizeVRAM != 6*gib {
		t.Errorf("loaded models = %+v (known %v)", rd.Models, rd.ModelsKnown)
	}
	if w := r.Where(); w != "ctxproxy at "+srv.URL+"/" {
		t.Errorf("Where = %q", w)
	}
	if last, ok := fleet.Last(r); !ok || last.Seq != rd.Seq {
		t.Errorf("Last = %v, %v", last.Seq, ok)
	}

	// Without the token: no reading, and the error says why.
	bare := &fleet.Remote{URL: u}
	if _, ok := bare.Reading(context.Background()); ok {
		t.Error("a reading without the admin token")
	}
	if err := bare.Err(); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Err = %v, want the 401", err)
	}
	if _, ok := fleet.Last(bare); ok {
		t.Error("Last has a reading that never came")
	}
}

// clock is a time tests move.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A reading is fetched once for concurrent callers, reused within
// Every, served at once while a fetch refreshes it, and not used once
// older than MaxAge.
func TestRemoteCachesItsReading(t *testing.T) {
	srv, calls := otherCtxproxy(t, "")
	u, _ := url.Parse(srv.URL)
	c := &clock{t: time.Unix(1_000_000, 0)}
	r := &fleet.Remote{URL: u, Every: 2 * time.Second, MaxAge: 30 * time.Second, Now: c.now}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, ok := r.Reading(context.Background()); !ok {
				t.Error("no reading")
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("%d fetches for 20 concurrent callers, want 1", n)
	}
	c.add(time.Second)
	if rd, _ := r.Reading(context.Background()); rd.Seq != 1 || calls.Load() != 1 {
		t.Errorf("within Every: sample %d after %d fetches, want the first after 1", rd.Seq, calls.Load())
	}
	// Older than Every: the old reading at once, and one fetch.
	c.add(2 * time.Second)
	if rd, ok := r.Reading(context.Background()); !ok || rd.Seq != 1 {
		t.Errorf("after Every: sample %d (%v), want the first at once", rd.Seq, ok)
	}
	waitFor(t, func() bool { rd, _ := fleet.Last(r); return rd.Seq == 2 })
	// The other ctxproxy goes away: the last reading serves until it is
	// MaxAge old, then none does.
	srv.Close()
	c.add(10 * time.Second)
	if _, ok := r.Reading(context.Background()); !ok {
		t.Error("a reading 10 s old was not used")
	}
	waitFor(t, func() bool { return r.Err() != nil })
	c.add(25 * time.Second)
	if _, ok := r.Reading(context.Background()); ok {
		t.Error("a reading 35 s old was used")
	}
	if _, ok := fleet.Last(r); ok {
		t.Error("Last gave a reading 35 s old")
	}
}

// A caller that gives up waiting does not end the fetch others share.
func TestRemoteCallerGivesUp(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Write([]byte(`{"gpu":{"probe":"amd","level":"shrink","devices":[{"vendor":"amd","name":"MI","total":10,"used":4,"free":6}]}}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	r := &fleet.Remote{URL: u}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := r.Reading(ctx); ok {
		t.Error("a reading for a caller that gave up")
	}
	close(release)
	rd, ok := r.Reading(context.Background())
	if !ok || rd.Probe != "amd" || rd.Level != gpu.LevelShrink || rd.Free() != 6 || rd.ModelsKnown {
		t.Errorf("reading = %+v, %v", rd, ok)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out")
}
