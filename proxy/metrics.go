package proxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are ctxproxy's Prometheus series. No label takes an unbounded
// value: never a session id or a model name a client can invent freely.
type metrics struct {
	requests   *prometheus.CounterVec
	unparsable *prometheus.CounterVec
	duration   *prometheus.HistogramVec
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
	reg.MustRegister(m.requests, m.unparsable, m.duration)
	return m
}
