package gpu

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/modelinfo"
)

// snap is a sample of one 48 GiB device with free bytes free.
func snap(seq uint64, free uint64) Reading {
	const total = 48 * gb
	return Reading{Seq: seq, Probe: "nvidia", Devices: []Device{newDevice("nvidia", "test GPU", total, free)}}
}

// loaded adds Ollama's loaded models to a snapshot.
func loaded(s Reading, models ...modelinfo.Loaded) Reading {
	s.Models, s.ModelsKnown = models, true
	return s
}

func boolp(b bool) *bool { return &b }

// withNumCtx is model with a Modelfile num_ctx of n.
func withNumCtx(model func(*testing.T) Workload, n int) func(*testing.T) Workload {
	return func(t *testing.T) Workload {
		m := model(t)
		m.NumCtx = n
		return m
	}
}

func TestSizerDecide(t *testing.T) {
	llama := func(t *testing.T) Workload { return Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")} }
	tests := []struct {
		name       string
		cfg        Config
		model      func(t *testing.T) Workload
		snap       Reading
		wantNumCtx int
		wantLimit  int
		wantReason string // whole reason, or "…substring" to look for
	}{
		{
			name: "formula", model: llama, snap: snap(1, 16*gb),
			wantNumCtx: 126976, wantLimit: 126976,
			wantReason: "free 16.0 GiB − buffer 512.0 MiB = 15.5 GiB / 128.0 KiB per token → 126976",
		},
		{
			name: "weights of an unloaded model",
			model: func(t *testing.T) Workload {
				m := llama(t)
				m.Weights = 4 * gb
				return m
			},
			snap:       snap(1, 20*gb),
			wantNumCtx: 126976, wantLimit: 126976,
			wantReason: "free 20.0 GiB − weights 4.0 GiB − buffer 512.0 MiB = 15.5 GiB / 128.0 KiB per token → 126976",
		},
		{
			name: "a loaded model's KV cache counts as available", model: llama,
			snap:       loaded(snap(1, 2*gb), modelinfo.Loaded{Name: "llama3.1:8b", Size: 12*gb + 200*mib, SizeVRAM: 12*gb + 200*mib, NumCtx: 65536}),
			wantNumCtx: 77824, wantLimit: 77824,
			wantReason: "free 2.0 GiB + its KV cache 8.0 GiB − buffer 512.0 MiB = 9.5 GiB / 128.0 KiB per token → 77824",
		},
		{
			name: "loaded without context_length: its memory less weights",
			model: func(t *testing.T) Workload {
				m := llama(t)
				m.Weights = 4 * gb
				return m
			},
			snap:       loaded(snap(1, 2*gb), modelinfo.Loaded{Name: "llama3.1:8b", Size: 12 * gb, SizeVRAM: 12 * gb}),
			wantNumCtx: 77824, wantLimit: 77824,
		},
		{
			name: "loaded on the CPU: nothing to give back on the GPU", model: llama,
			snap:       loaded(snap(1, 2*gb), modelinfo.Loaded{Name: "llama3.1:8b", Size: 12 * gb, NumCtx: 65536}),
			wantNumCtx: 12288, wantLimit: 12288,
		},
		{
			name: "loaded in system RAM under the cpu probe", model: llama,
			snap: func() Reading {
				s := loaded(snap(1, 2*gb), modelinfo.Loaded{Name: "llama3.1:8b", Size: 12 * gb, NumCtx: 65536})
				s.Probe = "cpu"
				return s
			}(),
			wantNumCtx: 77824, wantLimit: 77824,
		},
		{
			name: "another loaded model is just used memory", model: llama,
			snap:       loaded(snap(1, 2*gb), modelinfo.Loaded{Name: "qwen2.5:7b", Size: 12 * gb, SizeVRAM: 12 * gb, NumCtx: 65536}),
			wantNumCtx: 12288, wantLimit: 12288,
		},
		{
			name: "rounded down to a bucket", model: llama, snap: snap(1, 10*gb+100*mib),
			wantNumCtx: 77824, wantLimit: 78624,
			wantReason: "…→ 78624, bucket 77824",
		},
		{
			name: "capped by max_size", model: llama, snap: snap(1, 40*gb),
			wantNumCtx: 131072, wantLimit: 131072,
			wantReason: "…, capped by max_size 131072",
		},
		{
			name: "capped by trained context_length", snap: snap(1, 40*gb),
			model:      func(t *testing.T) Workload { return Workload{Name: "qwen2.5:7b", Facts: facts(t, "qwen2.5-7b")} },
			wantNumCtx: 32768, wantLimit: 32768,
			wantReason: "…, capped by context_length 32768",
		},
		{
			name: "capped by the model's own num_ctx", snap: snap(1, 40*gb),
			model:      withNumCtx(llama, 32768),
			wantNumCtx: 32768, wantLimit: 32768,
			wantReason: "…, capped by the model's own num_ctx 32768 (context.model_num_ctx: ceiling)",
		},
		{
			name: "a cap is kept as it is, not rounded down to a bucket", snap: snap(1, 40*gb),
			model:      withNumCtx(llama, 4834),
			wantNumCtx: 4834, wantLimit: 4834,
		},
		{
			name: "below the model's own num_ctx when memory is short", snap: snap(1, 2*gb),
			model:      withNumCtx(llama, 32768),
			wantNumCtx: 12288, wantLimit: 12288,
		},
		{
			name: "the model's own num_ctx ignored", cfg: Config{ModelNumCtx: ModelNumCtxIgnore}, snap: snap(1, 40*gb),
			model:      withNumCtx(llama, 32768),
			wantNumCtx: 131072, wantLimit: 131072,
		},
		{
			name: "a fixed target_size within the model's own num_ctx", cfg: Config{AutoSize: boolp(false), TargetSize: 65536}, snap: snap(1, 40*gb),
			model:      withNumCtx(llama, 16384),
			wantNumCtx: 16384, wantLimit: 16384,
		},
		{
			name: "tiny model capped by its context_length", snap: snap(1, 1*gb),
			model:      func(t *testing.T) Workload { return Workload{Name: "tiny", Facts: facts(t, "tiny")} },
			wantNumCtx: 8192, wantLimit: 8192,
		},
		{
			name: "raised to min_size", model: llama, snap: snap(1, 600*mib),
			wantNumCtx: 2048, wantLimit: 704,
			wantReason: "…→ 704, bucket 0, raised to min_size 2048",
		},
		{
			name: "nothing fits", model: llama, snap: snap(1, 100*mib),
			wantNumCtx: 2048, wantLimit: 1,
		},
		{
			name: "auto with target_size prefers it", cfg: Config{TargetSize: 32768}, model: llama, snap: snap(1, 16*gb),
			wantNumCtx: 32768, wantLimit: 126976,
			wantReason: "…, capped by target_size 32768",
		},
		{
			name: "auto with target_size lowered when memory is short", cfg: Config{TargetSize: 32768}, model: llama, snap: snap(1, 2*gb),
			wantNumCtx: 12288, wantLimit: 12288,
		},
		{
			name: "q8_0 halves the cost", cfg: Config{KVQuantization: "q8_0"}, model: llama, snap: snap(1, 8*gb),
			wantNumCtx: 122880, wantLimit: 122880,
			wantReason: "free 8.0 GiB − buffer 512.0 MiB = 7.5 GiB / 64.0 KiB per token → 122880",
		},
		{
			name: "num_parallel 2 doubles it", cfg: Config{NumParallel: 2}, model: llama, snap: snap(1, 16*gb),
			wantNumCtx: 63488, wantLimit: 63488,
		},
		{
			name: "min and max sizes", cfg: Config{MinSize: 4096, MaxSize: 16384}, model: llama, snap: snap(1, 16*gb),
			wantNumCtx: 16384, wantLimit: 16384,
		},
		{
			name: "larger vram_buffer", cfg: Config{VRAMBuffer: 2 * gb}, model: llama, snap: snap(1, 16*gb),
			wantNumCtx: 114688, wantLimit: 114688,
		},
		{
			name: "unknown facts: min_size", model: func(*testing.T) Workload { return Workload{Name: "mystery"} }, snap: snap(1, 16*gb),
			wantNumCtx: 2048, wantLimit: 0,
			wantReason: "model facts unknown: min_size 2048",
		},
		{
			name: "unknown facts with target_size", cfg: Config{TargetSize: 8192},
			model: func(*testing.T) Workload { return Workload{Name: "mystery"} }, snap: snap(1, 16*gb),
			wantNumCtx: 8192, wantLimit: 0,
			wantReason: "model facts unknown: target_size 8192",
		},
		{
			name: "no sample yet", model: llama, snap: Reading{},
			wantNumCtx: 2048, wantLimit: 0,
			wantReason: "no memory sample yet: min_size 2048",
		},
		{
			name: "probe failed", model: llama, snap: Reading{Seq: 3, Err: errors.New("nvml: GPU is lost")},
			wantNumCtx: 2048, wantLimit: 0,
			wantReason: "no memory sample (nvml: GPU is lost): min_size 2048",
		},
		{
			name: "fixed target_size", cfg: Config{AutoSize: boolp(false), TargetSize: 8192}, model: llama, snap: snap(1, 16*gb),
			wantNumCtx: 8192, wantLimit: 126976,
			wantReason: "fixed size 8192",
		},
		{
			name: "fixed target_size above memory says so", cfg: Config{AutoSize: boolp(false), TargetSize: 65536}, model: llama, snap: snap(1, 4*gb),
			wantNumCtx: 65536, wantLimit: 28672,
			wantReason: "fixed size 65536; more than fits in memory (28672)",
		},
		{
			name: "fixed target_size within the trained context", cfg: Config{AutoSize: boolp(false), TargetSize: 65536},
			model: func(t *testing.T) Workload { return Workload{Name: "qwen2.5:7b", Facts: facts(t, "qwen2.5-7b")} }, snap: snap(1, 40*gb),
			wantNumCtx: 32768, wantLimit: 32768,
			wantReason: "fixed size 65536 (kept within [2048, 32768]: 32768)",
		},
		{
			name: "auto off without target leaves num_ctx alone", cfg: Config{AutoSize: boolp(false)}, model: llama, snap: snap(1, 16*gb),
			wantNumCtx: 0, wantLimit: 126976,
			wantReason: "auto_size off and no target_size: num_ctx left to the client and Ollama",
		},
		{
			name: "guard at shrink steps one bucket down", model: llama,
			snap:       func() Reading { s := snap(1, 16*gb); s.Level = LevelShrink; return s }(),
			wantNumCtx: 124928, wantLimit: 126976,
			wantReason: "…; memory guard at shrink (usage 67%): one bucket down to 124928",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewSizer(tt.cfg).Decide(tt.model(t), tt.snap)
			if d.NumCtx != tt.wantNumCtx || d.Limit != tt.wantLimit {
				t.Errorf("NumCtx, Limit = %d, %d; want %d, %d (reason %q)", d.NumCtx, d.Limit, tt.wantNumCtx, tt.wantLimit, d.Reason)
			}
			checkReason(t, d.Reason, tt.wantReason)
		})
	}
}

func checkReason(t *testing.T, got, want string) {
	t.Helper()
	if sub, ok := strings.CutPrefix(want, "…"); ok {
		if !strings.Contains(got, sub) {
			t.Errorf("reason %q does not contain %q", got, sub)
		}
	} else if want != "" && got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
}

// sample is one step of a hysteresis sequence: a new sample (seq
// increments unless same) and the num_ctx expected after it.
type sample struct {
	free  uint64
	same  bool // the same sample again (a second request between samples)
	level Level
	want  int
}

func TestSizerHysteresis(t *testing.T) {
	tests := []struct {
		name    string
		samples []sample
	}{
		{"first sample is taken at once", []sample{{free: 8 * gb, want: 61440}}},
		{"up after two samples", []sample{
			{free: 8 * gb, want: 61440},
			{free: 9 * gb, want: 61440},
			{free: 9 * gb, want: 69632},
		}},
		{"up by the smaller of two moves", []sample{
			{free: 8 * gb, want: 61440},
			{free: 10 * gb, want: 61440},
			{free: 9 * gb, want: 69632},
		}},
		{"a blip does not move", []sample{
			{free: 8 * gb, want: 61440},
			{free: 9 * gb, want: 61440},
			{free: 8 * gb, want: 61440},
			{free: 9 * gb, want: 61440},
		}},
		{"requests between samples do not count as samples", []sample{
			{free: 8 * gb, want: 61440},
			{free: 9 * gb, want: 61440},
			{free: 9 * gb, same: true, want: 61440},
			{free: 9 * gb, same: true, want: 61440},
		}},
		{"down within the buffer waits a sample", []sample{
			{free: 8 * gb, want: 61440},
			{free: 7*gb + 900*mib, want: 61440},
			{free: 7*gb + 900*mib, want: 59392},
		}},
		{"down past the buffer moves at once", []sample{
			{free: 8 * gb, want: 61440},
			{free: 6 * gb, want: 45056},
		}},
		{"up and down do not add up to a move", []sample{
			{free: 8 * gb, want: 61440},
			{free: 9 * gb, want: 61440},
			{free: 7*gb + 900*mib, want: 61440},
			{free: 8 * gb, want: 61440},
		}},
		{"guard shrink holds one bucket down and blocks moves up", []sample{
			{free: 8 * gb, want: 61440},
			{free: 9 * gb, level: LevelShrink, want: 59392},
			{free: 9 * gb, level: LevelShrink, want: 59392},
			{free: 9 * gb, level: LevelCompress, want: 61440},
			{free: 9 * gb, level: LevelCompress, want: 69632},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSizer(Config{})
			m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
			var seq uint64
			var got []int
			var want []int
			for _, step := range tt.samples {
				if !step.same {
					seq++
				}
				sn := snap(seq, step.free)
				sn.Level = step.level
				d := s.Decide(m, sn)
				got = append(got, d.NumCtx)
				want = append(want, step.want)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("num_ctx per sample = %v, want %v", got, want)
			}
		})
	}
}

// A model that Ollama loads with the chosen num_ctx keeps it: the sizing
// counts its KV cache as its own, so the reload does not feed back.
func TestSizerStableAcrossReload(t *testing.T) {
	s := NewSizer(Config{})
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b"), Weights: 4 * gb}
	first := s.Decide(m, loaded(snap(1, 20*gb)))
	if first.NumCtx != 126976 {
		t.Fatalf("first NumCtx = %d", first.NumCtx)
	}
	kv := uint64(first.NumCtx) * first.BytesPerToken
	lm := modelinfo.Loaded{Name: "llama3.1:8b", Size: 4*gb + kv + 300*mib, SizeVRAM: 4*gb + kv + 300*mib, NumCtx: first.NumCtx}
	free := 20*gb - lm.SizeVRAM
	for seq := uint64(2); seq < 10; seq++ {
		if d := s.Decide(m, loaded(snap(seq, free), lm)); d.NumCtx != first.NumCtx {
			t.Fatalf("sample %d: NumCtx = %d, want %d (%s)", seq, d.NumCtx, first.NumCtx, d.Reason)
		}
	}
	// Unloaded again (keep_alive ran out): the same memory is free again.
	if d := s.Decide(m, loaded(snap(10, 20*gb))); d.NumCtx != first.NumCtx {
		t.Errorf("after unload: NumCtx = %d, want %d", d.NumCtx, first.NumCtx)
	}
	s.Forget(m.Name)
	if d := s.Decide(m, loaded(snap(11, 8*gb))); d.NumCtx != 28672 {
		t.Errorf("after Forget the first sample is taken at once: NumCtx = %d (%s)", d.NumCtx, d.Reason)
	}
}

func TestSizerModelsAreIndependent(t *testing.T) {
	s := NewSizer(Config{})
	llama := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	qwen := Workload{Name: "qwen2.5:7b", Facts: facts(t, "qwen2.5-7b")}
	if d := s.Decide(llama, snap(1, 4*gb)); d.NumCtx != 28672 {
		t.Errorf("llama NumCtx = %d", d.NumCtx)
	}
	if d := s.Decide(qwen, snap(1, 4*gb)); d.NumCtx != 32768 {
		t.Errorf("qwen NumCtx = %d", d.NumCtx)
	}
}

// `/context size N` and `/context auto` at runtime.
func TestSizerRuntimeOverride(t *testing.T) {
	s := NewSizer(Config{})
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	if auto, target := s.Mode(); !auto || target != 0 {
		t.Errorf("Mode() = %v, %d; want auto", auto, target)
	}
	if d := s.Decide(m, snap(1, 8*gb)); d.NumCtx != 61440 || !d.Auto {
		t.Fatalf("auto: %+v", d)
	}
	if err := s.SetTarget(0); !errors.Is(err, ErrBadSize) {
		t.Errorf("SetTarget(0) = %v, want ErrBadSize", err)
	}
	if err := s.SetTarget(16384); err != nil {
		t.Fatal(err)
	}
	if auto, target := s.Mode(); auto || target != 16384 {
		t.Errorf("Mode() = %v, %d; want fixed 16384", auto, target)
	}
	d := s.Decide(m, snap(2, 8*gb))
	if d.NumCtx != 16384 || d.Auto || d.Reason != "fixed size 16384" {
		t.Errorf("fixed: %+v", d)
	}
	s.SetAuto()
	if auto, _ := s.Mode(); !auto {
		t.Error("Mode() after SetAuto is not auto")
	}
	// Sized afresh: the new memory picture is taken at once.
	if d := s.Decide(m, snap(3, 10*gb)); d.NumCtx != 77824 || !d.Auto {
		t.Errorf("auto again: %+v", d)
	}

	// SetAuto also overrides auto_size: false.
	s = NewSizer(Config{AutoSize: boolp(false), TargetSize: 4096})
	s.SetAuto()
	if d := s.Decide(m, snap(1, 8*gb)); d.NumCtx != 61440 {
		t.Errorf("SetAuto over auto_size false: %+v", d)
	}
}

func TestDecisionClient(t *testing.T) {
	d := NewSizer(Config{}).Decide(Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}, snap(1, 10*gb+100*mib))
	tests := []struct {
		name       string
		client     int
		want       int
		wantReason string
	}{
		{"none sent", 0, 77824, ""},
		{"smaller is kept", 8192, 8192, ""},
		{"odd size that fits is kept", 78000, 78000, ""},
		{"exactly the limit is kept", 78624, 78624, ""},
		{"too large is lowered", 131072, 77824, "client num_ctx 131072 does not fit (at most 78624 for llama3.1:8b); lowered to 77824"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := d.Client(tt.client)
			if got != tt.want || reason != tt.wantReason {
				t.Errorf("Client(%d) = %d, %q; want %d, %q", tt.client, got, reason, tt.want, tt.wantReason)
			}
		})
	}
	unknown := NewSizer(Config{}).Decide(Workload{Name: "mystery"}, snap(1, 10*gb))
	if got, reason := unknown.Client(65536); got != 65536 || reason != "" {
		t.Errorf("unknown limit: Client(65536) = %d, %q; want it kept", got, reason)
	}
}

// The headroom leaves the 512 MiB safety buffer free; unknown facts or
// memory leave no limit to fit under.
func TestHeadroomLeavesSafetyBuffer(t *testing.T) {
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	d := NewSizer(Config{}).Decide(m, snap(1, 1*gb)) // 512 MiB above the buffer = 4096 tokens
	if d.BytesPerToken == 0 || d.Headroom/d.BytesPerToken != 4096 {
		t.Errorf("headroom %d bytes at %d a token, want 4096 tokens", d.Headroom, d.BytesPerToken)
	}
	if d := NewSizer(Config{}).Decide(Workload{Name: "mystery"}, snap(1, 40*gb)); d.BytesPerToken != 0 {
		t.Errorf("unknown facts: %d bytes a token, want 0", d.BytesPerToken)
	}
	if d := NewSizer(Config{}).Decide(m, Reading{}); d.Limit != 0 {
		t.Errorf("without a sample: limit %d, want 0", d.Limit)
	}
}

func TestSafetyBufferDefaultsTo512MiB(t *testing.T) {
	if got := (Config{}).withDefaults().VRAMBuffer; got != 512*mib {
		t.Errorf("default VRAMBuffer = %d, want 512 MiB", got)
	}
}

// The size follows available memory, the model and the quantization.
func TestSizeFromMemoryModelAndQuantization(t *testing.T) {
	llama := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	qwen := Workload{Name: "qwen2.5:7b", Facts: facts(t, "qwen2.5-7b")}
	decide := func(cfg Config, m Workload, free uint64) int { return NewSizer(cfg).Decide(m, snap(1, free)).NumCtx }
	base := decide(Config{}, llama, 4*gb)
	if more := decide(Config{}, llama, 8*gb); more <= base {
		t.Errorf("more memory: %d, not above %d", more, base)
	}
	if other := decide(Config{}, qwen, 4*gb); other <= base {
		t.Errorf("cheaper model: %d, not above %d", other, base)
	}
	if q8 := decide(Config{KVQuantization: "q8_0"}, llama, 4*gb); q8 <= base {
		t.Errorf("q8_0: %d, not above %d", q8, base)
	}
}

// The size is floor((available − safety buffer) / bytes per token).
func TestAutoSizeFormula(t *testing.T) {
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	for _, free := range []uint64{1 * gb, 3*gb + 17*mib, 9*gb + 999, 15 * gb} {
		d := NewSizer(Config{}).Decide(m, snap(1, free))
		want := int((free - 512*mib) / (128 * kib))
		if d.Limit != want {
			t.Errorf("free %d: Limit = %d, want %d", free, d.Limit, want)
		}
		if d.NumCtx != max(want/Bucket*Bucket, 2048) {
			t.Errorf("free %d: NumCtx = %d, want the bucket of %d", free, d.NumCtx, want)
		}
	}
}

// target_size is the preferred size.
func TestTargetSizeIsPreferred(t *testing.T) {
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	if d := NewSizer(Config{TargetSize: 16384}).Decide(m, snap(1, 40*gb)); d.NumCtx != 16384 {
		t.Errorf("auto with target: %d", d.NumCtx)
	}
	if d := NewSizer(Config{AutoSize: boolp(false), TargetSize: 16384}).Decide(m, snap(1, 40*gb)); d.NumCtx != 16384 {
		t.Errorf("fixed target: %d", d.NumCtx)
	}
}

// The size is never below min_size.
func TestSizeNeverBelowMinSize(t *testing.T) {
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	for _, free := range []uint64{0, 100 * mib, 1 * gb} {
		for _, level := range []Level{LevelNormal, LevelEmergency} {
			sn := snap(1, free)
			sn.Level = level
			if d := NewSizer(Config{MinSize: 4096}).Decide(m, sn); d.NumCtx < 4096 {
				t.Errorf("free %d, level %v: NumCtx %d below min_size", free, level, d.NumCtx)
			}
		}
	}
}

// The size is never above max_size.
func TestSizeNeverAboveMaxSize(t *testing.T) {
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	for _, cfg := range []Config{{MaxSize: 32768}, {MaxSize: 32768, AutoSize: boolp(false), TargetSize: 65536}, {MaxSize: 32768, TargetSize: 65536}} {
		if d := NewSizer(cfg).Decide(m, snap(1, 40*gb)); d.NumCtx > 32768 {
			t.Errorf("%+v: NumCtx %d above max_size", cfg, d.NumCtx)
		}
	}
}

// auto_size adjusts to memory; off, it does not.
func TestAutoSizeFollowsMemory(t *testing.T) {
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	auto, fixed := NewSizer(Config{}), NewSizer(Config{AutoSize: boolp(false), TargetSize: 8192})
	var autoSizes, fixedSizes []int
	for i, free := range []uint64{40 * gb, 4 * gb} {
		autoSizes = append(autoSizes, auto.Decide(m, snap(uint64(i+1), free)).NumCtx)
		fixedSizes = append(fixedSizes, fixed.Decide(m, snap(uint64(i+1), free)).NumCtx)
	}
	if autoSizes[0] == autoSizes[1] {
		t.Errorf("auto sizes %v did not follow memory", autoSizes)
	}
	if fixedSizes[0] != 8192 || fixedSizes[1] != 8192 {
		t.Errorf("fixed sizes %v moved", fixedSizes)
	}
}

// vram_buffer is reserved.
func TestVRAMBufferReserved(t *testing.T) {
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	d := NewSizer(Config{VRAMBuffer: 1 * gb}).Decide(m, snap(1, 5*gb))
	if want := int(4 * gb / (128 * kib)); d.Limit != want {
		t.Errorf("Limit = %d, want %d", d.Limit, want)
	}
}

// kv_quantization is used in the calculation.
func TestKVQuantizationUsedInSizing(t *testing.T) {
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	for quant, want := range map[string]uint64{"f16": 128 * kib, "q8_0": 64 * kib, "q4_0": 32 * kib} {
		if d := NewSizer(Config{KVQuantization: quant}).Decide(m, snap(1, 5*gb)); d.BytesPerToken != want {
			t.Errorf("%s: BytesPerToken = %d, want %d", quant, d.BytesPerToken, want)
		}
	}
}

func TestSizerConcurrent(t *testing.T) {
	s := NewSizer(Config{})
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				s.Decide(m, snap(uint64(j), uint64(4+i)*gb))
				s.Mode()
				if j%10 == 0 {
					s.SetAuto()
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkDecide is a request between samples (the common case).
func BenchmarkDecide(b *testing.B) {
	s := NewSizer(Config{})
	m := Workload{Name: "llama3.1:8b", Facts: facts(b, "llama3.1-8b"), Weights: 4 * gb}
	sn := snap(1, 20*gb)
	b.ReportAllocs()
	for b.Loop() {
		s.Decide(m, sn)
	}
}

// BenchmarkDecideNewSample is the first request after each sample.
func BenchmarkDecideNewSample(b *testing.B) {
	s := NewSizer(Config{})
	m := Workload{Name: "llama3.1:8b", Facts: facts(b, "llama3.1-8b"), Weights: 4 * gb}
	sn := snap(1, 20*gb)
	b.ReportAllocs()
	for b.Loop() {
		sn.Seq++
		s.Decide(m, sn)
	}
}

// Model names are client data: the Sizer remembers a bounded number, and
// a model in use keeps its held num_ctx through a flood of other names
// (losing it would let num_ctx move on the next sample and reload it).
func TestSizerRemembersBoundedModels(t *testing.T) {
	s := NewSizer(Config{})
	f := facts(t, "tiny")
	hot := Workload{Name: "hot", Facts: f}
	held := s.Decide(hot, snap(1, gb)).NumCtx
	if held == 0 {
		t.Fatal("no num_ctx for the hot model")
	}
	for i := range 3 * maxModels {
		s.Decide(Workload{Name: fmt.Sprint("m", i), Facts: f}, snap(1, gb))
		s.Decide(hot, snap(1, gb))
	}
	if n := s.models.Len(); n > maxModels {
		t.Errorf("%d models remembered, want at most %d", n, maxModels)
	}
	switch st, ok := s.models.Peek("hot"); {
	case !ok:
		t.Error("hot model forgotten")
	case st.held != held:
		t.Errorf("hot model holds %d, want %d", st.held, held)
	}
}

// Requests between two samples get the same decision, made once.
func TestSizerDecisionReusedWithinASample(t *testing.T) {
	s := NewSizer(Config{})
	m := Workload{Name: "llama3.1:8b", Facts: facts(t, "llama3.1-8b")}
	a := s.Decide(m, snap(1, 8*gb))
	b := s.Decide(m, snap(1, 8*gb))
	if a != b {
		t.Errorf("decisions differ: %+v, %+v", a, b)
	}
	m.Weights = 2 * gb // new facts about the model are not ignored
	if c := s.Decide(m, snap(1, 8*gb)); c.Reason == a.Reason {
		t.Errorf("weights change gave the cached decision: %s", c.Reason)
	}
}
