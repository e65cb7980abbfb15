package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxproxy/ctxproxy/fleet"
)

// The series of each server behind ctxproxy, labelled with its
// configured name (backends[].name): registered only with several
// servers, so that a single backend's metrics are what they were.
var (
	descServerUp = prometheus.NewDesc("ctxproxy_backend_server_up",
		"1 while the server takes requests, 0 while it is taken out (unreachable, or refusing requests), until it answers again.",
		[]string{"backend"}, nil)
	descServerInflight = prometheus.NewDesc("ctxproxy_backend_server_inflight",
		"Requests the server has in flight now.", []string{"backend"}, nil)
	descServerRequests = prometheus.NewDesc("ctxproxy_backend_server_requests_total",
		"Requests sent to the server (each try of a request counts).", []string{"backend"}, nil)
	descServerInfo = prometheus.NewDesc("ctxproxy_backend_server_info",
		"1, labelled with the server's kind and version as it said them, and where its free memory is read (local, none, or the ctxproxy on its machine).",
		[]string{"backend", "kind", "version", "memory"}, nil)
	descServerFree = prometheus.NewDesc("ctxproxy_backend_server_memory_free_bytes",
		"Free memory of the server's devices in its last reading; absent while none is known.", []string{"backend"}, nil)
	descServerTotal = prometheus.NewDesc("ctxproxy_backend_server_memory_total_bytes",
		"Memory of the server's devices in its last reading; absent while none is known.", []string{"backend"}, nil)
)

// fleetCollector reports each server's series at scrape time from what
// ctxproxy has seen: it asks no server and takes no memory reading.
type fleetCollector struct{ r *fleet.Router }

func (fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descServerUp, descServerInflight, descServerRequests, descServerInfo, descServerFree, descServerTotal} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.r.Servers() {
		h := s.Health()
		up := 0.0
		if h.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descServerUp, prometheus.GaugeValue, up, s.Name)
		ch <- prometheus.MustNewConstMetric(descServerInflight, prometheus.GaugeValue, float64(h.InFlight), s.Name)
		ch <- prometheus.MustNewConstMetric(descServerRequests, prometheus.CounterValue, float64(s.Served()), s.Name)
		kind, version := s.Backend.Detected()
		memory := "none"
		if s.Memory != nil {
			memory = s.Memory.Where()
		}
		ch <- prometheus.MustNewConstMetric(descServerInfo, prometheus.GaugeValue, 1, s.Name, kind, version, memory)
		if rd, ok := fleet.Last(s.Memory); ok && rd.OK() {
			ch <- prometheus.MustNewConstMetric(descServerFree, prometheus.GaugeValue, float64(rd.Free()), s.Name)
			ch <- prometheus.MustNewConstMetric(descServerTotal, prometheus.GaugeValue, float64(rd.Total()), s.Name)
		}
	}
}

// registerFleet registers the servers' series when there are several.
func registerFleet(reg prometheus.Registerer, r *fleet.Router) {
	if r != nil && r.Several() {
		reg.MustRegister(fleetCollector{r})
	}
}
