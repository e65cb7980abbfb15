package budget

import "sync/atomic"

// Observation is one report of a backend on a prompt's size, as a
// Registry learns its calibration from it: the raw counts ctxproxy made
// of what it forwarded, and the count the backend reported.
type Observation struct {
	Model    string `json:"model"`
	Raw      int    `json:"raw"`
	Chars    int    `json:"chars"`
	Reported int    `json:"reported"`
}

// sharing is a Registry's publisher of observations (Share).
type sharing struct {
	publish atomic.Pointer[func(Observation) bool]
}

// Share makes r hand each observation it would learn from to publish
// instead, for replicas that learn together: publish puts it on a log
// every replica reads in one order, and each applies what it reads with
// Learn, its own observations included, so that every replica holds the
// same calibration and counts the same request alike. When publish
// returns false (the log cannot take it), r learns the observation at
// once, on its own. A nil publish makes r learn on its own again.
func (r *Registry) Share(publish func(Observation) bool) {
	if publish == nil {
		r.sharing.publish.Store(nil)
		return
	}
	r.sharing.publish.Store(&publish)
}

// Learn applies o to the calibration of its model, as Observe does with
// a report that is neither truncated nor censored. It does nothing when
// calibration is off.
func (r *Registry) Learn(o Observation) {
	if o.Model == "" || !r.cfg.calibrate() {
		return
	}
	r.state(o.Model).cal.observe(Estimate{Raw: o.Raw, Chars: o.Chars}, o.Reported)
}

// learn learns from o, through the shared log when there is one.
func (r *Registry) learn(o Observation) {
	if p := r.sharing.publish.Load(); p != nil && (*p)(o) {
		return
	}
	r.Learn(o)
}
