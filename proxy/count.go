package proxy

import (
	"context"
	"net/http"
	"slices"
	"strconv"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// How a plan's prompt is counted: with the model's own tokenizer
// (countExactly), the backend's tokenize API, or an estimate; or, for a
// model whose tokenizer is not built yet, not before it is forwarded.
//
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
	s.note(p, mi)
}

// note shows on the status page how p's model is run and counted.
func (s *planner) note(p *plan, mi backend.Details) {
	s.status.Note(admin.ModelSeen{Name: p.model, Facts: mi.Facts, NumCtx: p.numCtx, Reason: p.numReason, Limit: p.limit,
		Counting: p.countMethod(), Exact: p.exact, NotExact: p.notExact})
}

// countExactly counts p's prompt with the model's own tokenizer (mi's)
// where it has one and the request's shape agreed with the backend's
// counts before, else with the backend's tokenize API (remote's), else
// by est: p.before and p.counter are the count and its counter.
func (s *planner) countExactly(ctx context.Context, ex *exchange, req *wire.Request, p *plan, mi backend.Details, remote backend.Remote, est *budget.MessageCounter) {
	toOllama := p.toOllama
	if toOllama && mi.Tokenizer == nil && mi.TokenizerErr != nil && !s.cfg.NoExact {
		p.notExact = mi.TokenizerErr.Error()
	}
	if toOllama && mi.Tokenizer != nil && !s.cfg.NoExact {
		ec := exactFor(mi.Tokenizer, req, p.ollamaOpts)
		if mi.Tokenizer.ServerRenders() {
			numCtx := p.numCtx
			ec.useServer(func(pr exact.Prompt) (string, error) { return s.be.Render(ctx, req.Model, numCtx, pr) })
		}
		if ec.failed() == nil {
			p.before = ec.Prompt(p.messages, req.Tools)
		}
		shape := ec.shape()
		miss, missed := mi.Missed(shape)
		switch {
		case missed:
			// Counts of this shape disagreed with the backend's
			// before: estimate, and say why.
			p.notExact = miss.String() + "; ctxproxy counts these requests to " + strconv.Quote(req.Model) + " by estimate"
			ex.warn(p.notExact)
		case ec.failed() == nil:
			p.counter = ec
			p.exact, p.exactShape = &mi, shape
		default:
			s.once.warn("exact:"+req.Model, "exact counting failed for this request's shape; estimating instead",
				"model", req.Model, "err", ec.failed())
		}
	}
	if remote.API != "" {
		rc := newRemoteCounter(ctx, s.be, req.Model, est)
		if before := rc.Prompt(p.messages, req.Tools); rc.err == nil {
			p.counter, p.before = rc, before
		} else {
			s.once.warn("remote:"+req.Model, "the backend's tokenize API failed; estimating instead",
				"model", req.Model, "api", remote.API, "err", rc.err)
		}
	}
	if p.counter == promptCounter(est) {
		// Neither the model's tokenizer nor the backend's counted
		// this prompt (or one failed after it started): estimate.
		// A failed count's zero estimate must not stand.
		p.before = est.Prompt(p.messages, req.Tools)
	}
}
