package budget

import (
	"cmp"
	"slices"
)

// SetModels replaces the models: overrides while the Registry is in use
// (a configuration reload); the next call of Window sees them. Validate
// them first with Config.Validate.
//
// What the Registry learned is kept: a model's calibration comes from the
// backend's own counts and outweighs any configured guess. Only a model
// whose multiplier changed and that has nothing learned yet (or every
// model, with calibration off, where the multiplier is the correction)
// starts over from the new multiplier.
func (r *Registry) SetModels(models map[string]Model) {
	next := sortedOverrides(models)
	prev := r.overrides.Swap(next)
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, st := range r.models.All() {
		oldOv, _ := lookup(name, overrideName, *prev)
		newOv, _ := lookup(name, overrideName, *next)
		if oldOv.Multiplier == newOv.Multiplier {
			continue
		}
		st.cal.restart(newOv.Multiplier, !r.cfg.calibrate())
	}
}

// override returns the models: entry that applies to model.
func (r *Registry) override(model string) (override, bool) {
	tbl := *r.overrides.Load()
	if len(tbl) == 0 {
		return override{}, false // no models: section: nothing to normalize the name for
	}
	return lookup(model, overrideName, tbl)
}

func overrideName(o override) string { return o.name }

// sortedOverrides turns the models: section into the lookup table, sorted
// by name for a deterministic choice between equally long names.
func sortedOverrides(models map[string]Model) *[]override {
	out := make([]override, 0, len(models))
	for name, m := range models {
		out = append(out, override{name: name, Model: m})
	}
	slices.SortFunc(out, func(a, b override) int { return cmp.Compare(a.name, b.name) })
	return &out
}

// restart makes prior the calibrator's starting ratio when it has learned
// nothing yet, or always when force is set.
func (c *calibrator) restart(prior float64, force bool) {
	fresh := newCalibrator(prior)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur.Observations > 0 && !force {
		return
	}
	c.prior, c.cur, c.bases, c.unexplained = fresh.prior, fresh.cur, fresh.bases, 0
}
