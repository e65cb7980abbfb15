package proxy

import (
	"context"
	"net/http"
	"slices"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// A model's first request need not wait for its tokenizer. Reading a
// model's vocabulary (a verbose /api/show, megabytes that Ollama takes a
// while to send) and building its tables takes a few hundred
// milliseconds; a prompt whose rendered bytes alone prove that it fits
// needs no count to be forwarded whole. Such a request goes to the
// backend at once and is counted while the backend works; its answer's
// headers wait for the count, so they are exact as ever.

// mayForwardUncounted reports whether r may be forwarded before its
// model's tokenizer is built, should its bytes prove it fits: a request
// counted exactly, without images (whose cost is no text), that asks for
// no cut of its own (a message cap, truncate: false), and not to the
// Messages API, whose answer states the prompt's tokens in its body.
func (s *planner) mayForwardUncounted(r *http.Request, req *wire.Request) bool {
	return s.tokens != nil && !s.cfg.NoExact && req.Dialect != wire.Messages &&
		r.Header.Get(maxMessagesHeader) == "" && !clientNoTruncate(req) &&
		!slices.ContainsFunc(req.Messages, func(m rewrite.Message) bool { return len(m.Images) > 0 })
}

// fitsUnread reports whether p's prompt fits as sent by its bytes alone
// (the Sketch of pend counts a bound of its tokens): within the effective
// limit, and below where any strategy would start cutting it, so that
// the prompt forwarded is the one a count would have let through.
func (s *planner) fitsUnread(req *wire.Request, p *plan, pend *backend.Pending) bool {
	if pend.Sketch == nil || p.limit <= 0 {
		return false
	}
	bc := exactFor(pend.Sketch, req, p.ollamaOpts)
	bound := bc.Prompt(p.messages, req.Tools)
	if bc.failed() != nil {
		return false
	}
	quiet := p.limit
	if t := s.trimmer.Load(); t != nil {
		threshold := 0.0
		if s.monitor != nil && s.monitor.Reading().Level >= gpu.LevelCompress {
			threshold = max(t.Threshold()-0.2, t.Target()) // as cut compresses earlier
		}
		quiet = min(quiet, t.Untouched(p.limit, threshold))
	}
	return bound.Tokens <= quiet
}

// settle counts a prompt forwarded uncounted (plan.pending) once its
// model's tokenizer is built: the plan's counts and counter become what
// prepare would have made them, for the answer's headers, the status page
// and the check against the backend's report. It does nothing for a plan
// counted before forwarding.
func (s *planner) settle(ctx context.Context, ex *exchange, req *wire.Request, p *plan) {
	pend := p.pending
	if pend == nil {
		return
	}
	p.pending = nil
	mi := pend.Wait(ctx)
	est := s.tokens.MessageCounter(req.Model).Frozen()
	p.counter = est
	s.countExactly(ctx, ex, req, p, mi, backend.Remote{}, est)
	p.after = p.before
	s.status.Note(admin.ModelSeen{Name: p.model, Facts: mi.Facts, NumCtx: p.numCtx, Reason: p.numReason, Limit: p.limit,
		Counting: p.countMethod(), Exact: p.exact, NotExact: p.notExact})
}
