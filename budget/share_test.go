package budget

import "testing"

// TestShareLearnsFromTheLog: a sharing registry learns what the log
// brings, in the log's order, not what it published; two registries
// applying one log hold the same calibration; an observation the log
// cannot take is learned at once.
func TestShareLearnsFromTheLog(t *testing.T) {
	var log []Observation
	a, b := NewRegistry(Config{}, nil), NewRegistry(Config{}, nil)
	up := true
	a.Share(func(o Observation) bool {
		if up {
			log = append(log, o)
		}
		return up
	})
	for i := range 20 {
		raw := 200 + 37*i
		a.Observe("m", Estimate{Raw: raw, Chars: raw * 9 / 10}, raw*5/4+30, 0)
	}
	if n := a.Calibration("m").Observations; n != 0 {
		t.Fatalf("learned %d observations before the log brought them", n)
	}
	if len(log) != 20 {
		t.Fatalf("published %d observations, want 20", len(log))
	}
	for _, o := range log {
		a.Learn(o)
		b.Learn(o)
	}
	ca, cb := a.Calibration("m"), b.Calibration("m")
	if ca != cb || ca.Observations != 20 {
		t.Fatalf("two registries on one log: %+v and %+v", ca, cb)
	}
	if ca.Ratio < 1.2 || ca.Ratio > 1.3 {
		t.Errorf("ratio %.3f, want about 1.25", ca.Ratio)
	}

	up = false
	a.Observe("m", Estimate{Raw: 500, Chars: 450}, 655, 0)
	if n := a.Calibration("m").Observations; n != 21 {
		t.Errorf("with the log down, %d observations learned, want 21 (learned at once)", n)
	}
	a.Share(nil)
	a.Observe("m", Estimate{Raw: 500, Chars: 450}, 655, 0)
	if n := a.Calibration("m").Observations; n != 22 {
		t.Errorf("no longer sharing: %d observations learned, want 22", n)
	}

	off := false
	c := NewRegistry(Config{Calibrate: &off}, nil)
	c.Learn(log[0])
	if n := c.Calibration("m").Observations; n != 0 {
		t.Errorf("calibration off, yet %d observations learned", n)
	}
}
