package gpu

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// golden compares got with testdata/report/name, or rewrites it with
// -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "report", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func TestReport(t *testing.T) {
	twoGPUs := Reading{Seq: 4, Probe: "nvidia", Devices: []Device{
		newDevice("nvidia", "NVIDIA GeForce RTX 4090", 25757220864, 20132659200),
		newDevice("nvidia", "NVIDIA GeForce RTX 3090", 25769803776, 25232932864),
	}}
	llama := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b"), Weights: 4920753328}
	tests := []struct {
		name  string
		snap  Reading
		model *Workload
		cfg   Config
	}{
		{name: "nvidia-two-gpus-llama", snap: twoGPUs, model: &llama},
		{name: "nvidia-llama-loaded", model: &llama, snap: loaded(twoGPUs, modelinfo.Loaded{
			Name: "llama3.1:8b", Size: 4920753328 + 512*mib, SizeVRAM: 4920753328 + 512*mib, NumCtx: 4096})},
		{name: "devices-only", snap: twoGPUs},
		{name: "cpu-unknown-model", snap: Reading{Seq: 1, Probe: "cpu", Devices: []Device{newDevice("cpu", "system RAM (cgroup limit)", 8*gb, 6*gb)}},
			model: &Workload{Name: "mystery:latest"}},
		{name: "probe-failed", snap: Reading{Seq: 2, Probe: "amd", Err: errors.New("gpu: no device: no AMD GPU"), Level: LevelShrink}, model: &llama},
		{name: "fixed-off", snap: twoGPUs, model: &llama, cfg: Config{AutoSize: boolp(false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d *Decision
			if tt.model != nil {
				dd := NewSizer(tt.cfg).Decide(*tt.model, tt.snap)
				d = &dd
			}
			r := NewReport(tt.snap, d)
			var text bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name+".txt", text.Bytes())
			js, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name+".json", append(js, '\n'))
		})
	}
}

// The JSON keys are the external contract of `ctxproxy gpu --json`.
func TestReportJSONShape(t *testing.T) {
	d := Decision{Model: "m", NumCtx: 2048, BytesPerToken: 1, Reason: "r"}
	js, err := json.Marshal(NewReport(snap(1, 1*gb), &d))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	sorted := cmp.Transformer("sort", func(in []string) []string {
		out := append([]string(nil), in...)
		for i := range out {
			for j := i + 1; j < len(out); j++ {
				if out[j] < out[i] {
					out[i], out[j] = out[j], out[i]
				}
			}
		}
		return out
	})
	if diff := cmp.Diff([]string{"devices", "model"}, keys(got), sorted); diff != "" {
		t.Errorf("top keys: %s", diff)
	}
	dev := got["devices"].([]any)[0].(map[string]any)
	if diff := cmp.Diff([]string{"free", "name", "total", "used", "vendor"}, keys(dev), sorted); diff != "" {
		t.Errorf("device keys: %s", diff)
	}
	model := got["model"].(map[string]any)
	if diff := cmp.Diff([]string{"bytes_per_token", "name", "num_ctx", "reason"}, keys(model), sorted); diff != "" {
		t.Errorf("model keys: %s", diff)
	}
	// Bytes are integers, not floats or strings.
	if !bytes.Contains(js, []byte(`"total":51539607552`)) {
		t.Errorf("total not an integer: %s", js)
	}
	// No devices is [] rather than null.
	empty, _ := json.Marshal(NewReport(Reading{}, nil))
	if string(empty) != `{"devices":[]}` {
		t.Errorf("empty report = %s", empty)
	}
}
