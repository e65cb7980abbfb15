package proxy

import (
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// Settings are the parts of the configuration a running Server takes
// without a restart (a configuration reload). A nil field keeps what is
// in force.
type Settings struct {
	// Trimmer replaces the strategy, its thresholds and its options.
	Trimmer *rewrite.Trimmer
	// Models replaces the models: overrides of the token registry
	// (budget.Registry.SetModels); what calibration learned is kept.
	Models map[string]budget.Model
}

// Apply puts set in force from the next request on. A request under way
// keeps the strategy it started with, and no connection is touched: the
// trimmer is swapped atomically and each request loads it once.
func (s *Server) Apply(set Settings) {
	if set.Trimmer != nil {
		s.trimmer.Store(set.Trimmer)
	}
	if set.Models != nil && s.tokens != nil {
		s.tokens.SetModels(set.Models)
	}
	s.metrics.reloads.WithLabelValues("applied").Inc()
	s.metrics.lastReload.SetToCurrentTime()
	s.metrics.lastReloadFailed.Set(0)
}

// ReloadRejected records a reload whose new configuration was refused, so
// the previous one stays in force (ctxproxy_config_last_reload_failed).
func (s *Server) ReloadRejected() {
	s.metrics.reloads.WithLabelValues("rejected").Inc()
	s.metrics.lastReloadFailed.Set(1)
}
