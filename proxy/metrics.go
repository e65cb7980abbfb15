package proxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are ctxproxy's Prometheus series. No label takes an unbounded
// value: never a session id or a model name a client can invent freely.
type metrics struct {
	requests   *prometheus.CounterVec
	unparsable *prometheus.CounterVec
	duration   *prometheus.HistogramVec

	tokensBefore, tokensAfter prometheus.Histogram
	dropped, summarized       prometheus.Counter
	truncations               prometheus.Counter
	calibrationError          prometheus.Histogram
	added                     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
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
	m.calibrationError = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ctxproxy_token_estimate_error_ratio",
		Help:    "Relative error of the forwarded prompt's token estimate against the backend's count.",
		Buckets: []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1}})
	m.added = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ctxproxy_added_latency_seconds",
		Help:    "Time ctxproxy spent on a chat request before forwarding it (decode, count, trim, encode).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)})
	reg.MustRegister(m.requests, m.unparsable, m.duration, m.tokensBefore, m.tokensAfter, m.dropped,
		m.summarized, m.truncations, m.calibrationError, m.added)
	return m
}
