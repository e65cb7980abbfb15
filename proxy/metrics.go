package proxy

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// metrics are ctxproxy's Prometheus series. No label takes an unbounded
// value: never a session id or a model name a client can invent freely.
// Labels are routes, dialects, statuses, GPU device indexes, and the names
// of the models the backend itself reports as loaded (bounded by
// maxLoadedModels).
//
// The request path only touches counters, histograms and atomics; what
// other parts keep (the GPU monitor's last sample, the store's and the
// writer's totals) is read when Prometheus scrapes, not on every request.
type metrics struct {
	requests   *prometheus.CounterVec
	unparsable *prometheus.CounterVec
	duration   *prometheus.HistogramVec

	tokensBefore, tokensAfter prometheus.Histogram
	dropped, summarized       prometheus.Counter
	truncations               prometheus.Counter
	exactDisagreements        prometheus.Counter
	overflowRetries           prometheus.Counter
	overflowFailures          prometheus.Counter
	moved                     *prometheus.CounterVec
	rawOverflows              prometheus.Counter
	repliesCut                prometheus.Counter
	refused                   *prometheus.CounterVec
	exactCounts               *prometheus.CounterVec
	calibrationError          prometheus.Histogram
	added                     prometheus.Histogram
	numCtx                    prometheus.Histogram
	prefixKept                prometheus.Histogram
	promptCached              prometheus.Histogram

	// inflight counts intercepted chat requests being forwarded (from
	// the forward to the last byte of the response), streams those of
	// them with "stream": true.
	inflight, streams atomic.Int64

	summaries        prometheus.Counter
	summaryFailures  *prometheus.CounterVec
	summaryDuration  prometheus.Histogram
	reloads          *prometheus.CounterVec
	lastReload       prometheus.Gauge
	lastReloadFailed prometheus.Gauge
}

// numCtxBuckets are num_ctx values ctxproxy picks from: multiples of 2048
// (docs/how-it-works.md), here by powers of two up to 256k.
var numCtxBuckets = prometheus.ExponentialBuckets(2048, 2, 8)

func newMetrics(reg prometheus.Registerer, deps Deps) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctxproxy_requests_total",
			Help: "Chat requests handled, by route, dialect and response status.",
		}, []string{"route", "dialect", "status"}),
		unparsable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctxproxy_unparsable_requests_total",
			Help: "Requests on a chat route that were not a chat request ctxproxy understands; forwarded unchanged.",
		}, []string{"dialect"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ctxproxy_request_duration_seconds",
			Help:    "Time from request to the end of the response, streams included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, []string{"route"}),
	}
	tokenBuckets := prometheus.ExponentialBuckets(256, 2, 12)
	m.tokensBefore = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ctxproxy_prompt_tokens_before", Help: "Estimated prompt tokens of chat requests as clients sent them.",
		Buckets: tokenBuckets})
	m.tokensAfter = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ctxproxy_prompt_tokens_after", Help: "Estimated prompt tokens of chat requests as forwarded.",
		Buckets: tokenBuckets})
	m.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_messages_dropped_total", Help: "Messages removed from chat requests by trimming."})
	m.summarized = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_messages_summarized_total", Help: "Messages folded into summaries."})
	m.truncations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_backend_truncations_total",
		Help: "Responses whose reported prompt tokens show the backend cut the prompt silently."})
	m.exactDisagreements = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_exact_count_disagreements_total",
		Help: "Request shapes of a model whose exact token counts disagreed with the backend's by more than 1%; requests of that shape to that model are counted by calibration since."})
	m.overflowRetries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_overflow_retries_total",
		Help: "Requests the backend refused as longer than its window that ctxproxy cut harder and sent again (each resend counts)."})
	m.overflowFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_overflow_failures_total",
		Help: "Requests the backend still refused as too long after every retry; the client got a context_length_exceeded error."})
	m.moved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_backend_moves_total",
		Help: "Requests a server could not serve before its answer began (unreachable, gone, busy, without the model) that ctxproxy sent to the next server, by the server left."},
		[]string{"backend"})
	m.rawOverflows = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_raw_prompt_overflows_total",
		Help: "Raw prompts (/api/generate, /v1/completions) longer than the model's window; ctxproxy does not cut them."})
	m.repliesCut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_replies_cut_total",
		Help: "Replies longer than max_body that the session stores cut (a streamed reply ends in a marker; a whole JSON reply is not stored)."})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_refused_requests_total",
		Help: "Requests refused before any route, by reason (host: a Host or Origin that is not allowed)."},
		[]string{"reason"})
	m.exactCounts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_prompt_counts_total",
		Help: "Chat requests counted, by how: exact (the model's own tokenizer), backend (the backend's tokenize API) or estimate (tiktoken and calibration)."},
		[]string{"method"})
	m.calibrationError = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ctxproxy_token_estimate_error_ratio",
		Help:    "Relative error of the forwarded prompt's token estimate against the backend's count.",
		Buckets: []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1}})
	m.added = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ctxproxy_added_latency_seconds",
		Help:    "Time ctxproxy spent on a chat request before forwarding it (decode, count, trim, encode).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)})
	m.prefixKept = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ctxproxy_prefix_kept_ratio",
		Help: "Share of a session's forwarded prompt (by tokens) that its previous forwarded prompt began with: " +
			"what the backend's prompt cache can keep. Observed from a session's second request on.",
		Buckets: []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1}})
	m.promptCached = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "ctxproxy_prompt_cached_ratio",
		Help: "Share of a forwarded prompt's tokens that the backend says it reused from its prompt cache " +
			"(Ollama 0.30 and later: prompt_eval_cached_count): its own measure of what ctxproxy_prefix_kept_ratio estimates.",
		Buckets: []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1}})
	// A histogram rather than a gauge by model: the model of a request
	// is client data, and every distinct name would be a new series.
	m.numCtx = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ctxproxy_num_ctx",
		Help:    "num_ctx chosen for chat requests forwarded to Ollama (see ctxproxy_loaded_model_num_ctx for each loaded model).",
		Buckets: numCtxBuckets})
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ctxproxy_inflight_requests",
		Help: "Intercepted chat requests being forwarded now, streams included.",
	}, func() float64 { return float64(m.inflight.Load()) })
	streams := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ctxproxy_inflight_streams",
		Help: "Streamed chat responses in progress now.",
	}, func() float64 { return float64(m.streams.Load()) })
	m.summaries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ctxproxy_summarizer_calls_total", Help: "Calls of the summarizer model, failed ones included."})
	m.summaryFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_summarizer_failures_total",
		Help: "Summarizer calls that produced no summary, by reason (timeout or error).",
	}, []string{"reason"})
	m.summaryDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ctxproxy_summarizer_duration_seconds",
		Help:    "Time a summarizer call took, failed ones included.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_config_reloads_total",
		Help: "Configuration reloads, by result (applied or rejected).",
	}, []string{"result"})
	m.lastReload = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ctxproxy_config_last_reload_success_timestamp_seconds",
		Help: "When the configuration was last loaded successfully (start or reload), as a Unix time."})
	m.lastReload.SetToCurrentTime()
	m.lastReloadFailed = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ctxproxy_config_last_reload_failed",
		Help: "1 when the last configuration reload was rejected (the previous configuration is in force), else 0."})
	// Pre-create the label values a dashboard expects to see at 0.
	for _, r := range []string{summaryTimeout, summaryError} {
		m.summaryFailures.WithLabelValues(r)
	}
	for _, r := range []string{"applied", "rejected"} {
		m.reloads.WithLabelValues(r)
	}
	reg.MustRegister(m.exactDisagreements, m.exactCounts, m.overflowRetries, m.overflowFailures, m.rawOverflows, m.repliesCut, m.refused, m.moved)
	reg.MustRegister(m.requests, m.unparsable, m.duration, m.tokensBefore, m.tokensAfter, m.dropped,
		m.summarized, m.truncations, m.calibrationError, m.added, m.numCtx, m.prefixKept, m.promptCached, inflight, streams,
		m.summaries, m.summaryFailures, m.summaryDuration, m.reloads, m.lastReload, m.lastReloadFailed)
	if deps.Monitor != nil {
		reg.MustRegister(gpuCollector{deps.Monitor})
	}
	if deps.StoreOps != nil {
		reg.MustRegister(deps.StoreOps.vec)
	}
	sc := storeCollector{}
	if c, ok := deps.Store.(storeCounters); ok {
		sc.store = c
	}
	if c, ok := deps.Writer.(writerCounters); ok {
		sc.writer = c
	}
	if w := deps.Writer; w != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ctxproxy_store_degraded",
			Help: "1 while the session store refuses writes (turns are retried, and responses say so), else 0."},
			func() float64 {
				if _, err := w.Health(); err != nil {
					return 1
				}
				return 0
			}))
	}
	if sc.store != nil || sc.writer != nil {
		reg.MustRegister(sc)
	}
	registerFleet(reg, deps.Fleet)
	return m
}

// descBackend is ctxproxy_backend_info: what the backend said it is, and
// whether it is newer than the Ollama versions whose counting rules
// ctxproxy knows (it is counted with the newest, and the log says so).
var descBackend = prometheus.NewDesc("ctxproxy_backend_info",
	"1, labelled with the backend's kind and version (Ollama's /api/version) and whether that version is newer "+
		"than any whose counting rules ctxproxy knows (then it counts as the newest it knows).",
	[]string{"kind", "version", "newer_than_checked"}, nil)

// backendCollector reports ctxproxy_backend_info from what the backend
// said, without asking it again.
type backendCollector struct{ be *backend.Backend }

func (backendCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descBackend }

func (c backendCollector) Collect(ch chan<- prometheus.Metric) {
	kind, version := c.be.Detected()
	ch <- prometheus.MustNewConstMetric(descBackend, prometheus.GaugeValue, 1, kind, version,
		strconv.FormatBool(exact.NewerThanChecked(version)))
}

// track counts one forwarded request as in flight until the returned
// func is called: `defer s.metrics.track(ex.stream)()`.
func (m *metrics) track(stream bool) (done func()) {
	m.inflight.Add(1)
	if stream {
		m.streams.Add(1)
	}
	return func() {
		m.inflight.Add(-1)
		if stream {
			m.streams.Add(-1)
		}
	}
}

// observeNumCtx records the num_ctx a request was forwarded with.
func (m *metrics) observeNumCtx(n int) {
	if n > 0 {
		m.numCtx.Observe(float64(n))
	}
}

// Summarizer failure reasons (the reason label).
const (
	summaryTimeout = "timeout"
	summaryError   = "error"
)

// maxLoadedModels bounds the per-model series of loaded models. They are
// what the backend reports in memory (Ollama's /api/ps), not what clients
// ask for, and few models fit in memory at once.
const maxLoadedModels = 32

// gpuCollector reports the GPU monitor's last sample at scrape time: it
// never probes the devices itself, so a scrape costs no NVML call.
type gpuCollector struct{ mon *gpu.Monitor }

var (
	descDeviceInfo = prometheus.NewDesc("ctxproxy_gpu_device_info",
		"A device whose memory ctxproxy watches (always 1), with its vendor and product name.",
		[]string{"device", "vendor", "name"}, nil)
	descMemTotal = prometheus.NewDesc("ctxproxy_gpu_memory_total_bytes",
		"Memory of the device (GPU memory; system memory with the cpu probe).", []string{"device"}, nil)
	descMemUsed = prometheus.NewDesc("ctxproxy_gpu_memory_used_bytes",
		"Memory in use on the device, by every process.", []string{"device"}, nil)
	descMemUsage = prometheus.NewDesc("ctxproxy_gpu_memory_pressure_ratio",
		"Share of device memory the memory guard judges (used memory less what the backend's loaded models hold, over total).",
		nil, nil)
	descGuard = prometheus.NewDesc("ctxproxy_gpu_guard_level",
		"Memory guard level: 0 normal, 1 compress, 2 shrink, 3 emergency.", nil, nil)
	descSampleOK = prometheus.NewDesc("ctxproxy_gpu_probe_ok",
		"1 when the last memory sample succeeded, else 0.", []string{"probe"}, nil)
	descSampleAge = prometheus.NewDesc("ctxproxy_gpu_sample_age_seconds",
		"Age of the last memory sample.", nil, nil)
	descLoadedCtx = prometheus.NewDesc("ctxproxy_loaded_model_num_ctx",
		"num_ctx of each model the backend has loaded (Ollama /api/ps context_length).", []string{"model"}, nil)
	descLoadedMem = prometheus.NewDesc("ctxproxy_loaded_model_memory_bytes",
		"Device memory each model the backend has loaded holds (Ollama /api/ps size_vram).", []string{"model"}, nil)
)

// Describe implements prometheus.Collector.
func (gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDeviceInfo, descMemTotal, descMemUsed, descMemUsage, descGuard,
		descSampleOK, descSampleAge, descLoadedCtx, descLoadedMem} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c gpuCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.mon.Reading()
	if snap.Seq == 0 {
		return // nothing sampled yet: no series rather than zeros
	}
	ok := 0.0
	if snap.OK() && snap.Err == nil {
		ok = 1
	}
	ch <- prometheus.MustNewConstMetric(descSampleOK, prometheus.GaugeValue, ok, snap.Probe)
	ch <- prometheus.MustNewConstMetric(descSampleAge, prometheus.GaugeValue, time.Since(snap.Time).Seconds())
	ch <- prometheus.MustNewConstMetric(descGuard, prometheus.GaugeValue, float64(snap.Level))
	if !snap.OK() {
		return
	}
	ch <- prometheus.MustNewConstMetric(descMemUsage, prometheus.GaugeValue, snap.Usage())
	for i, d := range snap.Devices {
		idx := strconv.Itoa(i)
		ch <- prometheus.MustNewConstMetric(descDeviceInfo, prometheus.GaugeValue, 1, idx, d.Vendor, d.Name)
		ch <- prometheus.MustNewConstMetric(descMemTotal, prometheus.GaugeValue, float64(d.Total), idx)
		ch <- prometheus.MustNewConstMetric(descMemUsed, prometheus.GaugeValue, float64(d.Used), idx)
	}
	seen := make(map[string]bool, len(snap.Models))
	for _, lm := range snap.Models {
		if len(seen) == maxLoadedModels {
			break
		}
		if seen[lm.Name] {
			continue // a duplicate name would make the scrape fail
		}
		seen[lm.Name] = true
		if lm.NumCtx > 0 {
			ch <- prometheus.MustNewConstMetric(descLoadedCtx, prometheus.GaugeValue, float64(lm.NumCtx), lm.Name)
		}
		ch <- prometheus.MustNewConstMetric(descLoadedMem, prometheus.GaugeValue, float64(lm.SizeVRAM), lm.Name)
	}
}

// storeCollector reports the session store's and the session writer's
// running totals at scrape time.
type storeCollector struct {
	store  storeCounters
	writer writerCounters
}

// storeCounters and writerCounters are what snapshots.FileStore,
// snapshots.RedisStore and snapshots.Writer report for metrics.
type storeCounters interface {
	Counters() snapshots.Counters
}

type writerCounters interface {
	Counters() snapshots.WriterCounters
}

var (
	descStoreWrites = prometheus.NewDesc("ctxproxy_store_writes_total",
		"Records (sessions, snapshots) the session store wrote.", nil, nil)
	descStoreWriteBytes = prometheus.NewDesc("ctxproxy_store_write_bytes_total",
		"Bytes the session store wrote (compressed, as stored).", nil, nil)
	descStoreWriteErrors = prometheus.NewDesc("ctxproxy_store_write_failures_total",
		"Writes the session store failed (disk full, read-only, Redis down), background fsyncs of session logs included.", nil, nil)
	descStoreReads = prometheus.NewDesc("ctxproxy_store_reads_total",
		"Records the session store read.", nil, nil)
	descStoreReadErrors = prometheus.NewDesc("ctxproxy_store_read_failures_total",
		"Reads the session store failed for a reason other than absence or corruption.", nil, nil)
	descStoreCorrupt = prometheus.NewDesc("ctxproxy_store_corrupt_records_total",
		"Stored records that failed their checks and were set aside.", nil, nil)
	descStoreSkipped = prometheus.NewDesc("ctxproxy_store_corrupt_records_skipped_total",
		"Corrupt records skipped inside session logs, the records after them kept and a copy of the log set aside (also in ctxproxy_store_corrupt_records_total).", nil, nil)
	descStoreTorn = prometheus.NewDesc("ctxproxy_store_torn_logs_total",
		"Session logs found ending in an interrupted write, cut at their last whole record.", nil, nil)
	descSessionUpdates = prometheus.NewDesc("ctxproxy_session_updates_total",
		"Session updates written after chat responses.", nil, nil)
	descSnapshots = prometheus.NewDesc("ctxproxy_snapshots_total",
		"Snapshots written by the session writer (automatic, pre-overflow and queued ones).", nil, nil)
	descSnapshotsAuto = prometheus.NewDesc("ctxproxy_snapshots_auto_total",
		"Snapshots the session writer took by itself at snapshots.auto_threshold.", nil, nil)
	descWriterFailures = prometheus.NewDesc("ctxproxy_session_write_failures_total",
		"Session updates and snapshots the store refused.", nil, nil)
	descWriterDropped = prometheus.NewDesc("ctxproxy_session_writes_dropped_total",
		"Session changes refused because the write queue was full or closing.", nil, nil)
	descWriterPending = prometheus.NewDesc("ctxproxy_session_writes_pending",
		"Sessions waiting to be written now.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.store != nil {
		for _, d := range []*prometheus.Desc{descStoreWrites, descStoreWriteBytes, descStoreWriteErrors,
			descStoreReads, descStoreReadErrors, descStoreCorrupt, descStoreSkipped, descStoreTorn} {
			ch <- d
		}
	}
	if c.writer != nil {
		for _, d := range []*prometheus.Desc{descSessionUpdates, descSnapshots, descSnapshotsAuto,
			descWriterFailures, descWriterDropped, descWriterPending} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	if c.store != nil {
		s := c.store.Counters()
		counter(descStoreWrites, s.Writes)
		counter(descStoreWriteBytes, s.WriteBytes)
		counter(descStoreWriteErrors, s.WriteErrors)
		counter(descStoreReads, s.Reads)
		counter(descStoreReadErrors, s.ReadErrors)
		counter(descStoreCorrupt, s.Corrupt)
		counter(descStoreSkipped, s.Skipped)
		counter(descStoreTorn, s.Torn)
	}
	if c.writer != nil {
		w := c.writer.Counters()
		counter(descSessionUpdates, w.Updates)
		counter(descSnapshots, w.Snapshots)
		counter(descSnapshotsAuto, w.Auto)
		counter(descWriterFailures, w.Failures)
		counter(descWriterDropped, w.Dropped)
		ch <- prometheus.MustNewConstMetric(descWriterPending, prometheus.GaugeValue, float64(w.Pending))
	}
}

// registerReplica exposes ctxproxy_replica_info{replica} 1 when this
// ctxproxy runs among replicas (name is its host name), so that a scrape
// says which replica it came from; nothing when it runs alone.
func registerReplica(reg prometheus.Registerer, name string) {
	if name == "" {
		return
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ctxproxy_replica_info",
		Help:        "1, labelled with this replica's name (its host name), among replicas sharing the Redis store.",
		ConstLabels: prometheus.Labels{"replica": name}})
	info.Set(1)
	reg.MustRegister(info)
}

// recorded counts what the recorder found of one reply.
func (m *metrics) recorded(r plan.Recorded) {
	if r.PromptTokens > 0 {
		m.calibrationError.Observe(r.CountError)
	}
	if r.Truncated {
		m.truncations.Inc()
	}
	if r.Disagreed {
		m.exactDisagreements.Inc()
	}
	if r.ReplyCut {
		m.repliesCut.Inc()
	}
	if r.CachedKnown {
		m.promptCached.Observe(r.Cached)
	}
	if r.PrefixKnown {
		m.prefixKept.Observe(r.PrefixKept)
	}
}
