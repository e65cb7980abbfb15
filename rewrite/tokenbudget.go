package rewrite

import (
	"context"
	"log/slog"
)

// TokenBudget drops the oldest messages until the conversation fits the
// target. It keeps every system message, the messages marked
// _preserve, the newest user message and the last unit.
//
// When the system messages alone exceed the target, TokenBudget keeps only
// the system messages and logs a warning, unless KeepTurn is set.
// ctxproxy's own pipeline (every mode's strategy) sets KeepTurn, because a
// prompt without the user's question is useless: it keeps the newest user
// turn and leaves the overflow to strategy.on_overflow (README,
// Strategies).
type TokenBudget struct {
	// KeepTurn keeps the newest user turn even when the system messages
	// alone exceed the target.
	KeepTurn bool
	// Log receives that warning; nil discards it.
	Log *slog.Logger
}

// Name implements Strategy.
func (TokenBudget) Name() string { return "token_budget" }

// Apply implements Strategy.
func (t TokenBudget) Apply(ctx context.Context, in Input) (Result, error) {
	return run(ctx, t, in)
}

func (t TokenBudget) prune(p *plan, target int) {
	if !t.KeepTurn {
		sys := 0
		for i := range p.msgs {
			if !p.dropped[i] && isSystem(&p.msgs[i]) {
				sys += p.tok[i]
			}
		}
		if sys > target {
			if t.Log != nil {
				t.Log.Warn("rewrite: system messages alone exceed the token budget; keeping only them",
					"system_tokens", sys, "target", target)
			}
			for u := 0; u < p.g.count(); u++ {
				if !p.system[u] {
					p.pinned[u] = false
					p.drop(u)
				}
			}
			p.style = styleWindow
			return
		}
	}
	before := p.ndrop
	p.dropUntilFits(p.candidates(func(u int) bool { return !p.system[u] && !p.preserve[u] }), target)
	if p.ndrop > before {
		p.style = styleWindow
	}
}
