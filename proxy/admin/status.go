package admin

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Status answers GET /ctxproxy/status and the context size from
// live data: the backend, the strategy, the sizer, the memory monitor, the
// store, and the models requests used (note).
type Status struct {
	info    StatusInfo
	version string
	backend *url.URL
	be      *backend.Backend
	tokens  *budget.Registry
	trimmer *atomic.Pointer[rewrite.Trimmer]
	sizer   *gpu.Sizer
	monitor *gpu.Monitor
	fleet   *fleet.Router
	store   sessions.Store
	// inflight is the gauge ctxproxy_inflight_requests reads.
	inflight *atomic.Int64
	seen     *seenModels
	start    time.Time
	log      *slog.Logger
}

// StatusConfig is what a Status reports from.
type StatusConfig struct {
	Info    StatusInfo
	Version string
	// BackendURL and Backend are the server behind ctxproxy.
	BackendURL *url.URL
	Backend    *backend.Backend
	Tokens     *budget.Registry
	Trimmer    *atomic.Pointer[rewrite.Trimmer]
	Sizer      *gpu.Sizer
	Monitor    *gpu.Monitor
	// Fleet is the servers behind ctxproxy; with several the status
	// lists each (nil: the one Backend).
	Fleet *fleet.Router
	Store sessions.Store
	// Inflight is the gauge ctxproxy_inflight_requests reads.
	Inflight *atomic.Int64
	Log      *slog.Logger
}

// NewStatus returns a Status reporting from c.
func NewStatus(c StatusConfig) *Status {
	return &Status{info: c.Info, version: c.Version, backend: c.BackendURL, be: c.Backend, tokens: c.Tokens,
		trimmer: c.Trimmer, sizer: c.Sizer, monitor: c.Monitor, fleet: c.Fleet, store: c.Store, inflight: c.Inflight,
		seen: newSeenModels(), start: time.Now(), log: c.Log}
}

// Limit is the effective limit the last request of model had; 0 when
// none was seen.
func (s *Status) Limit(model string) int { return s.seen.limit(model) }

// Report gathers GET /ctxproxy/Report from live data.
func (s *Status) Report(ctx context.Context) adminapi.Status {
	info := s.info
	st := adminapi.Status{
		Version:       s.version,
		UptimeSeconds: math.Round(time.Since(s.start).Seconds()*10) / 10,
		Backend: adminapi.BackendStatus{URL: s.backend.Redacted(), Kind: s.be.Kind(ctx),
			Ready: s.be.Ready(ctx)},
		Strategy: adminapi.StrategyStatus{Mode: "none"},
		Context: adminapi.ContextStatus{MinSize: info.minSize(), MaxSize: info.maxSize(),
			KVQuantization: cmp.Or(info.KVQuantization, "f16"), NumParallel: max(info.NumParallel, 1)},
		GPU:       adminapi.GPUStatus{Level: "ok", Devices: []adminapi.Device{}},
		Models:    s.modelStatuses(),
		Snapshots: adminapi.SnapshotsStatus{Store: "off"},
		Summarize: adminapi.SummarizeStatus{Model: info.SummarizeModel, KeepRecent: info.KeepRecent},
		Inflight:  s.inflight.Load(),
		Replica:   info.Replica,
	}
	if t := s.trimmer.Load(); t != nil {
		st.Strategy = adminapi.StrategyStatus{Mode: t.Mode(), Threshold: t.Threshold(), Target: t.Target(),
			OnOverflow: t.OnOverflow(), EffectiveThreshold: s.effectiveThreshold(t)}
	}
	if s.sizer != nil {
		st.Context.Auto, st.Context.TargetSize = s.sizer.Mode()
	}
	if s.monitor != nil {
		st.GPU = gpuStatus(s.monitor.Reading())
	}
	if s.fleet != nil && s.fleet.Several() {
		st.Backends = serverStatuses(s.fleet)
	}
	if s.store != nil {
		st.Snapshots = adminapi.SnapshotsStatus{Store: cmp.Or(info.SnapshotStore, snapshots.StoreFile),
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
func (s *Status) modelStatuses() []adminapi.ModelStatus {
	out := []adminapi.ModelStatus{}
	quant, parallel := cmp.Or(s.info.KVQuantization, "f16"), max(s.info.NumParallel, 1)
	done := map[string]bool{}
	add := func(e seenModel) {
		m := adminapi.ModelStatus{Name: e.name, Effective: e.effective, NumCtx: e.numCtx, Reason: e.reason, Counting: e.counting}
		if m.Counting.Method == "" {
			m.Counting.Method = "estimate"
		}
		if e.exact != nil {
			a := e.exact.Agreement()
			m.Counting.Checked, m.Counting.WorstError, m.Counting.Disagreed = a.Checked, a.WorstError, a.Off
			for _, x := range a.Misses {
				m.Counting.Misses = append(m.Counting.Misses, adminapi.CountMiss{Shape: x.Shape, Estimate: x.Estimate,
					Reported: x.Reported, Tokenizer: x.Tokenizer})
			}
		}
		if s.tokens != nil {
			lim := s.tokens.Window(e.name, e.facts.ContextLength)
			m.MaxTokens, m.MaxOutputTokens = lim.MaxTokens, lim.MaxOutputTokens
			if m.Effective == 0 {
				m.Effective = lim.Effective()
			}
			c := s.tokens.Calibration(e.name)
			m.Calibration = adminapi.CalibrationStatus{Ratio: sessions.Finite(c.Ratio), Observations: c.Observations}
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

// effectiveThreshold is where trimming starts now: the proxy's planner
// lowers it by 0.2 (not below the target) while the guard is at the
// compress level or above.
func (s *Status) effectiveThreshold(t *rewrite.Trimmer) float64 {
	if s.monitor != nil && s.monitor.Reading().Level >= gpu.LevelCompress {
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

func (s *Status) ContextSize() adminapi.ContextSize {
	if s.sizer == nil {
		return adminapi.ContextSize{}
	}
	auto, target := s.sizer.Mode()
	if auto {
		target = 0
		if seen := s.seen.list(); len(seen) > 0 {
			target = seen[0].numCtx
		}
	}
	return adminapi.ContextSize{Auto: auto, Target: target}
}

// SetContextSize fixes num_ctx at tokens, or with tokens 0 sizes it from
// free memory again.
func (s *Status) SetContextSize(tokens int) error {
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
func (s *Status) Note(m ModelSeen) {
	if m.Name == "" {
		return
	}
	e := seenModel{name: m.Name, facts: m.Facts, numCtx: m.NumCtx, reason: m.Reason,
		effective: m.Limit, at: time.Now(), counting: adminapi.CountingStatus{Method: m.Counting, Reason: m.NotExact}}
	if m.Exact != nil {
		e.counting.Tokenizer, e.exact = m.Exact.Tokenizer.Name(), m.Exact
	}
	s.seen.note(e)
}

// Forget drops a model from "Models in use": the backend answered that
// it does not have it.
func (s *Status) Forget(model string) { s.seen.lru.Remove(model) }

// ModelSeen is what a chat request learned of its model, for the status
// page's "Models in use".
type ModelSeen struct {
	Name  string
	Facts modelinfo.Facts
	// NumCtx and Reason are the num_ctx chosen and why; Limit the
	// effective limit the request had.
	NumCtx int
	Reason string
	Limit  int
	// Counting is how the prompt was counted (exact, backend, estimate);
	// Exact the backend's model when it was counted exactly.
	Counting string
	Exact    *backend.Details
	// NotExact says why a request to an Ollama model was not counted
	// exactly ("" when it was, or the backend is not Ollama).
	NotExact string
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
	facts     modelinfo.Facts
	numCtx    int
	reason    string
	effective int
	at        time.Time
	counting  adminapi.CountingStatus
	exact     *backend.Details // for its agreement, when counted exactly
}

func (sm *seenModels) note(e seenModel) { sm.lru.Add(e.name, e) }

// list returns the models seen, most recent first.
func (sm *seenModels) list() []seenModel {
	var out []seenModel
	for _, e := range sm.lru.All() {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b seenModel) int { return adminapi.NewestFirst(a.at, b.at, a.name, b.name) })
	return out
}

func (sm *seenModels) get(name string) (seenModel, bool) { return sm.lru.Peek(name) }

// limit is the effective limit the last request of a model had; 0 when
// none was seen.
func (sm *seenModels) limit(name string) int {
	e, _ := sm.get(name)
	return e.effective
}

// StatusInfo is the configuration /ctxproxy/status shows besides the
// proxy's own. Zero fields show the other packages' defaults.
type StatusInfo struct {
	// MinSize and MaxSize bound num_ctx (context.min_size, max_size;
	// default 2048 and 131072); PUT /ctxproxy/context/size accepts sizes
	// between them.
	MinSize, MaxSize int
	// KVQuantization is context.kv_quantization (default f16) and
	// NumParallel context.num_parallel (default 1).
	KVQuantization string
	NumParallel    int
	// SnapshotStore, AutoThreshold and MaxCount are snapshots.store
	// (default file), auto_threshold (0.80) and max_count (20).
	SnapshotStore string
	AutoThreshold float64
	MaxCount      int
	// SummarizeModel and KeepRecent are summarize.model ("": the chat's
	// own) and summarize.keep_recent.
	SummarizeModel string
	KeepRecent     int
	// Replica names this ctxproxy among replicas sharing the Redis store
	// (its host name); "" when it runs alone. Chat responses carry it in
	// X-Ctxproxy-Replica.
	Replica string
}

func (i StatusInfo) minSize() int { return cmp.Or(i.MinSize, gpu.DefaultMinSize) }
func (i StatusInfo) maxSize() int { return cmp.Or(i.MaxSize, gpu.DefaultMaxSize) }
