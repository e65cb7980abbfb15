package gpu

import (
	"fmt"
	"testing"

	"github.com/ctxproxy/ctxproxy/modelinfo"
)

func TestGuardLevels(t *testing.T) {
	tests := []struct {
		name   string
		cfg    GuardConfig
		usages []float64
		want   []Level
	}{
		{"thresholds", GuardConfig{},
			[]float64{0.5, 0.80, 0.90, 0.95, 1.0},
			[]Level{LevelNormal, LevelCompress, LevelShrink, LevelEmergency, LevelEmergency}},
		{"jump straight to emergency", GuardConfig{},
			[]float64{0.1, 0.97},
			[]Level{LevelNormal, LevelEmergency}},
		{"left only 2 points below the threshold", GuardConfig{},
			[]float64{0.90, 0.895, 0.885, 0.879},
			[]Level{LevelShrink, LevelShrink, LevelShrink, LevelCompress}},
		{"hovering at a threshold does not flap", GuardConfig{},
			[]float64{0.80, 0.79, 0.80, 0.79, 0.80},
			[]Level{LevelCompress, LevelCompress, LevelCompress, LevelCompress, LevelCompress}},
		{"falls through several levels", GuardConfig{},
			[]float64{0.96, 0.5},
			[]Level{LevelEmergency, LevelNormal}},
		{"falls to the level whose release it has not passed", GuardConfig{},
			[]float64{0.96, 0.89},
			[]Level{LevelEmergency, LevelShrink}},
		{"configured thresholds", GuardConfig{CompressAt: 0.5, ShrinkAt: 0.6, EmergencyAt: 0.7},
			[]float64{0.55, 0.65, 0.75, 0.40},
			[]Level{LevelCompress, LevelShrink, LevelEmergency, LevelNormal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGuard(tt.cfg)
			var got []Level
			for _, u := range tt.usages {
				got = append(got, g.Observe(u))
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("levels for %v = %v, want %v", tt.usages, got, tt.want)
			}
			if g.Level() != got[len(got)-1] {
				t.Errorf("Level() = %v, want %v", g.Level(), got[len(got)-1])
			}
		})
	}
}

// checkGuardLevel checks the level the guard reaches at usage.
func checkGuardLevel(t *testing.T, usage float64, want Level) {
	t.Helper()
	if got := NewGuard(GuardConfig{}).Observe(usage); got != want {
		t.Errorf("usage %.2f: level %v, want %v", usage, got, want)
	}
	if got := NewGuard(GuardConfig{}).Observe(usage - 0.001); got >= want {
		t.Errorf("usage %.3f: level %v, want below %v", usage-0.001, got, want)
	}
}

// At 80% the guard asks for compression.
func TestGuardCompressesAt80Percent(t *testing.T) {
	checkGuardLevel(t, 0.80, LevelCompress)
}

// At 90% it forces a smaller context: the Sizer steps
// num_ctx down one bucket.
func TestGuardShrinksAt90Percent(t *testing.T) {
	checkGuardLevel(t, 0.90, LevelShrink)

	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	s := NewSizer(Config{})
	calm := s.Decide(m, snap(1, 8*gb))
	pressed := snap(2, 8*gb)
	pressed.Level = LevelShrink
	if d := s.Decide(m, pressed); d.NumCtx != calm.NumCtx-Bucket {
		t.Errorf("at shrink level NumCtx = %d, want %d", d.NumCtx, calm.NumCtx-Bucket)
	}
}

// At 95% the guard reaches the emergency level, on which the
// proxy snapshots and clears the active sessions; the Monitor announces it
// (TestMonitorLowMemoryEvent).
func TestGuardEmergencyAt95Percent(t *testing.T) {
	checkGuardLevel(t, 0.95, LevelEmergency)
}

func TestLevelString(t *testing.T) {
	for l, want := range map[Level]string{LevelNormal: "normal", LevelCompress: "compress", LevelShrink: "shrink", LevelEmergency: "emergency", 9: "Level(9)"} {
		if l.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(l), l.String(), want)
		}
	}
}

func TestSnapshotUsage(t *testing.T) {
	tests := []struct {
		name string
		s    Reading
		want float64
	}{
		{"no devices", Reading{}, 0},
		{"plain", Reading{Devices: []Device{newDevice("nvidia", "a", 100, 40)}}, 0.6},
		{"sums devices", Reading{Devices: []Device{newDevice("nvidia", "a", 100, 40), newDevice("nvidia", "b", 100, 100)}}, 0.3},
		// Ollama's loaded models are not pressure (see Reading.Usage).
		{"leaves out loaded models", loaded(Reading{Devices: []Device{newDevice("nvidia", "a", 100, 5)}}, modelinfo.Loaded{Size: 80, SizeVRAM: 70}), 0.25},
		{"models unknown: all used memory", Reading{Devices: []Device{newDevice("nvidia", "a", 100, 5)}, Models: []modelinfo.Loaded{{SizeVRAM: 70}}}, 0.95},
		{"models larger than used", loaded(Reading{Devices: []Device{newDevice("nvidia", "a", 100, 50)}}, modelinfo.Loaded{SizeVRAM: 70}), 0},
		{"cpu probe counts the part in RAM", loaded(Reading{Probe: "cpu", Devices: []Device{newDevice("cpu", "RAM", 100, 40)}}, modelinfo.Loaded{Size: 30, SizeVRAM: 10}), 0.4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Usage(); fmt.Sprintf("%.4f", got) != fmt.Sprintf("%.4f", tt.want) {
				t.Errorf("Usage() = %v, want %v", got, tt.want)
			}
		})
	}
}
