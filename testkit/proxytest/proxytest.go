// Package proxytest runs the real ctxproxy server in process, in front of
// testkit/fakebackend, wired as "ctxproxy serve" wires it: token counting
// with per-model limits, a strategy, the GPU monitor and sizer (over a
// probe that reports fixed memory, so VRAM figures are stable), and a file
// snapshot store with its writer. Tests of the client, the REPL and the
// CLI talk to it over HTTP, as they would to a running ctxproxy.
package proxytest

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// GiB is a gibibyte, for Device and Loaded sizes.
const GiB = 1 << 30

// Options choose the proxy's configuration. The zero value is a proxy in
// front of an Ollama fake with the default smart strategy, counting by
// estimate (4 characters a token, no calibration), one 24 GiB GPU with
// 5.1 GiB in use, and no admin token.
type Options struct {
	// Kind is the backend the fake plays (default Ollama).
	Kind fakebackend.Kind
	// Backend shapes the fake backend's answers; change them later with
	// Proxy.Backend.SetOptions.
	Backend fakebackend.Options
	// Loaded, when set, is what the backend's /api/ps reports loaded
	// (the fake alone reports nothing).
	Loaded []modelinfo.Loaded

	// Mode is strategy.mode (default smart); Strategy, when its Mode is
	// set, is the whole strategy configuration instead.
	Mode     string
	Strategy rewrite.Config
	// Models are per-model limits (the models: section of the
	// configuration).
	Models map[string]budget.Model
	// Tokens is the counting configuration; Models is merged into it.
	// Its zero value counts 4 characters a token without calibration,
	// so that counts do not depend on what the backend reported.
	Tokens *budget.Config

	// Devices is what the GPU probe reports (default one 24 GiB card with
	// 5.1 GiB used).
	Devices []gpu.Device
	// GPU is the gpu and context sizing configuration.
	GPU gpu.Config

	// AdminToken is admin.token.
	AdminToken string
	// Config is the rest of the proxy's configuration; Backend,
	// AdminToken and (when zero) Version are set from the above.
	Config proxy.Config
	// Snapshots is the snapshot store's configuration; Dir defaults to
	// a temporary directory.
	Snapshots snapshots.Config
	// Log receives the server's logs (default: none).
	Log *slog.Logger
}

// Proxy is a running ctxproxy.
type Proxy struct {
	// URL is where the proxy listens.
	URL string
	// Backend is the fake behind it: set its options, read its requests.
	Backend *fakebackend.Fake
	// BackendURL is where the proxy forwards to: the fake, or the front
	// that answers /api/ps with Options.Loaded.
	BackendURL string
	// Server is the proxy's handler.
	Server *proxy.Server
	// Store and Writer are the snapshot store and its write queue: seed
	// sessions in the store, and Flush before reading it.
	Store   *snapshots.FileStore
	Writer  *snapshots.Writer
	Monitor *gpu.Monitor
}

// DefaultDevices is the GPU the probe reports unless Options.Devices is
// set: 5.1 of 24 GiB in use.
func DefaultDevices() []gpu.Device {
	total := uint64(24 * GiB)
	used := uint64(51 * GiB / 10)
	return []gpu.Device{{Vendor: "nvidia", Name: "NVIDIA GeForce RTX 4090", Total: total, Used: used, Free: total - used}}
}

// fixedProbe reports fixed memory.
type fixedProbe struct{ devices []gpu.Device }

func (p fixedProbe) Name() string                                  { return "nvidia" }
func (p fixedProbe) Devices(context.Context) ([]gpu.Device, error) { return p.devices, nil }
func (p fixedProbe) Close() error                                  { return nil }

// Start starts a proxy for the test; it stops when the test ends.
func Start(t testing.TB, o Options) *Proxy {
	t.Helper()
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fake := fakebackend.New(t, o.Kind, o.Backend)
	backendURL := fake.URL
	if o.Loaded != nil {
		backendURL = withLoaded(t, fake, o.Loaded)
	}

	cfg := o.Config
	cfg.Backend = backendURL
	cfg.AdminToken = o.AdminToken
	if cfg.Version == "" {
		cfg.Version = "test"
	}
	if cfg.BackendKind == "" {
		cfg.BackendKind = map[fakebackend.Kind]string{fakebackend.Ollama: backend.KindOllama, fakebackend.OpenAI: backend.KindOpenAI}[o.Kind]
	}

	tcfg := budget.Config{Encoding: "approximate", ApproxCharsPerToken: 4, Calibrate: new(bool)}
	if o.Tokens != nil {
		tcfg = *o.Tokens
	}
	if len(o.Models) > 0 {
		models := map[string]budget.Model{}
		for k, v := range tcfg.Models {
			models[k] = v
		}
		for k, v := range o.Models {
			models[k] = v
		}
		tcfg.Models = models
	}
	tokens := budget.NewRegistry(tcfg, log)

	scfg := o.Strategy
	if scfg.Mode == "" {
		scfg.Mode = o.Mode
	}
	trimmer, err := rewrite.NewTrimmer(scfg, log)
	if err != nil {
		t.Fatalf("proxytest: strategy: %v", err)
	}

	u, _ := url.Parse(backendURL)
	tr := proxy.NewTransport(cfg)
	be := backend.New(backend.Config{URL: u, Kind: cfg.BackendKind, Client: &http.Client{Transport: tr}, Log: log})

	devices := o.Devices
	if devices == nil {
		devices = DefaultDevices()
	}
	mon := gpu.NewMonitor(fixedProbe{devices}, o.GPU, gpu.MonitorOptions{Logger: log, Loaded: be.LoadedModels})
	mon.Sample(context.Background())

	snap := o.Snapshots
	if snap.Dir == "" {
		snap.Dir = t.TempDir()
	}
	store, err := snapshots.NewFileStore(snap, log)
	if err != nil {
		t.Fatalf("proxytest: store: %v", err)
	}
	writer := snapshots.NewWriter(store, snap, log)

	srv, err := proxy.New(cfg, proxy.Deps{Tokens: tokens, Trimmer: trimmer, Sizer: gpu.NewSizer(o.GPU),
		Monitor: mon, Store: store, Writer: writer, Backend: be}, log)
	if err != nil {
		t.Fatalf("proxytest: server: %v", err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = writer.Close(ctx)
		_ = store.Close()
	})
	return &Proxy{URL: ts.URL, Backend: fake, BackendURL: backendURL, Server: srv, Store: store, Writer: writer, Monitor: mon}
}

// withLoaded serves the fake behind a front that answers /api/ps with
// loaded, and returns the front's URL.
func withLoaded(t testing.TB, fake *fakebackend.Fake, loaded []modelinfo.Loaded) string {
	type psModel struct {
		Name          string `json:"name"`
		Model         string `json:"model"`
		Size          uint64 `json:"size"`
		SizeVRAM      uint64 `json:"size_vram"`
		ContextLength int    `json:"context_length,omitempty"`
	}
	ps := struct {
		Models []psModel `json:"models"`
	}{Models: []psModel{}}
	for _, m := range loaded {
		ps.Models = append(ps.Models, psModel{Name: m.Name, Model: m.Name, Size: m.Size, SizeVRAM: m.SizeVRAM, ContextLength: m.NumCtx})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/ps", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ps)
	})
	mux.Handle("/", fake)
	front := httptest.NewServer(mux)
	t.Cleanup(front.Close)
	return front.URL
}

// Flush waits until every queued session write is in the store.
func (p *Proxy) Flush(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Writer.Flush(ctx); err != nil {
		t.Fatalf("proxytest: flush: %v", err)
	}
}

// Session returns the stored session id after the queued writes, or nil
// when there is none.
func (p *Proxy) Session(t testing.TB, id string) *snapshots.Session {
	t.Helper()
	p.Flush(t)
	s, err := p.Store.Get(context.Background(), id)
	if err != nil {
		return nil
	}
	return s
}

// Seed stores the session id with msgs appended to what it has, as if
// they had been sent before; the proxy counts them with the next request.
func (p *Proxy) Seed(t testing.TB, id, model string, msgs ...snapshots.Message) {
	t.Helper()
	p.Flush(t)
	err := p.Store.Update(context.Background(), id, func(s *snapshots.Session) error {
		if model != "" {
			s.Model = model
		}
		now := time.Now().UTC()
		for _, m := range msgs {
			if m.Timestamp.IsZero() {
				m.Timestamp = now
			}
			s.Messages = append(s.Messages, m)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("proxytest: seed %q: %v", id, err)
	}
}

// SeedSnapshot stores snap for session snap.SessionID, as if it had been
// taken before; the store makes its ID and Created when they are empty.
func (p *Proxy) SeedSnapshot(t testing.TB, snap snapshots.Snapshot) adminapi.SnapshotInfo {
	t.Helper()
	p.Flush(t)
	if snap.Reason == "" {
		snap.Reason = "manual"
	}
	info, err := p.Store.SaveSnapshot(context.Background(), &snap)
	if err != nil {
		t.Fatalf("proxytest: seed snapshot of %q: %v", snap.SessionID, err)
	}
	return info
}
