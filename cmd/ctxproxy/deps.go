package main

import (
	"net/url"

	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// This file turns the one configuration into each package's own Config.

func (c Config) proxyConfig() proxy.Config {
	return proxy.Config{
		Backend:               c.Backend.URL,
		BackendKind:           c.Backend.Kind,
		TranslateOpenAI:       c.Backend.TranslateOpenAI,
		MaxBody:               int64(c.MaxBody),
		ResponseHeaderTimeout: c.Backend.ResponseHeaderTimeout,
		DialTimeout:           c.Backend.DialTimeout,
		SessionHeader:         c.Session.Header,
		NoFingerprint:         !c.Session.Fingerprint,
		ScopeHeader:           c.Session.ScopeHeader,
		Accumulate:            c.Session.Accumulate,
		RespectClient:         c.Context.RespectClient,
		NoExact:               !c.Tokens.Exact,
		Limits: proxy.Limits{MaxInflight: int64(c.Limits.MaxInflight), BodyMemory: int64(c.Limits.BodyMemory),
			QueueWait: c.Limits.QueueWait, MinBodyRate: int64(c.Limits.MinBodyRate)},
		Hosts: proxy.HostPolicy{Loopback: proxy.Loopback(c.Listen), AllowedHosts: c.AllowedHosts,
			AllowedOrigins: c.AllowedOrigins},
		Version:    versionString(),
		AdminToken: c.Admin.Token,
		AdminOff:   c.Admin.Token == "" && !proxy.Loopback(c.Listen),
		Inband:     c.Commands.Inband,
		Status: proxy.StatusInfo{
			MinSize: c.Context.MinSize, MaxSize: c.Context.MaxSize,
			KVQuantization: c.Context.KVQuantization, NumParallel: c.Context.NumParallel,
			SnapshotStore: c.Snapshots.Store, AutoThreshold: c.Snapshots.AutoThreshold, MaxCount: c.Snapshots.MaxCount,
			SummarizeModel: c.Summarize.Model, KeepRecent: c.Summarize.KeepRecent,
		},
	}
}

func (c Config) budgetConfig() budget.Config {
	calibrate := c.Tokens.Calibrate
	models := make(map[string]budget.Model, len(c.Models))
	for name, m := range c.Models {
		models[name] = budget.Model{MaxTokens: m.MaxTokens, MaxOutputTokens: m.MaxOutputTokens, Multiplier: m.Multiplier}
	}
	return budget.Config{
		Encoding:            c.Tokens.Encoding,
		ApproxCharsPerToken: c.Tokens.ApproxCharsPerToken,
		ImageTokens:         c.Tokens.ImageTokens,
		Calibrate:           &calibrate,
		CacheEntries:        c.Tokens.CacheEntries,
		Models:              models,
		ReserveOutput:       c.Context.ReserveOutput,
	}
}

func (c Config) strategyConfig() rewrite.Config {
	s := c.Strategy
	preserveSystem, preserveMarked := s.SlidingWindow.PreserveSystem, s.Selective.PreserveMarked
	return rewrite.Config{
		Mode:       s.Mode,
		Threshold:  s.Threshold,
		Target:     s.Target,
		OnOverflow: s.OnOverflow,
		SlidingWindow: rewrite.SlidingWindowConfig{
			WindowSize: s.SlidingWindow.WindowSize, PreserveSystem: &preserveSystem},
		Smart:       rewrite.SmartConfig{PreserveFirst: orNone(s.Smart.PreserveFirst), PreserveLast: orNone(s.Smart.PreserveLast)},
		Selective:   rewrite.SelectiveConfig{PreserveRoles: s.Selective.PreserveRoles, PreserveMarked: &preserveMarked},
		Importance:  rewrite.ImportanceConfig{PreserveAbove: s.Importance.PreserveAbove, PreserveRecent: orNone(s.Importance.PreserveRecent)},
		ToolResults: rewrite.ToolResultsConfig{MaxTokens: s.ToolResults.MaxTokens},
		Composite:   s.Composite,
	}
}

// orNone maps a configured count to rewrite's convention, where 0 means
// the default and a negative number means none.
func orNone(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func (c Config) gpuConfig() gpu.Config {
	auto := c.Context.AutoSize
	return gpu.Config{
		Probe:          c.GPU.Probe,
		PollActive:     c.GPU.PollActive,
		PollIdle:       c.GPU.PollIdle,
		Guard:          gpu.GuardConfig{CompressAt: c.GPU.Guard.CompressAt, ShrinkAt: c.GPU.Guard.ShrinkAt, EmergencyAt: c.GPU.Guard.EmergencyAt},
		AutoSize:       &auto,
		TargetSize:     c.Context.TargetSize,
		MinSize:        c.Context.MinSize,
		MaxSize:        c.Context.MaxSize,
		VRAMBuffer:     uint64(c.Context.VRAMBuffer),
		KVQuantization: c.Context.KVQuantization,
		NumParallel:    c.Context.NumParallel,
	}
}

func (c Config) snapshotsConfig() snapshots.Config {
	s := c.Snapshots
	if s.Store == storeNone {
		s.Store = "" // nothing is opened; the other keys still validate
	}
	return snapshots.Config{
		Store:         s.Store,
		Dir:           s.Dir,
		AutoThreshold: s.AutoThreshold,
		MaxCount:      s.MaxCount,
		Redis:         snapshots.RedisConfig{Addr: s.Redis.Addr, Password: s.Redis.Password, DB: s.Redis.DB, Prefix: s.Redis.Prefix},
	}
}

// packageProblems asks each package to validate its own configuration, so
// check-config reports what they would refuse at start.
func (c Config) packageProblems() []string {
	var out []string
	for name, err := range map[string]error{
		"tokens":    c.budgetConfig().Validate(),
		"strategy":  c.strategyConfig().Validate(),
		"gpu":       c.gpuConfig().Validate(),
		"snapshots": c.snapshotsConfig().Validate(),
		"summarize": c.Summarize.Validate(),
	} {
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", name, err))
		}
	}
	return out
}

func (c Config) summarizeConfig() rewrite.SummarizeConfig { return c.Summarize }

// system is every long-lived part of a running ctxproxy.
// storeNone is snapshots.store's value for keeping no content at all.
const storeNone = "none"

// noStore stands in for the store with snapshots.store none: nothing to
// close.
type noStore struct{ snapshots.Store }

func (noStore) Close() error { return nil }

type system struct {
	deps      proxy.Deps
	monitor   *gpu.Monitor
	writer    *snapshots.Writer
	store     snapshots.Store
	compactor *rewrite.Compactor
	// newTrimmer builds the strategies for a configuration, summarize and
	// hybrid included (start and reload use it alike).
	newTrimmer func(Config) (*rewrite.Trimmer, error)
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
func newBackend(c Config, log *slog.Logger) (*backend.Backend, *http.Transport, error) {
	u, err := url.Parse(c.Backend.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("%w: backend.url %q is not an http(s) URL", errConfig, redactURL(c.Backend.URL))
	}
	tr := proxy.NewTransport(c.proxyConfig())
	return backend.New(backend.Config{URL: u, Kind: c.Backend.Kind, Client: &http.Client{Transport: tr},
		Log: log.With("component", "backend")}), tr, nil
}

// build creates the parts serve runs with.
func build(ctx context.Context, c Config, log *slog.Logger, h hooks) (*system, error) {
	be, tr, err := newBackend(c, log)
	if err != nil {
		return nil, err
	}
	tokens := budget.NewRegistry(c.budgetConfig(), log.With("component", "budget"))
	// snapshots.store none: no conversation content is kept anywhere;
	// sessions, snapshots and cached summaries are off.
	var store snapshots.Store = noStore{}
	var summaries rewrite.SummaryStore
	if c.Snapshots.Store != storeNone {
		if store, err = snapshots.Open(ctx, c.snapshotsConfig(), log.With("component", "snapshots")); err != nil {
			return nil, err
		}
		summaries = proxy.SummaryStore{Store: store}
	}
	// The summarizer calls the backend over the same transport; its own
	// timeout is summarize.timeout.
	summarizer := proxy.NewSummarizer(c.Backend.URL, func() string { return be.Kind(context.Background()) }, proxy.SummarizerConfig{
		Model: c.Summarize.Model, MaxTokens: c.Summarize.MaxTokens, Timeout: c.Summarize.Timeout,
	}, &http.Client{Transport: tr}, log.With("component", "summarize"))
	compactor := rewrite.NewCompactor(c.summarizeConfig(), summarizer, rewrite.CompactorOptions{
		Store: summaries, Log: log.With("component", "summarize"), OnCall: h.summaries,
	})
	newTrimmer := func(c Config) (*rewrite.Trimmer, error) {
		return rewrite.NewTrimmer(c.strategyConfig(), log.With("component", "rewrite"), compactor.Summarize(), compactor.Hybrid())
	}
	trimmer, err := newTrimmer(c)
	if err != nil {
		store.Close()
		return nil, err
	}
	gcfg := c.gpuConfig()
	probe, err := gpu.Detect(ctx, gcfg, log.With("component", "gpu"))
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("gpu: %w", err)
	}
	mon := gpu.NewMonitor(probe, gcfg, gpu.MonitorOptions{Logger: log.With("component", "gpu"), Loaded: be.LoadedModels})
	deps := proxy.Deps{Tokens: tokens, Trimmer: trimmer, Sizer: gpu.NewSizer(gcfg), Monitor: mon, Backend: be}
	var writer *snapshots.Writer
	if c.Snapshots.Store != storeNone {
		writer = snapshots.NewWriter(store, c.snapshotsConfig(), log.With("component", "snapshots"))
		deps.Store, deps.Writer = store, writer
	} else {
		log.Info("snapshots.store none: no conversation is stored; sessions and snapshots are off")
	}
	return &system{
		deps:    deps,
		monitor: mon, writer: writer, store: store, compactor: compactor, newTrimmer: newTrimmer,
	}, nil
}
