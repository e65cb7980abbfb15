package config

import (
	"strings"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// What each package gets from the configuration, and their own checks of
// it.

func (c Config) BudgetConfig() budget.Config {
	calibrate := c.Tokens.Calibrate
	models := make(map[string]budget.Model, len(c.Models))
	for name, m := range c.Models {
		models[name] = budget.Model{MaxTokens: m.MaxTokens, MaxOutputTokens: m.MaxOutputTokens, Multiplier: m.Multiplier}
	}
	return budget.Config{
		Encoding:            c.Tokens.Encoding,
		ApproxCharsPerToken: c.Tokens.ApproxCharsPerToken,
		ImageTokens:         c.Tokens.ImageTokens,
		Calibrate:           &calibrate,
		CacheEntries:        c.Tokens.CacheEntries,
		Models:              models,
		ReserveOutput:       c.Context.ReserveOutput,
		Reserved:            c.Strategy.Reserved,
	}
}

func (c Config) StrategyConfig() rewrite.Config {
	s := c.Strategy
	preserveSystem, preserveMarked := s.SlidingWindow.PreserveSystem, s.Selective.PreserveMarked
	return rewrite.Config{
		Mode:       s.Mode,
		Threshold:  s.Threshold,
		Target:     s.Target,
		OnOverflow: s.OnOverflow,
		SlidingWindow: rewrite.SlidingWindowConfig{
			WindowSize: s.SlidingWindow.WindowSize, PreserveSystem: &preserveSystem},
		Smart:       rewrite.SmartConfig{PreserveFirst: orNone(s.Smart.PreserveFirst), PreserveLast: orNone(s.Smart.PreserveLast)},
		Selective:   rewrite.SelectiveConfig{PreserveRoles: s.Selective.PreserveRoles, PreserveMarked: &preserveMarked},
		Importance:  rewrite.ImportanceConfig{PreserveAbove: s.Importance.PreserveAbove, PreserveRecent: orNone(s.Importance.PreserveRecent)},
		ToolResults: rewrite.ToolResultsConfig{MaxTokens: s.ToolResults.MaxTokens},
		Mask:        rewrite.MaskConfig{KeepLast: orNone(s.Mask.KeepLast), MaxTokens: s.Mask.MaxTokens},
		Composite:   s.Composite,

		TriggerTokens: s.TriggerTokens, TriggerMessages: s.TriggerMessages,
		KeepTokens: s.KeepTokens, KeepMessages: s.KeepMessages,
	}
}

// orNone maps a configured count to rewrite's convention, where 0 means
// the default and a negative number means none.
func orNone(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func (c Config) GPUConfig() gpu.Config {
	auto := c.Context.AutoSize
	return gpu.Config{
		Probe:          c.GPU.Probe,
		PollActive:     c.GPU.PollActive,
		PollIdle:       c.GPU.PollIdle,
		Guard:          gpu.GuardConfig{CompressAt: c.GPU.Guard.CompressAt, ShrinkAt: c.GPU.Guard.ShrinkAt, EmergencyAt: c.GPU.Guard.EmergencyAt},
		AutoSize:       &auto,
		TargetSize:     c.Context.TargetSize,
		MinSize:        c.Context.MinSize,
		MaxSize:        c.Context.MaxSize,
		VRAMBuffer:     uint64(c.Context.VRAMBuffer),
		KVQuantization: c.Context.KVQuantization,
		NumParallel:    c.Context.NumParallel,
		ModelNumCtx:    c.Context.ModelNumCtx,
	}
}

func (c Config) SnapshotsConfig() snapshots.Config {
	s := c.Snapshots
	if s.Store == StoreNone {
		s.Store = "" // nothing is opened; the other keys still validate
	}
	return snapshots.Config{
		Store:         s.Store,
		Dir:           s.Dir,
		AutoThreshold: s.AutoThreshold,
		MaxCount:      s.MaxCount,
		FsyncInterval: s.FsyncInterval,
		Redis:         s.Redis,
	}
}

// packageProblems asks each package to validate its own configuration, so
// check-config reports what they would refuse at start.
func (c Config) packageProblems() []string {
	var out []string
	for _, err := range []error{c.BudgetConfig().Validate(), c.StrategyConfig().Validate(), c.GPUConfig().Validate(),
		c.SnapshotsConfig().Validate(), c.Summarize.Validate()} {
		if err != nil {
			// Each package names its keys; errors.Join puts one a line.
			out = append(out, strings.Split(err.Error(), "\n")...)
		}
	}
	return out
}

func (c Config) SummarizeConfig() rewrite.SummarizeConfig { return c.Summarize }

// system is every long-lived part of a running ctxproxy.
// StoreNone is snapshots.store's value for keeping no content at all.
const StoreNone = "none"
