package gpu

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConfigZeroValueDefaults(t *testing.T) {
	got := (Config{}).withDefaults()
	want := Config{
		Probe:          "auto",
		PollActive:     5 * time.Second,
		PollIdle:       60 * time.Second,
		Guard:          GuardConfig{CompressAt: 0.80, ShrinkAt: 0.90, EmergencyAt: 0.95},
		AutoSize:       boolp(true),
		MinSize:        2048,
		MaxSize:        131072,
		VRAMBuffer:     512 << 20,
		KVQuantization: "f16",
		NumParallel:    1,
		ModelNumCtx:    "ceiling",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config is invalid: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := Config{
		Probe:          "tpu",
		PollActive:     -time.Second,
		PollIdle:       -time.Second,
		Guard:          GuardConfig{CompressAt: 0.95, ShrinkAt: 0.90, EmergencyAt: 1.5},
		TargetSize:     -1,
		MinSize:        8192,
		MaxSize:        4096,
		KVQuantization: "q5_1",
		NumParallel:    -2,
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	// Every problem at once.
	for _, want := range []string{
		`gpu.probe: "tpu"`, "gpu.poll_active", "gpu.poll_idle", "gpu.guard.emergency_at: 1.5",
		"need compress_at", "context.target_size", "context.min_size 8192 is above context.max_size 4096",
		`context.kv_quantization: "q5_1"`, "context.num_parallel",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	good := Config{Probe: "nvidia", KVQuantization: "q8_0", MinSize: 4096, MaxSize: 65536, Guard: GuardConfig{CompressAt: 0.7}}
	if err := good.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
