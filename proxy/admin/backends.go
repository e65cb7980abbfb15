package admin

import (
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
)

// gpuStatus is a memory reading as the status shows it.
func gpuStatus(snap gpu.Reading) adminapi.GPUStatus {
	g := adminapi.GPUStatus{Probe: snap.Probe, Level: levelName(snap.Level),
		Total: snap.Total(), Used: snap.Used(), Free: snap.Free(),
		GuardUsage: sessions.Finite(snap.Usage()), Devices: append([]adminapi.Device{}, snap.Devices...)}
	if g.Total > 0 {
		g.Usage = float64(g.Used) / float64(g.Total)
	}
	if snap.Err != nil {
		g.Error = snap.Err.Error()
	}
	return g
}

// serverStatuses is each server of r as the status lists it, from what
// ctxproxy has seen: nothing is asked of the servers, and a memory's
// last reading is shown without taking one.
func serverStatuses(r *fleet.Router) []adminapi.ServerStatus {
	out := make([]adminapi.ServerStatus, 0, len(r.Servers()))
	for _, s := range r.Servers() {
		h := s.Health()
		kind, version := s.Backend.Detected()
		l := s.Backend.Listing()
		st := adminapi.ServerStatus{Name: s.Name, URL: s.URL.Redacted(), Kind: kind, Version: version,
			Up: h.Up, LastError: h.LastErr, Inflight: h.InFlight, Served: s.Served(), Memory: "none",
			ModelsListed: len(l.Models), ModelsLoaded: len(l.Loaded)}
		if !h.Until.IsZero() {
			st.DownUntil = h.Until.UTC().Format(time.RFC3339)
		}
		if s.Memory != nil {
			st.Memory = s.Memory.Where()
		}
		if rd, ok := fleet.Last(s.Memory); ok {
			g := gpuStatus(rd)
			st.GPU = &g
		}
		out = append(out, st)
	}
	return out
}
