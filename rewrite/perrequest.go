package rewrite

import (
	"context"
	"fmt"
)

// MaxMessages caps the messages forwarded (Request.MaxMessages, from a
// request's X-Ctxproxy-Max-Messages header): it drops the oldest units until
// at most N messages other than system messages are left, markers
// included. It keeps tool units whole, every system message and the newest
// turn (the newest user message and the last unit), so it may leave more
// than N where those alone are more. It ignores the target.
type MaxMessages struct {
	// N is the most non-system messages to keep; 0 or less keeps all.
	N int
}

// Name implements Strategy.
func (MaxMessages) Name() string { return "max_messages" }

// Apply implements Strategy.
func (m MaxMessages) Apply(ctx context.Context, in Input) (Result, error) {
	return run(ctx, m, in)
}

// forwarded counts the messages the plan would forward that are not
// system messages, markers included.
func (p *plan) forwarded() int {
	n := 0
	p.walk(func(i int) {
		if !isSystem(&p.msgs[i]) {
			n++
		}
	}, func(string, int) { n++ })
	return n
}

func (m MaxMessages) prune(p *plan, _ int) {
	if m.N <= 0 || p.forwarded() <= m.N {
		return
	}
	before := p.ndrop
	for _, u := range p.candidates(func(u int) bool { return !p.system[u] }) {
		p.drop(u)
		if p.forwarded() <= m.N {
			break
		}
	}
	if p.ndrop > before {
		p.style = styleWindow
		p.notes = append(p.notes, fmt.Sprintf("Capped at %d %s as asked.", m.N, plural(m.N, "message", "messages")))
	}
}

var (
	_ Strategy = MaxMessages{}
	_ pruner   = MaxMessages{}
)

// capMessages runs the MaxMessages step req asks for, if any.
func capMessages(ctx context.Context, req Request, msgs []Message, c Counter) (Result, error) {
	if req.MaxMessages <= 0 {
		return Result{Messages: msgs}, nil
	}
	return MaxMessages{N: req.MaxMessages}.Apply(ctx, Input{Messages: msgs, Counter: c, Request: req})
}
