package budget

import (
	"sync"
	"testing"
)

func TestSetModels(t *testing.T) {
	tests := []struct {
		name   string
		before map[string]Model
		after  map[string]Model
		model  string
		want   Window
	}{
		{
			name:   "override added",
			before: nil,
			after:  map[string]Model{"mymodel": {MaxTokens: 16384, MaxOutputTokens: 2048}},
			model:  "mymodel:7b",
			want:   Window{MaxTokens: 16384, MaxOutputTokens: 2048},
		},
		{
			name:   "override changed",
			before: map[string]Model{"llama3.1": {MaxTokens: 8192}},
			after:  map[string]Model{"llama3.1": {MaxTokens: 32768}},
			model:  "llama3.1:8b",
			want:   Window{MaxTokens: 32768, MaxOutputTokens: DefaultOutputTokens},
		},
		{
			name:   "override removed: the table again",
			before: map[string]Model{"gpt-4o": {MaxTokens: 1000, MaxOutputTokens: 100}},
			after:  map[string]Model{},
			model:  "gpt-4o",
			want:   mustKnown(t, "gpt-4o"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(Config{Models: tt.before}, nil)
			_ = r.Window(tt.model, 0)
			r.SetModels(tt.after)
			if got := r.Window(tt.model, 0); got != tt.want {
				t.Errorf("Window after SetModels = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func mustKnown(t *testing.T, model string) Window {
	t.Helper()
	l, ok := Known(model)
	if !ok {
		t.Fatalf("%s is not in the table", model)
	}
	return l
}

// A reload keeps what calibration learned, and a new multiplier applies to
// a model that has learned nothing yet.
func TestSetModelsKeepsCalibration(t *testing.T) {
	r := NewRegistry(Config{Models: map[string]Model{"learned": {Multiplier: 1.0}, "fresh": {Multiplier: 1.0}}}, nil)
	e := Estimate{Tokens: 1000, Raw: 1000, Chars: 1000}
	for range 5 {
		r.Observe("learned", e, 1300, 0)
	}
	_ = r.Calibration("fresh")
	learned := r.Calibration("learned")

	r.SetModels(map[string]Model{"learned": {Multiplier: 2.0}, "fresh": {Multiplier: 1.5}})
	if got := r.Calibration("learned"); got != learned {
		t.Errorf("learned calibration changed on reload: %+v, want %+v", got, learned)
	}
	if got := r.Calibration("fresh").Ratio; got != 1.5 {
		t.Errorf("fresh model ratio = %v, want the new multiplier 1.5", got)
	}
	if got := r.Calibration("unseen").Ratio; got != 1 {
		t.Errorf("unseen model ratio = %v, want 1", got)
	}
}

// With calibration off the multiplier is the correction: a reload applies
// it even to a model that has seen responses.
func TestSetModelsCalibrationOff(t *testing.T) {
	off := false
	r := NewRegistry(Config{Calibrate: &off, Models: map[string]Model{"m": {Multiplier: 1.2}}}, nil)
	r.Observe("m", Estimate{Tokens: 1000, Raw: 1000, Chars: 1000}, 1000, 0)
	r.SetModels(map[string]Model{"m": {Multiplier: 1.4}})
	if got := r.Calibration("m").Ratio; got != 1.4 {
		t.Errorf("ratio = %v, want 1.4", got)
	}
}

// SetModels may run while requests read the overrides (go test -race).
func TestSetModelsConcurrent(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 200 {
				if i == 0 {
					r.SetModels(map[string]Model{"m": {MaxTokens: 4096 + j, Multiplier: 1 + float64(j%3)/10}})
					continue
				}
				_ = r.Window("m:1b", 0)
				_ = r.MessageCounter("m:1b")
			}
		})
	}
	wg.Wait()
}
