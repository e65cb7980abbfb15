package proxy

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// statusReporter answers GET /ctxproxy/status and the context size from
// live data: the backend, the strategy, the sizer, the memory monitor, the
// store, and the models requests used (note).
type statusReporter struct {
	info    StatusInfo
	version string
	backend *url.URL
	be      *backend.Backend
	tokens  *budget.Registry
	trimmer *atomic.Pointer[rewrite.Trimmer]
	sizer   *gpu.Sizer
	monitor *gpu.Monitor
	store   sessions.Store
	// inflight is the gauge ctxproxy_inflight_requests reads.
	inflight *atomic.Int64
	seen     *seenModels
	start    time.Time
	log      *slog.Logger
}

// status gathers GET /ctxproxy/status from live data.
func (s *statusReporter) status(ctx context.Context) api.Status {
	info := s.info
	st := api.Status{
		Version:       s.version,
		UptimeSeconds: math.Round(time.Since(s.start).Seconds()*10) / 10,
		Backend: api.BackendStatus{URL: s.backend.Redacted(), Kind: s.be.Kind(ctx),
			Ready: s.be.Ready(ctx)},
		Strategy: api.StrategyStatus{Mode: "none"},
		Context: api.ContextStatus{MinSize: info.minSize(), MaxSize: info.maxSize(),
			KVQuantization: cmp.Or(info.KVQuantization, "f16"), NumParallel: max(info.NumParallel, 1)},
		GPU:       api.GPUStatus{Level: "ok", Devices: []api.Device{}},
		Models:    s.modelStatuses(),
		Snapshots: api.SnapshotsStatus{Store: "off"},
		Summarize: api.SummarizeStatus{Model: info.SummarizeModel, KeepRecent: info.KeepRecent},
		Inflight:  s.inflight.Load(),
	}
	if t := s.trimmer.Load(); t != nil {
		st.Strategy = api.StrategyStatus{Mode: t.Mode(), Threshold: t.Threshold(), Target: t.Target(),
			OnOverflow: t.OnOverflow(), EffectiveThreshold: s.effectiveThreshold(t)}
	}
	if s.sizer != nil {
		st.Context.Auto, st.Context.TargetSize = s.sizer.Mode()
	}
	if s.monitor != nil {
		snap := s.monitor.Snapshot()
		st.GPU.Probe, st.GPU.Level = snap.Probe, levelName(snap.Level)
		st.GPU.Total, st.GPU.Used, st.GPU.Free = snap.Total(), snap.Used(), snap.Free()
		if st.GPU.Total > 0 {
			st.GPU.Usage = float64(st.GPU.Used) / float64(st.GPU.Total)
		}
		st.GPU.GuardUsage = sessions.Finite(snap.Usage())
		for _, d := range snap.Devices {
			st.GPU.Devices = append(st.GPU.Devices, api.Device(d))
		}
		if snap.Err != nil {
			st.GPU.Error = snap.Err.Error()
		}
	}
	if s.store != nil {
		st.Snapshots = api.SnapshotsStatus{Store: cmp.Or(info.SnapshotStore, snapshots.StoreFile),
			AutoThreshold: cmp.Or(info.AutoThreshold, snapshots.DefaultAutoThreshold),
			MaxCount:      cmp.Or(info.MaxCount, snapshots.DefaultMaxCount)}
		if list, err := s.store.List(ctx); err == nil {
			st.Sessions = len(list)
		} else {
			s.log.Warn("admin: listing sessions failed", "err", err)
		}
	}
	return st
}

// modelStatuses lists the models requests used, most recent first, and
// any other model calibration has learned about.
func (s *statusReporter) modelStatuses() []api.ModelStatus {
	out := []api.ModelStatus{}
	quant, parallel := cmp.Or(s.info.KVQuantization, "f16"), max(s.info.NumParallel, 1)
	done := map[string]bool{}
	add := func(e seenModel) {
		m := api.ModelStatus{Name: e.name, Effective: e.effective, NumCtx: e.numCtx, Reason: e.reason, Counting: e.counting}
		if m.Counting.Method == "" {
			m.Counting.Method = "estimate"
		}
		if e.exact != nil {
			a := e.exact.Agreement()
			m.Counting.Checked, m.Counting.WorstError, m.Counting.Disagreed = a.Checked, a.WorstError, a.Off
		}
		if s.tokens != nil {
			lim := s.tokens.Limits(e.name, e.facts.ContextLength)
			m.MaxTokens, m.MaxOutputTokens = lim.MaxTokens, lim.MaxOutputTokens
			if m.Effective == 0 {
				m.Effective = lim.Effective()
			}
			c := s.tokens.Calibration(e.name)
			m.Calibration = api.CalibrationStatus{Ratio: sessions.Finite(c.Ratio), Observations: c.Observations}
		}
		if e.facts.Known() {
			m.BytesPerToken = e.facts.BytesPerToken(quant, parallel)
		}
		done[e.name] = true
		out = append(out, m)
	}
	for _, e := range s.seen.list() {
		add(e)
	}
	if s.tokens != nil {
		cals := s.tokens.Calibrations()
		for _, name := range slices.Sorted(maps.Keys(cals)) {
			if !done[name] {
				add(seenModel{name: name})
			}
		}
	}
	return out
}

// effectiveThreshold is where trimming starts now: chat.go lowers it by
// 0.2 (not below the target) while the guard is at the compress level or
// above.
func (s *statusReporter) effectiveThreshold(t *rewrite.Trimmer) float64 {
	if s.monitor != nil && s.monitor.Snapshot().Level >= gpu.LevelCompress {
		// Rounded: 0.8 − 0.2 is 0.6000000000000001 in floating point.
		return math.Round(max(t.Threshold()-0.2, t.Target())*1e6) / 1e6
	}
	return t.Threshold()
}

// levelName is a guard level as the status says it.
func levelName(l gpu.Level) string {
	if l == gpu.LevelNormal {
		return "ok"
	}
	return l.String()
}

func (s *statusReporter) contextSize() api.ContextSize {
	if s.sizer == nil {
		return api.ContextSize{}
	}
	auto, target := s.sizer.Mode()
	if auto {
		target = 0
		if seen := s.seen.list(); len(seen) > 0 {
			target = seen[0].numCtx
		}
	}
	return api.ContextSize{Auto: auto, Target: target}
}

// setContextSize fixes num_ctx at tokens, or with tokens 0 sizes it from
// free memory again (seed 004 R7.2, R7.3).
func (s *statusReporter) setContextSize(tokens int) error {
	if s.sizer == nil {
		return sessions.Errorf(http.StatusServiceUnavailable, "context sizing is off: ctxproxy runs without a sizer")
	}
	if tokens == 0 {
		s.sizer.SetAuto()
		s.log.Info("context size: auto, from free memory")
		return nil
	}
	lo, hi := s.info.minSize(), s.info.maxSize()
	if tokens < lo || tokens > hi {
		return sessions.Errorf(http.StatusBadRequest, "context size %d is outside context.min_size–context.max_size (%d–%d)", tokens, lo, hi)
	}
	if err := s.sizer.SetTarget(tokens); err != nil {
		return sessions.Errorf(http.StatusBadRequest, "%v", err)
	}
	s.log.Info("context size fixed", "tokens", tokens)
	return nil
}

// note records what the request path decided for a model (its window,
// num_ctx and how it was counted), for the models of /ctxproxy/status.
// prepare calls it once per request, before cutting.
func (s *statusReporter) note(p *plan, facts gpu.ModelFacts) {
	if p == nil || p.model == "" {
		return
	}
	e := seenModel{name: p.model, facts: facts, numCtx: p.numCtx, reason: p.numReason,
		effective: p.limit, at: time.Now(), counting: api.CountingStatus{Method: p.countMethod()}}
	if p.exact != nil {
		e.counting.Tokenizer, e.exact = p.exact.Tokenizer.Name(), p.exact
	}
	s.seen.note(e)
}

// seenModels remembers the models requests used. Model names are client
// data: it keeps the maxSeenModels most recent.
type seenModels struct {
	lru *cache.LRU[string, seenModel]
}

func newSeenModels() *seenModels {
	return &seenModels{lru: cache.New[string, seenModel](maxSeenModels)}
}

const maxSeenModels = 64

type seenModel struct {
	name      string
	facts     gpu.ModelFacts
	numCtx    int
	reason    string
	effective int
	at        time.Time
	counting  api.CountingStatus
	exact     *backend.Model // for its agreement, when counted exactly
}

func (sm *seenModels) note(e seenModel) { sm.lru.Add(e.name, e) }

// list returns the models seen, most recent first.
func (sm *seenModels) list() []seenModel {
	var out []seenModel
	for _, e := range sm.lru.All() {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b seenModel) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

func (sm *seenModels) get(name string) (seenModel, bool) { return sm.lru.Peek(name) }

// limit is the effective limit the last request of a model had; 0 when
// none was seen.
func (sm *seenModels) limit(name string) int {
	e, _ := sm.get(name)
	return e.effective
}
