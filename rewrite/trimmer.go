package rewrite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/ctxproxy/ctxproxy/internal/check"
)

// What strategy.on_overflow may say (README, Strategies): what to do when the
// messages that are never dropped — the leading system messages and the
// newest user turn — alone exceed the context window.
const (
	// OverflowShrink cuts the middle out of the largest contents, tool
	// results first, so that the prompt fits (Shrink). The default.
	OverflowShrink = "shrink"
	// OverflowReject fails with ErrOverflow; the proxy answers 400 with
	// code context_length_exceeded in the client's dialect.
	OverflowReject = "reject"
	// OverflowForward forwards the conversation as it is.
	OverflowForward = "forward"
)

var (
	// ErrOverflow reports a conversation that cannot be made to fit the
	// context window: on_overflow is reject, or shrinking was not enough.
	ErrOverflow = errors.New("rewrite: context length exceeded")
	// ErrUnknownMode reports a strategy mode that does not exist or is not
	// available.
	ErrUnknownMode = errors.New("rewrite: unknown strategy mode")
)

// Defaults of the strategy: keys (config.example.yaml).
const (
	DefaultMode      = "smart"
	DefaultThreshold = 0.80
	DefaultTarget    = 0.60
)

// defaultComposite is the default of strategy.composite.
var defaultComposite = []string{"smart", "token_budget"}

// Config mirrors the configuration's strategy: section. Its zero value
// works: every zero field means the default config.example.yaml lists.
type Config struct {
	// Mode is none, sliding_window, token_budget, smart, selective,
	// importance, mask, summarize, hybrid or composite; "" means DefaultMode.
	// summarize and hybrid need a Compactor's strategies (NewTrimmer).
	Mode string `mapstructure:"mode"`
	// Threshold is the share of the effective limit at which trimming
	// starts; 0 means DefaultThreshold.
	Threshold float64 `mapstructure:"threshold"`
	// Target is the share of the effective limit that trimming cuts down
	// to; 0 means DefaultTarget. See Budget.
	Target float64 `mapstructure:"target"`
	// OnOverflow is shrink, reject or forward; "" means shrink.
	OnOverflow string `mapstructure:"on_overflow"`

	SlidingWindow SlidingWindowConfig `mapstructure:"sliding_window"`
	Smart         SmartConfig         `mapstructure:"smart"`
	Selective     SelectiveConfig     `mapstructure:"selective"`
	Importance    ImportanceConfig    `mapstructure:"importance"`
	ToolResults   ToolResultsConfig   `mapstructure:"tool_results"`
	Mask          MaskConfig          `mapstructure:"mask"`
	// Composite lists the modes the composite mode runs in order; nil
	// means smart, then token_budget.
	Composite []string `mapstructure:"composite"`

	// TriggerTokens, when positive, starts trimming once the conversation
	// costs this many tokens, if that comes before Threshold.
	TriggerTokens int `mapstructure:"trigger_tokens"`
	// TriggerMessages, when positive, starts trimming once the
	// conversation holds this many non-system messages.
	TriggerMessages int `mapstructure:"trigger_messages"`
	// KeepTokens, when positive, replaces Target: trimming keeps the
	// leading system messages and about this many tokens of the newest
	// messages.
	KeepTokens int `mapstructure:"keep_tokens"`
	// KeepMessages, when positive, replaces Target: trimming keeps the
	// leading system messages and about the newest this many messages
	// (what they cost; tool units stay whole). With KeepTokens, the
	// smaller of the two.
	KeepMessages int `mapstructure:"keep_messages"`
}

// SlidingWindowConfig configures SlidingWindow.
type SlidingWindowConfig struct {
	// WindowSize: 0 means DefaultWindowSize.
	WindowSize int `mapstructure:"window_size"`
	// PreserveSystem: nil means true.
	PreserveSystem *bool `mapstructure:"preserve_system"`
}

// SmartConfig configures Smart.
type SmartConfig struct {
	// PreserveFirst: 0 means DefaultPreserveFirst, negative none.
	PreserveFirst int `mapstructure:"preserve_first"`
	// PreserveLast: 0 means DefaultPreserveLast, negative none.
	PreserveLast int `mapstructure:"preserve_last"`
}

// SelectiveConfig configures Selective.
type SelectiveConfig struct {
	// PreserveRoles: nil means system and user.
	PreserveRoles []string `mapstructure:"preserve_roles"`
	// PreserveMarked: nil means true.
	PreserveMarked *bool `mapstructure:"preserve_marked"`
}

// ImportanceConfig configures Importance.
type ImportanceConfig struct {
	// PreserveAbove: 0 means DefaultPreserveAbove.
	PreserveAbove float64 `mapstructure:"preserve_above"`
	// PreserveRecent: 0 means DefaultPreserveRecent, negative none.
	PreserveRecent int `mapstructure:"preserve_recent"`
}

// ToolResultsConfig configures ToolResults.
type ToolResultsConfig struct {
	// MaxTokens: 0 means DefaultToolResultTokens, negative turns
	// compaction off.
	MaxTokens int `mapstructure:"max_tokens"`
}

// MaskConfig configures Mask.
type MaskConfig struct {
	// KeepLast: 0 means DefaultMaskKeepLast, negative none.
	KeepLast int `mapstructure:"keep_last"`
	// MaxTokens: 0 means no bound.
	MaxTokens int `mapstructure:"max_tokens"`
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.Target == 0 {
		c.Target = DefaultTarget
	}
	if c.OnOverflow == "" {
		c.OnOverflow = OverflowShrink
	}
	if c.Composite == nil {
		c.Composite = defaultComposite
	}
	return c
}

func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// Validate reports every problem with c at once. summarize and hybrid are
// valid modes here: their strategies are made at run time (NewCompactor).
func (c Config) Validate() error { return c.withDefaults().validate(nil) }

func (c Config) validate(extra map[string]Strategy) error {
	if extra == nil {
		extra = map[string]Strategy{"summarize": None{}, "hybrid": None{}}
	}
	var errs []error
	if _, err := newStrategy(c.Mode, c, nil, extra); err != nil {
		errs = append(errs, fmt.Errorf("strategy.mode: %w", err))
	}
	if !(c.Threshold > 0 && c.Threshold <= 1) {
		errs = append(errs, fmt.Errorf("strategy.threshold: %v is not in (0, 1]", c.Threshold))
	}
	if !(c.Target > 0 && c.Target <= c.Threshold) {
		errs = append(errs, fmt.Errorf("strategy.target: %v is not in (0, threshold]", c.Target))
	}
	for _, k := range []struct {
		key string
		n   int
	}{{"trigger_tokens", c.TriggerTokens}, {"trigger_messages", c.TriggerMessages},
		{"keep_tokens", c.KeepTokens}, {"keep_messages", c.KeepMessages}} {
		errs = append(errs, check.NotNegative("strategy."+k.key, k.n))
	}
	if !slices.Contains([]string{OverflowShrink, OverflowReject, OverflowForward}, c.OnOverflow) {
		errs = append(errs, fmt.Errorf("strategy.on_overflow: %q is not shrink, reject or forward", c.OnOverflow))
	}
	for _, m := range c.Composite {
		if _, err := baseStrategy(m, c, nil, extra); err != nil {
			errs = append(errs, fmt.Errorf("strategy.composite: %w", err))
		}
	}
	return errors.Join(errs...)
}

// newStrategy returns the strategy ctxproxy runs for mode ("" means
// cfg.Mode): the mode's strategy followed by TokenBudget (with KeepTurn),
// so that the result fits the target even when the mode's own rule is a
// count (sliding_window), or keeps messages the target has no room for
// (selective, importance). Smart runs with Fill. composite runs
// cfg.Composite in order, then TokenBudget unless the list ends with it.
// none returns None. summarize and hybrid need a Summarizer: their
// strategies come in extra (NewTrimmer's, from Compactor.Summarize and
// Compactor.Hybrid), and without them the error wraps ErrUnknownMode.
func newStrategy(mode string, cfg Config, log *slog.Logger, extra map[string]Strategy) (Strategy, error) {
	if mode == "" {
		mode = cfg.Mode
	}
	budget := TokenBudget{KeepTurn: true, Log: log}
	var stages []Strategy
	switch mode {
	case "none":
		return None{}, nil
	case "token_budget":
		return budget, nil
	case "composite":
		if len(cfg.Composite) == 0 {
			return nil, fmt.Errorf("%w: composite lists no modes", ErrUnknownMode)
		}
		for _, m := range cfg.Composite {
			s, err := baseStrategy(m, cfg, log, extra)
			if err != nil {
				return nil, err
			}
			stages = append(stages, s)
		}
		if cfg.Composite[len(cfg.Composite)-1] == "token_budget" {
			return Composite{Strategies: stages}, nil
		}
	default:
		s, err := baseStrategy(mode, cfg, log, extra)
		if err != nil {
			return nil, err
		}
		stages = []Strategy{s}
	}
	return Composite{Strategies: append(stages, budget)}, nil
}

func baseStrategy(mode string, cfg Config, log *slog.Logger, extra map[string]Strategy) (Strategy, error) {
	if s, ok := extra[mode]; ok {
		return s, nil
	}
	switch mode {
	case "sliding_window":
		return SlidingWindow{
			WindowSize:     cfg.SlidingWindow.WindowSize,
			PreserveSystem: boolOr(cfg.SlidingWindow.PreserveSystem, true),
		}, nil
	case "smart":
		return Smart{PreserveFirst: cfg.Smart.PreserveFirst, PreserveLast: cfg.Smart.PreserveLast, Fill: true}, nil
	case "selective":
		return Selective{
			PreserveRoles:  cfg.Selective.PreserveRoles,
			PreserveMarked: boolOr(cfg.Selective.PreserveMarked, true),
			Steady:         true,
		}, nil
	case "importance":
		return Importance{PreserveAbove: cfg.Importance.PreserveAbove, PreserveRecent: cfg.Importance.PreserveRecent}, nil
	case "token_budget":
		return TokenBudget{KeepTurn: true, Log: log}, nil
	case "tool_results":
		return ToolResults{MaxTokens: cfg.ToolResults.MaxTokens}, nil
	case "mask":
		return Mask{KeepLast: cfg.Mask.KeepLast, MaxTokens: cfg.Mask.MaxTokens}, nil
	case "summarize", "hybrid":
		return nil, fmt.Errorf("%w: %q needs a summarizer (NewTrimmer with a Compactor's strategies)", ErrUnknownMode, mode)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownMode, mode)
}

// Budget is trimming with hysteresis (README, Strategies: "Move the cut
// every turn"). It says whether a
// conversation of total tokens must be trimmed under an effective limit
// (act: total reached threshold·limit), and to what budget.
//
// Trimming to the same fraction on every turn would move the cut by a
// message or two each turn, and every moved cut makes the backend
// recompute the prompt from there on. ctxproxy is stateless (the client
// resends the whole history each time), so it cannot remember where it cut
// last; instead the cut is quantized. With T = target·limit and Q =
// (threshold−target)·limit, the amount to drop is a whole number of Q:
//
//	n = ⌊(total − T) / Q⌋,  budget = total − n·Q  ∈ [T, T+Q)
//
// Strategies drop the shortest oldest-first run of messages worth at least
// n·Q, and the history before the cut never changes, so the same messages
// are dropped on every turn until the conversation has grown by another Q
// (a fifth of the window by default): then n steps up and the cut jumps
// ahead by Q at once. The forwarded conversation is thus kept between 60%
// and 80% of the limit, and its prefix changes once per Q of growth rather
// than on every turn (TestHysteresisKeepsPrefix).
func Budget(total, limit int, threshold, target float64) (budget int, act bool) {
	if limit <= 0 || float64(total) < threshold*float64(limit) {
		return total, false
	}
	t := int(target * float64(limit))
	q := int((threshold - target) * float64(limit))
	if q <= 0 {
		return t, true
	}
	n := (total - t) / q
	return total - n*q, true
}

// Total returns what msgs cost, using each message's cached count when it
// has one.
func Total(msgs []Message, c Counter) int {
	t := 0
	for i := range msgs {
		t += cost(&msgs[i], c)
	}
	return t
}

// Trimmer is what the proxy calls on every chat request: it decides whether
// to trim (Budget), compacts long tool results, runs the strategy of the
// request's mode down to the budget, and handles what still overflows the
// window (strategy.on_overflow). It is safe for concurrent use.
type Trimmer struct {
	cfg        Config
	log        *slog.Logger
	tools      ToolResults
	strategies map[string]Strategy
}

// modes are the values of strategy.mode a Trimmer builds.
var modes = []string{"none", "sliding_window", "token_budget", "smart", "selective", "importance", "mask", "composite"}

// Modes lists every value strategy.mode takes: the ones a Trimmer builds
// and the two that need a summarizer (summarize, hybrid).
func Modes() []string { return append(slices.Clone(modes), "summarize", "hybrid") }

// NewTrimmer validates cfg and builds a strategy for every mode. extra adds
// strategies by their Name, usable as a mode and in strategy.composite (the
// hook for summarize and hybrid, which need a backend to call).
func NewTrimmer(cfg Config, log *slog.Logger, extra ...Strategy) (*Trimmer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ex := make(map[string]Strategy, len(extra))
	for _, s := range extra {
		ex[s.Name()] = s
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(ex); err != nil {
		return nil, err
	}
	t := &Trimmer{
		cfg:        cfg,
		log:        log,
		tools:      ToolResults{MaxTokens: cfg.ToolResults.MaxTokens},
		strategies: make(map[string]Strategy),
	}
	for _, m := range append(slices.Clone(modes), slices.Collect(maps.Keys(ex))...) {
		if s, err := newStrategy(m, cfg, log, ex); err == nil {
			t.strategies[m] = s
		}
	}
	return t, nil
}

// Strategy returns the strategy for mode ("" means the configured mode),
// or an error wrapping ErrUnknownMode; the proxy can check an
// X-Ctxproxy-Strategy header with it.
func (t *Trimmer) Strategy(mode string) (Strategy, error) {
	if mode == "" {
		mode = t.cfg.Mode
	}
	s, ok := t.strategies[mode]
	if !ok {
		_, err := baseStrategy(mode, t.cfg, nil, nil)
		if err == nil {
			err = fmt.Errorf("%w: %q", ErrUnknownMode, mode)
		}
		return nil, err
	}
	return s, nil
}

// Trim fits msgs, the whole history as the client sent it, to an effective
// limit of limit tokens, with the strategy of req.Mode ("" means the
// configured one):
//
//  1. Below the threshold·limit it returns msgs unchanged (Notice empty);
//     req.Threshold, when set, replaces strategy.threshold.
//  2. Otherwise it compacts long tool results (ToolResults), computes the
//     budget from what is left (Budget) and runs the strategy down to it.
//  3. If the result still exceeds limit — the kept-always part alone is too
//     big — on_overflow decides: shrink (Shrink to limit; ErrOverflow if
//     even that cannot fit), reject (ErrOverflow) or forward.
//
// Mode none skips step 2. The Result's messages carry their counts in
// Tokens, so Total of them is cheap.
//
// When the strategy is or holds a Prefetcher (summarize, hybrid), Trim
// also starts it, below the threshold too, as the conversation nears its
// next trim step (see Prefetcher); the proxy needs to do nothing more. A
// dry run (req.DryRun) starts nothing.
//
// With req.MaxMessages set it first caps the conversation at that many
// non-system messages (MaxMessages), whatever the usage, and goes on from
// there. The strategies get req, and limit, in their Input.
func (t *Trimmer) Trim(ctx context.Context, req Request, msgs []Message, limit int, c Counter) (Result, error) {
	capped, err := capMessages(ctx, req, msgs, c)
	if err != nil || capped.Dropped == 0 {
		if err != nil {
			return Result{}, err
		}
		return t.trim(ctx, req, msgs, limit, c)
	}
	res, err := t.trim(ctx, req, capped.Messages, limit, c)
	if err != nil {
		return Result{}, err
	}
	res.Dropped += capped.Dropped
	res.Notice = joinNotices(capped.Notice, res.Notice)
	return res, nil
}

func (t *Trimmer) trim(ctx context.Context, req Request, msgs []Message, limit int, c Counter) (Result, error) {
	s, err := t.Strategy(req.Mode)
	if err != nil {
		return Result{}, err
	}
	total := Total(msgs, c)
	th := req.threshold(t.cfg.Threshold)
	target := min(t.cfg.Target, th)
	th, target, msgAct := t.triggers(msgs, limit, th, target, c)
	_, act := Budget(total, limit, th, target)
	act = act || msgAct
	q := max(int((th-target)*float64(limit)), 0)
	var pf Prefetcher
	if !req.DryRun { // a dry run starts no summaries
		pf = prefetcherOf(s)
	}
	lead := 0
	if pf != nil && limit > 0 && pf.PrefetchAt() > 0 {
		// Cheap: it looks at the newest iterations only.
		lead = prefetchLead(limit, th, pf.PrefetchAt(), turnGrowth(msgs, c))
	}
	if pf != nil && (lead <= 0 || float64(total) < th*float64(limit)-float64(lead)) {
		pf = nil // far from any step: the common case costs nothing
	}
	if !act && pf == nil {
		return Result{Messages: msgs}, nil
	}
	res := Result{Messages: msgs}
	step := func(s Strategy, target int) error {
		r, err := s.Apply(ctx, Input{Messages: res.Messages, Target: target, Counter: c, Limit: limit, Step: q, Request: req})
		if err != nil {
			return err
		}
		res = Result{
			Messages:   r.Messages,
			Dropped:    res.Dropped + r.Dropped,
			Summarized: res.Summarized + r.Summarized,
			Notice:     joinNotices(res.Notice, r.Notice),
		}
		return nil
	}
	if _, none := s.(None); !none {
		if err := step(t.tools, 0); err != nil {
			return Result{}, err
		}
		total = Total(res.Messages, c)
		if pf != nil {
			// With the tool results compacted as the step will see them,
			// so that the summaries written now are the ones it asks for.
			if next, ok := nextStep(total, limit, th, target, lead); ok {
				pf.Prefetch(ctx, Input{Messages: res.Messages, Target: next, Counter: c, Limit: limit, Step: q, Request: req})
			}
		}
		if !act {
			return Result{Messages: msgs}, nil
		}
		if budget, act := Budget(total, limit, th, target); act {
			if err := step(s, budget); err != nil {
				return Result{}, err
			}
		} else if msgAct {
			if err := step(s, min(total, int(target*float64(limit)))); err != nil {
				return Result{}, err
			}
		}
	}
	after := Total(res.Messages, c)
	if after <= limit {
		return res, nil
	}
	switch t.cfg.OnOverflow {
	case OverflowForward:
		t.log.Warn("rewrite: conversation exceeds the context window; forwarding it as is",
			"tokens", after, "limit", limit)
		return res, nil
	case OverflowReject:
		return Result{}, fmt.Errorf("%w: %d tokens, window %d", ErrOverflow, after, limit)
	}
	if err := step(Shrink{}, limit); err != nil {
		return Result{}, err
	}
	if after = Total(res.Messages, c); after > limit {
		return Result{}, fmt.Errorf("%w: %d tokens after shrinking, window %d", ErrOverflow, after, limit)
	}
	return res, nil
}
