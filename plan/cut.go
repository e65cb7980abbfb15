package plan

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// MaxMessagesHeader is the request header that caps the non-system
// messages forwarded (Options.MaxMessages).
const MaxMessagesHeader = "X-Ctxproxy-Max-Messages"

// Cut returns p with its conversation cut to its limit less shrink
// tokens, and the body to forward encoded: the messages, num_ctx,
// truncate: false and the translation. A prepared plan is cut with
// shrink 0; an overflow the backend reports despite the count, with
// more. A plan left as sent is returned as it is.
func (pl *Planner) Cut(ctx context.Context, p Plan, shrink int) (Plan, *wire.Error) {
	if p.Fixed {
		return p, nil
	}
	req := p.req
	p.Messages, p.Changed, p.Result, p.After = p.uncut, p.uncutChanged, rewrite.Result{}, p.Before
	// A client's own truncate: false: no message is dropped; the request
	// goes uncut (num_ctx still sized), or gets an overflow error.
	uncut := clientNoTruncate(req)
	if uncut {
		if p.opt.MaxMessages > 0 {
			p.warn(MaxMessagesHeader + " ignored: the request sets \"truncate\": false, so no message is dropped")
		}
		if aerr := checkUncut(&p); aerr != nil {
			return Plan{}, aerr
		}
	}
	trimmer := pl.trimmer.Load()
	if trimmer != nil && p.opt.Strategy != "" {
		if _, err := trimmer.Strategy(p.opt.Strategy); err != nil {
			return Plan{}, wire.BadRequest("", "X-Ctxproxy-Strategy: "+err.Error())
		}
	}
	// A prompt forwarded uncounted fits as it is (fitsUnread).
	if trimmer != nil && p.Counter != nil && p.Limit > 0 && !uncut && p.pending == nil {
		if aerr := pl.trim(ctx, &p, trimmer, shrink); aerr != nil {
			return Plan{}, aerr
		}
	}
	body, aerr := pl.encode(&p)
	if aerr != nil {
		return Plan{}, aerr
	}
	p.Body = body
	if p.pending == nil {
		p.Split = p.split()
	}
	return p, nil
}

// trim cuts p's conversation with the strategy when it outgrows the
// room the limit leaves less shrink.
func (pl *Planner) trim(ctx context.Context, p *Plan, trimmer *rewrite.Trimmer, shrink int) *wire.Error {
	req := p.req
	treq := rewrite.Request{Session: p.opt.Session, Model: req.Model, Auth: p.opt.Credential,
		NumCtx: p.NumCtx, Mode: p.opt.Strategy, MaxMessages: p.opt.MaxMessages, Threshold: pl.threshold(trimmer)}
	orig := p.Messages
	overhead := p.Counter.Overhead(req.Tools)
	room := p.Limit - overhead - shrink
	if room <= 0 && trimmer.OnOverflow() != rewrite.OverflowForward && shrink == 0 {
		// Messages are cut, tools never: a request whose tools alone
		// leave no room is answered here, not sent to fail.
		return wire.BadRequest("context_length_exceeded", fmt.Sprintf("the tools' definitions and the chat template take %d tokens, and the model's context window "+
			"leaves %d for the prompt; ctxproxy cuts messages, never tools: send fewer tools, or give the model a larger window", overhead, p.Limit))
	}
	// Exact counts measure the whole prompt; a strategy measures messages
	// one by one. Where a template joins messages the two differ by a few
	// tokens: check the cut prompt, and cut again with less room when it
	// does not fit.
	for attempt := 0; ; attempt++ {
		res, err := trimmer.Trim(ctx, treq, orig, room, p.Counter)
		switch {
		case errors.Is(err, rewrite.ErrOverflow):
			return wire.BadRequest("context_length_exceeded", fmt.Sprintf("the conversation needs about %d tokens and the model's context window leaves %d; "+
				"ctxproxy could not cut it down (strategy.on_overflow: %s)", p.Before.Tokens, p.Limit, trimmer.OnOverflow()))
		case err != nil:
			pl.log.Error("trimming failed; forwarding the conversation as sent", "err", err)
		case res.Notice != "":
			p.Result = res
			p.Messages = res.Messages
			p.Changed = true
			p.After = p.Counter.Prompt(p.Messages, req.Tools)
		}
		fit := p.Limit - shrink
		if err != nil || res.Notice == "" || !p.After.Exact || p.After.Tokens <= fit || attempt == 2 {
			return nil
		}
		room -= p.After.Tokens - fit + max(8, p.Limit/100)
	}
}

// encode writes the body p forwards: for chat, the request as sent with
// only what changed (the messages, num_ctx, truncate: false); for the
// conversation dialects, their own encoding; translated to /api/chat
// when p says so.
func (pl *Planner) encode(p *Plan) (wire.Payload, *wire.Error) {
	req := p.req
	// Overflow is never silent: a managed request tells Ollama to refuse
	// a prompt longer than num_ctx instead of cutting it without a word,
	// unless the client chose truncate itself, or asked for no management.
	noTruncate := p.ToOllama && p.Counter != nil && !req.Truncate && pl.manages(p.opt.Strategy)
	body := wire.PayloadOf(req.Body)
	if req.Conv != nil {
		body = wire.PayloadOf(encodeConversation(pl.log, p))
	} else if p.Changed || req.Annotated || (p.ToOllama && req.Dialect == wire.Ollama && ((p.NumCtx > 0 && p.NumCtx != req.NumCtx) || noTruncate)) {
		numCtx := 0
		if req.Dialect == wire.Ollama && p.ToOllama && p.NumCtx != req.NumCtx {
			numCtx = p.NumCtx
		}
		var err error
		if body, err = req.Rebuild(p.Messages, p.Changed || req.Annotated, numCtx, noTruncate && req.Dialect == wire.Ollama); err != nil {
			pl.log.Error("re-encoding the request failed; forwarding it as sent", "err", err)
			body = wire.PayloadOf(req.Body)
		}
	}
	if !p.Translate {
		return body, nil
	}
	opts := p.opts
	opts.NumCtx = p.NumCtx
	out, rt, err := wire.ToOllama(req.Dialect, body.Bytes(), opts, p.After.Tokens)
	if err != nil {
		return nil, wire.TranslationError(rt, err)
	}
	for _, d := range rt.Dropped() {
		pl.log.Debug("translate: field not forwarded to Ollama", "field", d.Field, "reason", d.Reason)
	}
	if noTruncate {
		if withFlag, err := wire.SetMember(out, "truncate", []byte("false")); err == nil {
			out = withFlag
		}
	}
	p.Reply = rt
	return wire.PayloadOf(out), nil
}

// manages reports whether ctxproxy manages a request's context under
// strategy (X-Ctxproxy-Strategy): a strategy other than none, and an
// on_overflow other than forward. Only then does it ask Ollama to refuse
// overflowing prompts (truncate: false), since it is then ready to cut
// and retry.
func (pl *Planner) manages(strategy string) bool {
	t := pl.trimmer.Load()
	if t == nil || t.OnOverflow() == rewrite.OverflowForward {
		return false
	}
	st, err := t.Strategy(strategy)
	if err != nil {
		return false
	}
	_, none := st.(rewrite.None)
	return !none
}

// checkUncut is the answer to a request forwarded uncut because its client
// sent truncate: false: an overflow error when the conversation cannot fit
// the window at all, a warning when it leaves the reply less than its
// reserve.
func checkUncut(p *Plan) *wire.Error {
	if p.Counter == nil || p.Limits.MaxTokens <= 0 {
		return nil
	}
	switch {
	case p.Before.Tokens > p.Limits.MaxTokens:
		return wire.BadRequest("context_length_exceeded", fmt.Sprintf("the conversation needs about %d tokens and the model's context window is %d; "+
			"the request sets \"truncate\": false, so ctxproxy drops no message: shorten the conversation, "+
			"or leave truncate unset to let ctxproxy cut it", p.Before.Tokens, p.Limits.MaxTokens))
	case p.Limit > 0 && p.Before.Tokens > p.Limit:
		p.warn(fmt.Sprintf("forwarded uncut (\"truncate\": false): the conversation uses %d of the %d-token window, "+
			"leaving the reply less than its reserve", p.Before.Tokens, p.Limits.MaxTokens))
	}
	return nil
}

// split divides the window among the parts of what is forwarded: the
// system prompt, the tools, the template's own tokens (what belongs to
// no message and no tool), the reply's reserve, and the rest of the
// conversation.
func (p Plan) split() adminapi.Budget {
	if p.Counter == nil || p.Limits.MaxTokens <= 0 {
		return adminapi.Budget{}
	}
	system := 0
	for i := range p.Messages {
		if wire.IsSystemRole(p.Messages[i].Role) {
			system += p.Counter.CountMessage(&p.Messages[i])
		}
	}
	overhead := p.Counter.Overhead(p.Tools)
	template := min(overhead, p.Counter.Overhead(nil))
	reserve := p.Limits.MaxOutputTokens
	if p.ReplyAsked > 0 {
		// What the prompt leaves the reply, up to what it asked for.
		reserve = max(reserve, min(p.ReplyAsked, p.Limits.ReplyRoom(p.After.Tokens)))
	}
	return adminapi.Budget{Total: p.Limits.MaxTokens, SystemPrompt: system, Tools: overhead - template, Template: template,
		ResponseReserve: reserve, Conversation: max(0, p.After.Tokens-system-overhead)}
}
