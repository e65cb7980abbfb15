package plan

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/internal/imagesize"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ollama/ollama/api"
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
// backend at once and is counted while the backend works (Settle); its
// answer's headers wait for the count, so they are exact as ever.

// count counts p's prompt. pend is the model whose tokenizer is still
// being read: a prompt whose bytes prove it fits goes uncounted (until
// Settle), estimated meanwhile; any other waits for the tokenizer.
func (pl *Planner) count(ctx context.Context, p *Plan, pend *backend.Pending, remote backend.Remote) {
	est := pl.tokens.MessageCounter(p.Model).Frozen()
	p.Counter = est
	switch {
	case pend != nil && pl.fitsUnread(p, pend):
		p.pending = pend
		p.Before = est.Prompt(p.Messages, p.Tools)
	case pend != nil:
		p.Details = pend.Wait(ctx)
		fallthrough
	default:
		pl.countExactly(ctx, p, remote, est)
	}
	p.After = p.Before
}

// mayForwardUncounted reports whether p may be forwarded before its
// model's tokenizer is built, should its bytes prove it fits: a request
// counted exactly, without images (whose cost is no text), that asks for
// no cut of its own (a message cap, truncate: false), and not to the
// Messages API, whose answer states the prompt's tokens in its body.
func (pl *Planner) mayForwardUncounted(p *Plan) bool {
	req := p.req
	return pl.tokens != nil && !pl.cfg.NoExact && req.Dialect != wire.Messages &&
		p.opt.MaxMessages == 0 && !clientNoTruncate(req) &&
		!slices.ContainsFunc(req.Messages, func(m rewrite.Message) bool { return len(m.Images) > 0 })
}

// fitsUnread reports whether p's prompt fits as sent by its bytes alone
// (the Sketch of pend counts a bound of its tokens): within the limit,
// and below where any strategy would start cutting it, so that the
// prompt forwarded is the one a count would have let through.
func (pl *Planner) fitsUnread(p *Plan, pend *backend.Pending) bool {
	if pend.Sketch == nil || p.Limit <= 0 {
		return false
	}
	bc := exactFor(pend.Sketch, p.req, p.opts)
	bound := bc.Prompt(p.Messages, p.Tools)
	if bc.Err() != nil {
		return false
	}
	quiet := p.Limit
	if t := pl.trimmer.Load(); t != nil {
		quiet = min(quiet, t.Untouched(p.Limit, pl.threshold(t)))
	}
	return bound.Tokens <= quiet
}

// threshold is the strategy's threshold for this moment: under memory
// pressure, lowered so that it compresses earlier (0: as configured).
func (pl *Planner) threshold(t *rewrite.Trimmer) float64 {
	if pl.monitor != nil && pl.monitor.Reading().Level >= gpu.LevelCompress {
		return max(t.Threshold()-0.2, t.Target())
	}
	return 0
}

// Settle counts a prompt forwarded uncounted once its model's tokenizer
// is built: the plan it returns has the counts and counter Prepare would
// have given it, for the answer's headers, the status page and the check
// against the backend's report. A plan counted before forwarding is
// returned as it is.
func (pl *Planner) Settle(ctx context.Context, p Plan) Plan {
	pend := p.pending
	if pend == nil {
		return p
	}
	p.pending = nil
	p.Details = pend.Wait(ctx)
	est := pl.tokens.MessageCounter(p.Model).Frozen()
	p.Counter = est
	pl.countExactly(ctx, &p, backend.Remote{}, est)
	p.After = p.Before
	p.Split = p.split()
	return p
}

// countExactly counts p's prompt with the model's own tokenizer (its
// Details') where it has one and the request's shape agreed with the
// backend's counts before, else with the backend's tokenize API
// (remote's), else by est: p.Before and p.Counter are the count and its
// counter.
func (pl *Planner) countExactly(ctx context.Context, p *Plan, remote backend.Remote, est *budget.MessageCounter) {
	req, mi := p.req, p.Details
	if p.ToOllama && mi.Tokenizer == nil && mi.TokenizerErr != nil && !pl.cfg.NoExact {
		p.NotExact = mi.TokenizerErr.Error()
	}
	if p.ToOllama && mi.Tokenizer != nil && !pl.cfg.NoExact {
		ec := exactFor(mi.Tokenizer, req, p.opts)
		if mi.Tokenizer.ServerRenders() {
			numCtx, be := p.NumCtx, p.be()
			ec.useServer(func(pr exact.Prompt) (string, error) { return be.Render(ctx, req.Model, numCtx, pr) })
		}
		if ec.Err() == nil {
			p.Before = ec.Prompt(p.Messages, p.Tools)
		}
		shape := ec.shape()
		miss, missed := mi.Missed(shape)
		switch {
		case missed:
			// Counts of this shape disagreed with the backend's before:
			// estimate, and say why.
			p.NotExact = miss.String() + "; ctxproxy counts these requests to " + strconv.Quote(req.Model) + " by estimate"
			p.warn(p.NotExact)
		case ec.Err() == nil:
			p.Counter = ec
			p.Exact, p.ExactShape = &mi, shape
		default:
			pl.once.Warn("exact:"+req.Model, "exact counting failed for this request's shape; estimating instead",
				"model", req.Model, "err", ec.Err())
		}
	}
	if remote.API != "" {
		rc := NewRemote(ctx, p.be(), req.Model, est)
		if before := rc.Prompt(p.Messages, p.Tools); rc.err == nil {
			p.Counter, p.Before = rc, before
		} else {
			pl.once.Warn("remote:"+req.Model, "the backend's tokenize API failed; estimating instead",
				"model", req.Model, "api", remote.API, "err", rc.err)
		}
	}
	if p.Counter == Counter(est) {
		// Neither the model's tokenizer nor the backend's counted this
		// prompt (or one failed after it started): estimate. A failed
		// count's zero estimate must not stand.
		p.Before = est.Prompt(p.Messages, p.Tools)
	}
}

// countRaw counts a raw prompt with the model's own tokenizer. A raw
// prompt goes to the runner as sent: its images are counted only where
// a vision model's runner finds their tags, which CountPrompt does not
// look for. Otherwise the server renders as for a chat, and Count says
// whether its images are exact.
func (pl *Planner) countRaw(p *Plan, in Request, tok *exact.Tokenizer) {
	req := in.Raw
	var n int
	var err error
	whole := len(req.Images) == 0
	if req.Raw {
		n, err = tok.CountPrompt(in.Prompt)
	} else {
		var msgs []api.Message
		if req.System != "" {
			msgs = append(msgs, api.Message{Role: "system", Content: req.System})
		}
		msgs = append(msgs, api.Message{Role: "user", Content: in.Prompt, Images: make([]api.ImageData, len(req.Images))})
		var think *api.ThinkValue
		if len(req.Think) > 0 {
			think = &api.ThinkValue{}
			if json.Unmarshal(req.Think, think) != nil {
				think = nil
			}
		}
		sizes := make([]chat.Image, len(req.Images))
		for i, img := range req.Images {
			sizes[i] = imagesize.Of(img)
		}
		n, whole, err = tok.Count(exact.Prompt{Messages: msgs, Think: think, Images: sizes})
	}
	if err != nil {
		return
	}
	p.Before = budget.Estimate{Tokens: n, Raw: n, Chars: n, Exact: whole}
	p.Counter = &ExactCounter{model: tok}
	if whole {
		mi := p.Details
		p.Exact = &mi
	}
}
