package main

import (
	"cmp"
	"net/url"
	"os"
	"path/filepath"
	"slices"

	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/config"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/proxy/edge"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// This file turns the one configuration into each package's own config.Config.

// noStore stands in for the store with snapshots.store none: nothing to
// close.
type noStore struct{ snapshots.Store }

func (noStore) Close() error { return nil }

type system struct {
	deps    proxy.Deps
	monitor *gpu.Monitor
	// pollers list each server's models and prepare their tokenizers
	// before their first request.
	pollers []*backend.Poller
	// router chooses the server of each request.
	router    *fleet.Router
	writer    *snapshots.Writer
	store     snapshots.Store
	compactor *rewrite.Compactor
	// newTrimmer builds the strategies for a configuration, summarize and
	// hybrid included (start and reload use it alike).
	newTrimmer func(config.Config) (*rewrite.Trimmer, error)
}

// hooks are what the parts built here need of the server, which is built
// after them: the backend's loaded models and kind, and the summarizer's
// metrics.
type hooks struct {
	summaries func(time.Duration, error)
}

// newBackend builds the backend first, over the transport forwarded
// requests use: kind detection, model facts, tokenizers and the
// summarizer's calls then share one pool and its timeouts. With several
// servers it is the first.
func newBackend(c config.Config, log *slog.Logger) (*backend.Backend, *http.Transport, error) {
	servers, err := newServers(c, log)
	if err != nil {
		return nil, nil, err
	}
	return servers[0].Backend, servers[0].Transport, nil
}

// newServers builds each server of the configuration (config.Servers):
// its transport, with its own timeouts, and its backend. Their memory
// is set once the monitor is built.
func newServers(c config.Config, log *slog.Logger) ([]*fleet.Node, error) {
	conf := c.Servers()
	out := make([]*fleet.Node, 0, len(conf))
	for i, sc := range conf {
		u, err := url.Parse(sc.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			key := "backend.url"
			if len(c.Backends) > 0 {
				key = fmt.Sprintf("backends[%d].url", i)
			}
			return nil, fmt.Errorf("%w: %s %q is not an http(s) URL", config.ErrInvalid, key, config.RedactURL(sc.URL))
		}
		pc := proxyConfig(c, versionString())
		pc.ResponseHeaderTimeout, pc.DialTimeout = sc.ResponseHeaderTimeout, sc.DialTimeout
		tr := proxy.NewTransport(pc)
		prep := backend.Preparation{Mode: c.Tokens.Prepare, Interval: c.Tokens.PrepareInterval, MaxModels: c.Tokens.PrepareMaxModels,
			MaxMemory: int64(c.Tokens.PrepareMaxMemory), List: len(conf) > 1}
		if !c.Tokens.Exact {
			// Estimates need no tokenizer to prepare.
			prep.Mode = backend.PrepareNone
		}
		if prep.List && prep.Interval == 0 {
			prep.Interval = 10 * time.Second // the router reads which server has which model
		}
		blog := log.With("component", "backend")
		if len(conf) > 1 {
			blog = blog.With("backend", sc.Name)
		}
		be := backend.New(backend.Config{URL: u, Kind: sc.Kind, Client: &http.Client{Transport: tr},
			Log: blog, TokenizerDir: tokenizerDir(c), Prepare: prep})
		out = append(out, &fleet.Node{Name: sc.Name, URL: u, Backend: be, Transport: tr, Weight: sc.Weight,
			Models: sc.Models, MaxInFlight: sc.MaxInFlight})
	}
	return out, nil
}

// tokenizerDir is tokens.tokenizer_dir: "" for none ("none", or exact
// counting off), snapshots.dir/tokenizers by default.
func tokenizerDir(c config.Config) string {
	switch d := c.Tokens.TokenizerDir; {
	case d == "none" || !c.Tokens.Exact:
		return ""
	case d != "":
		return d
	}
	return filepath.Join(cmp.Or(c.Snapshots.Dir, snapshots.DefaultDir), "tokenizers")
}

// build creates the parts serve runs with.
func build(ctx context.Context, c config.Config, log *slog.Logger, h hooks) (*system, error) {
	servers, err := newServers(c, log)
	if err != nil {
		return nil, err
	}
	router, err := fleet.New(servers, c.Backend.Routing)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	be, tr := servers[0].Backend, servers[0].Transport
	tokens := budget.NewRegistry(c.BudgetConfig(), log.With("component", "budget"))
	// The estimating tokenizer most models use is read once per process
	// (60–80 ms): now, not in the first request, which counts with it too.
	go tokens.CounterFor("")
	// snapshots.store none: no conversation content is kept anywhere;
	// sessions, snapshots and cached summaries are off.
	var store snapshots.Store = noStore{}
	ops := proxy.NewStoreOps()
	var summaries rewrite.SummaryStore
	if c.Snapshots.Store != config.StoreNone {
		scfg := c.SnapshotsConfig()
		scfg.Observe = ops.Observe
		if store, err = snapshots.Open(ctx, scfg, log.With("component", "snapshots")); err != nil {
			return nil, err
		}
		summaries = sessions.SummaryStore{Store: store}
	}
	// The summarizer calls the backend over the same transport; its own
	// timeout is summarize.timeout.
	sumURL, sumKind := servers[0].URL.String(), func() string { return be.Kind(context.Background()) }
	sumCfg := backend.SummarizerConfig{Model: c.Summarize.Model, MaxTokens: c.Summarize.MaxTokens, Timeout: c.Summarize.Timeout}
	if c.Summarize.Backend != "" {
		// A summarizer backend of its own: its kind is configured, and
		// it gets its own key, never the clients' credentials.
		kind := cmp.Or(c.Summarize.BackendKind, backend.KindOllama)
		sumURL, sumKind = c.Summarize.Backend, func() string { return kind }
		sumCfg.OwnBackend = true
		if c.Summarize.APIKey != "" {
			sumCfg.Auth = "Bearer " + c.Summarize.APIKey
		}
	}
	summarizer := backend.NewSummarizer(sumURL, sumKind, sumCfg, &http.Client{Transport: tr}, log.With("component", "summarize"))
	compactor := rewrite.NewCompactor(c.SummarizeConfig(), summarizer, rewrite.CompactorOptions{
		Store: summaries, Log: log.With("component", "summarize"), OnCall: h.summaries,
	})
	newTrimmer := func(c config.Config) (*rewrite.Trimmer, error) {
		return rewrite.NewTrimmer(c.StrategyConfig(), log.With("component", "rewrite"), compactor.Summarize(), compactor.Hybrid())
	}
	trimmer, err := newTrimmer(c)
	if err != nil {
		store.Close()
		return nil, err
	}
	gcfg := c.GPUConfig()
	probe, err := gpu.Detect(ctx, gcfg, log.With("component", "gpu"))
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("gpu: %w", err)
	}
	mon := gpu.NewMonitor(probe, gcfg, gpu.MonitorOptions{Logger: log.With("component", "gpu"), Loaded: localLoaded(c, servers)})
	setMemory(c, servers, mon)
	deps := proxy.Deps{Tokens: tokens, Trimmer: trimmer, Sizer: gpu.NewSizer(gcfg), Monitor: mon, Backend: be, Fleet: router, StoreOps: ops}
	var writer *snapshots.Writer
	if c.Snapshots.Store != config.StoreNone {
		writer = snapshots.NewWriter(store, c.SnapshotsConfig(), log.With("component", "snapshots"))
		deps.Store, deps.Writer = store, writer
	} else {
		log.Info("snapshots.store none: no conversation is stored; sessions and snapshots are off")
	}
	return &system{
		deps:    deps,
		monitor: mon, pollers: pollers(servers), router: router, writer: writer, store: store, compactor: compactor, newTrimmer: newTrimmer,
	}, nil
}

// pollers returns the poller of each server.
func pollers(servers []*fleet.Node) []*backend.Poller {
	out := make([]*backend.Poller, len(servers))
	for i, s := range servers {
		out[i] = backend.NewPoller(s.Backend)
	}
	return out
}

// watchModels watches Ollama's model directory (tokens.models_dir) and
// has every server list its models as soon as one is created, pulled or
// removed there, so that the new model's tokenizer is prepared before a
// person can pick it. Without it, or where it cannot watch, the listing
// every tokens.prepare_interval finds the model.
func watchModels(ctx context.Context, c config.Config, pollers []*backend.Poller, log *slog.Logger) {
	active := slices.DeleteFunc(slices.Clone(pollers), func(p *backend.Poller) bool { return !p.Active() })
	dir := modelsDir(c, os.Getenv)
	if dir == "" || len(active) == 0 {
		return
	}
	err := backend.WatchModels(ctx, dir, log, func() {
		for _, p := range active {
			p.Poke()
		}
	})
	if err != nil {
		log.Warn("cannot watch Ollama's models: a model created or pulled is found by the next listing (tokens.prepare_interval)",
			"dir", dir, "err", err)
		return
	}
	log.Info("watching Ollama's models: a model created or pulled is listed and prepared at once", "dir", dir)
}

// modelsDir is tokens.models_dir: with auto, where Ollama keeps its
// models on this machine when a server is on loopback (OLLAMA_MODELS,
// ~/.ollama/models, the Linux service's), "" when none is found.
func modelsDir(c config.Config, getenv func(string) string) string {
	switch d := c.Tokens.ModelsDir; d {
	case "", "none":
		return ""
	case "auto":
		for _, sc := range c.Servers() {
			if u, err := url.Parse(sc.URL); err == nil && edge.Loopback(u.Hostname()) {
				return backend.FindModels(getenv)
			}
		}
		return ""
	default:
		return d
	}
}

// setMemory tells each server where its free memory is read
// (backends[].memory): this machine's monitor, nowhere, or the status
// of the ctxproxy on the server's machine, read with memory_token and
// the server's own loaded models (its /api/ps).
func setMemory(c config.Config, servers []*fleet.Node, mon *gpu.Monitor) {
	for i, sc := range c.Servers() {
		switch sc.Memory {
		case config.MemoryLocal:
			servers[i].Memory = fleet.Local{Monitor: mon}
		case config.MemoryNone:
		default:
			u, err := url.Parse(sc.Memory)
			if err != nil {
				continue // validated: not reached
			}
			servers[i].Memory = &fleet.Remote{URL: u, Token: sc.MemoryToken, Loaded: servers[i].Backend.LoadedModels,
				Client: &http.Client{Timeout: fleet.RemoteTimeout}}
		}
	}
}

// localLoaded is what the monitor reads as the models loaded beside
// the memory it probes: those of the servers whose memory is this
// machine's (the one backend's, by default).
func localLoaded(c config.Config, servers []*fleet.Node) func(context.Context) ([]modelinfo.Loaded, error) {
	var local []*backend.Backend
	for i, sc := range c.Servers() {
		if sc.Memory == config.MemoryLocal {
			local = append(local, servers[i].Backend)
		}
	}
	if len(local) == 1 {
		return local[0].LoadedModels
	}
	return func(ctx context.Context) ([]modelinfo.Loaded, error) {
		var all []modelinfo.Loaded
		for _, b := range local {
			l, err := b.LoadedModels(ctx)
			if err != nil {
				return nil, err
			}
			all = append(all, l...)
		}
		return all, nil
	}
}
