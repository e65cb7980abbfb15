package rewrite

import (
	"context"
	"fmt"
	"strings"
)

// pruner is implemented by this package's strategies: they mark their
// drops and edits on a plan, so that Composite can chain them over one
// plan and assemble the result, markers included, once.
type pruner interface {
	prune(p *plan, target int)
}

func run(ctx context.Context, s pruner, in Input) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	p := newPlan(in.Messages, in.Counter)
	s.prune(p, in.Target)
	return p.result(), nil
}

// Composite applies its strategies in order and stops as soon as the
// conversation fits the target (the second strategy is not applied when
// the first suffices). A conversation that already fits is
// returned unchanged.
//
// The strategies of this package run on one shared plan: a later one sees
// what an earlier one dropped, and the markers are placed once, counting
// messages of the original conversation. Any other Strategy gets the
// messages assembled so far, with the same target, limit and request.
type Composite struct {
	Strategies []Strategy
}

// Name implements Strategy.
func (Composite) Name() string { return "composite" }

// Apply implements Strategy.
func (cs Composite) Apply(ctx context.Context, in Input) (Result, error) {
	msgs, target, c := in.Messages, in.Target, in.Counter
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	p := newPlan(msgs, c)
	var carried Result // what strategies outside this package did
	for _, s := range cs.Strategies {
		if p.fits(target) {
			break
		}
		if pr, ok := s.(pruner); ok {
			pr.prune(p, target)
			continue
		}
		before := p.result()
		stage := in
		stage.Messages = before.Messages
		r, err := s.Apply(ctx, stage)
		if err != nil {
			return Result{}, fmt.Errorf("rewrite: %s: %w", s.Name(), err)
		}
		carried.Dropped += before.Dropped + r.Dropped
		carried.Summarized += r.Summarized
		carried.Notice = joinNotices(carried.Notice, before.Notice, r.Notice)
		p = newPlan(r.Messages, c)
	}
	res := p.result()
	res.Dropped += carried.Dropped
	res.Summarized += carried.Summarized
	res.Notice = joinNotices(carried.Notice, res.Notice)
	return res, nil
}

func joinNotices(parts ...string) string {
	var b strings.Builder
	for _, s := range parts {
		if s == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	return b.String()
}

// None forwards the conversation unchanged (strategy.mode: none).
type None struct{}

// Name implements Strategy.
func (None) Name() string { return "none" }

// Apply implements Strategy.
func (None) Apply(ctx context.Context, in Input) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return Result{Messages: in.Messages}, nil
}

// The strategies of this package, and the ones Composite can chain on one
// plan.
var (
	_ Strategy = SlidingWindow{}
	_ Strategy = TokenBudget{}
	_ Strategy = Smart{}
	_ Strategy = Selective{}
	_ Strategy = Importance{}
	_ Strategy = ToolResults{}
	_ Strategy = Shrink{}
	_ Strategy = Composite{}
	_ Strategy = None{}

	_ pruner = SlidingWindow{}
	_ pruner = TokenBudget{}
	_ pruner = Smart{}
	_ pruner = Selective{}
	_ pruner = Importance{}
	_ pruner = ToolResults{}
	_ pruner = Shrink{}
)
