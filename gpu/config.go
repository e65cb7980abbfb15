package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/check"
	"github.com/ctxproxy/ctxproxy/modelinfo"
)

// Defaults for the zero value of [Config] (the context: and gpu: sections
// of config.example.yaml).
const (
	DefaultMinSize    = 2048
	DefaultMaxSize    = 131072
	DefaultVRAMBuffer = 512 << 20 // a safety buffer of 512 MiB
	DefaultPollActive = 5 * time.Second
	DefaultPollIdle   = 60 * time.Second

	// Bucket is the step num_ctx moves in. Every distinct num_ctx makes
	// Ollama reload the model (num_ctx is one of the runner options that
	// Ollama's server/sched.go runnerRef.needsReload compares, v0.17.4), so
	// sizes are rounded down to a multiple of it.
	Bucket = 2048
)

// Config configures probing, sizing and the memory guard. Its zero value
// works: a zero field means the default its comment names. The config key
// each field mirrors is given in brackets.
type Config struct {
	// Probe picks the memory probe: "auto" (the default), "nvidia", "amd",
	// "apple" or "cpu". [gpu.probe]
	Probe string
	// PollActive is how often the monitor samples while a chat request is
	// in flight; 0 means 5s. [gpu.poll_active]
	PollActive time.Duration
	// PollIdle is how often it samples otherwise; 0 means 60s.
	// [gpu.poll_idle]
	PollIdle time.Duration
	// Guard holds the memory guard's levels. [gpu.guard]
	Guard GuardConfig

	// AutoSize sizes num_ctx from free memory; nil means true.
	// [context.auto_size]
	AutoSize *bool
	// TargetSize is the num_ctx used when AutoSize is false. With AutoSize
	// it is the preferred size: the sizing never picks more, and picks
	// less when memory is short. 0 means none.
	// [context.target_size]
	TargetSize int
	// MinSize is the smallest num_ctx ever chosen; 0 means 2048.
	// [context.min_size]
	MinSize int
	// MaxSize is the largest; 0 means 131072.
	// [context.max_size]
	MaxSize int
	// VRAMBuffer is the memory left free as a safety buffer, in bytes; 0
	// means 512 MiB. [context.vram_buffer]
	VRAMBuffer uint64
	// KVQuantization is Ollama's KV-cache type (OLLAMA_KV_CACHE_TYPE):
	// "f16" (the default), "q8_0" or "q4_0".
	// [context.kv_quantization]
	KVQuantization string
	// NumParallel is Ollama's OLLAMA_NUM_PARALLEL: the KV cache holds
	// num_ctx tokens for each parallel slot; 0 means 1.
	// [context.num_parallel]
	NumParallel int
	// ModelNumCtx is what a model's own num_ctx (a Modelfile's PARAMETER
	// num_ctx, Workload.NumCtx) is to the sizing: "ceiling" (the
	// default), the user's largest num_ctx for that model, sized from
	// memory below it; or "ignore", sized as any other model.
	// [context.model_num_ctx]
	ModelNumCtx string
}

// What context.model_num_ctx may say.
const (
	ModelNumCtxCeiling = "ceiling"
	ModelNumCtxIgnore  = "ignore"
)

// GuardConfig holds the memory guard's levels, as fractions of device
// memory in use. A zero field means its default.
type GuardConfig struct {
	// CompressAt: the proxy compresses earlier; 0 means 0.80.
	CompressAt float64
	// ShrinkAt: num_ctx steps down one bucket; 0 means 0.90.
	ShrinkAt float64
	// EmergencyAt: the proxy snapshots and clears active sessions; 0
	// means 0.95.
	EmergencyAt float64
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Probe == "" {
		c.Probe = ProbeAuto
	}
	if c.PollActive <= 0 {
		c.PollActive = DefaultPollActive
	}
	if c.PollIdle <= 0 {
		c.PollIdle = DefaultPollIdle
	}
	c.Guard = c.Guard.withDefaults()
	if c.AutoSize == nil {
		auto := true
		c.AutoSize = &auto
	}
	if c.MinSize <= 0 {
		c.MinSize = DefaultMinSize
	}
	if c.MaxSize <= 0 {
		c.MaxSize = DefaultMaxSize
	}
	if c.MaxSize < c.MinSize {
		c.MaxSize = c.MinSize
	}
	if c.VRAMBuffer == 0 {
		c.VRAMBuffer = DefaultVRAMBuffer
	}
	if !modelinfo.KVType(c.KVQuantization) {
		c.KVQuantization = "f16"
	}
	if c.NumParallel <= 0 {
		c.NumParallel = 1
	}
	if c.ModelNumCtx == "" {
		c.ModelNumCtx = ModelNumCtxCeiling
	}
	return c
}

func (g GuardConfig) withDefaults() GuardConfig {
	if g.CompressAt <= 0 {
		g.CompressAt = 0.80
	}
	if g.ShrinkAt <= 0 {
		g.ShrinkAt = 0.90
	}
	if g.EmergencyAt <= 0 {
		g.EmergencyAt = 0.95
	}
	return g
}

// Validate reports every problem in c at once. Zero fields are valid (they
// mean the defaults).
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, check.OneOf("gpu.probe", c.Probe, ProbeAuto, ProbeNVIDIA, ProbeAMD, ProbeApple, ProbeCPU))
	switch c.ModelNumCtx {
	case "", ModelNumCtxCeiling, ModelNumCtxIgnore:
	default:
		errs = append(errs, fmt.Errorf("context.model_num_ctx: %q is not ceiling or ignore", c.ModelNumCtx))
	}
	errs = append(errs, check.NotNegative("gpu.poll_active", c.PollActive),
		check.NotNegative("gpu.poll_idle", c.PollIdle))
	g := c.Guard
	for _, f := range []struct {
		key string
		v   float64
	}{{"compress_at", g.CompressAt}, {"shrink_at", g.ShrinkAt}, {"emergency_at", g.EmergencyAt}} {
		errs = append(errs, check.Within("gpu.guard."+f.key, f.v, 0, 1))
	}
	if d := g.withDefaults(); !(d.CompressAt <= d.ShrinkAt && d.ShrinkAt <= d.EmergencyAt) {
		errs = append(errs, fmt.Errorf("gpu.guard: need compress_at (%v) ≤ shrink_at (%v) ≤ emergency_at (%v)", d.CompressAt, d.ShrinkAt, d.EmergencyAt))
	}
	errs = append(errs, check.NotNegative("context.target_size", c.TargetSize),
		check.NotNegative("context.min_size", c.MinSize),
		check.NotNegative("context.max_size", c.MaxSize))
	if c.MinSize > 0 && c.MaxSize > 0 && c.MinSize > c.MaxSize {
		errs = append(errs, fmt.Errorf("context.min_size %d is above context.max_size %d", c.MinSize, c.MaxSize))
	}
	if !modelinfo.KVType(c.KVQuantization) && c.KVQuantization != "" {
		errs = append(errs, fmt.Errorf("context.kv_quantization: %q is not one of f16, q8_0, q4_0", c.KVQuantization))
	}
	errs = append(errs, check.NotNegative("context.num_parallel", c.NumParallel))
	return errors.Join(errs...)
}
