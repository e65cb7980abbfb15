package main

import (
	"cmp"
	"net/url"
	"path/filepath"

	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/config"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy"
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
	// poller prepares the backend's models before their first request.
	poller    *backend.Poller
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
// summarizer's calls then share one pool and its timeouts.
func newBackend(c config.Config, log *slog.Logger) (*backend.Backend, *http.Transport, error) {
	u, err := url.Parse(c.Backend.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("%w: backend.url %q is not an http(s) URL", config.ErrInvalid, config.RedactURL(c.Backend.URL))
	}
	tr := proxy.NewTransport(proxyConfig(c, versionString()))
	prep := backend.Preparation{Mode: c.Tokens.Prepare, Interval: c.Tokens.PrepareInterval, MaxModels: c.Tokens.PrepareMaxModels}
	if !c.Tokens.Exact {
		// Estimates need no tokenizer to prepare.
		prep.Mode = backend.PrepareNone
	}
	return backend.New(backend.Config{URL: u, Kind: c.Backend.Kind, Client: &http.Client{Transport: tr},
		Log: log.With("component", "backend"), TokenizerDir: tokenizerDir(c), Prepare: prep}), tr, nil
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
	be, tr, err := newBackend(c, log)
	if err != nil {
		return nil, err
	}
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
	sumURL, sumKind := c.Backend.URL, func() string { return be.Kind(context.Background()) }
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
	mon := gpu.NewMonitor(probe, gcfg, gpu.MonitorOptions{Logger: log.With("component", "gpu"), Loaded: be.LoadedModels})
	deps := proxy.Deps{Tokens: tokens, Trimmer: trimmer, Sizer: gpu.NewSizer(gcfg), Monitor: mon, Backend: be, StoreOps: ops}
	var writer *snapshots.Writer
	if c.Snapshots.Store != config.StoreNone {
		writer = snapshots.NewWriter(store, c.SnapshotsConfig(), log.With("component", "snapshots"))
		deps.Store, deps.Writer = store, writer
	} else {
		log.Info("snapshots.store none: no conversation is stored; sessions and snapshots are off")
	}
	return &system{
		deps:    deps,
		monitor: mon, poller: backend.NewPoller(be), writer: writer, store: store, compactor: compactor, newTrimmer: newTrimmer,
	}, nil
}
