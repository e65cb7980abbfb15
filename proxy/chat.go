package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Seed 000's warnings, sent as X-Ctxproxy-Warning from the usage of the
// conversation as the client sent it.
const (
	warn80 = "Context at 80% capacity. Consider /clear or /save."
	warn90 = "Context at 90% capacity. Auto-trimming soon."
)

// settleWait bounds how long an accumulated turn waits for the turns
// before it to be stored.
const settleWait = 5 * time.Second

// ollamaDefaultCtx is the window Ollama uses when a request sets no
// num_ctx (its documented default); ctxproxy assumes it when it does not
// set num_ctx itself.
const ollamaDefaultCtx = 4096

// plan is what ctxproxy decided for one chat request.
type plan struct {
	model     string
	messages  []rewrite.Message // what is forwarded
	sent      []rewrite.Message // the conversation as the client meant it (history included when accumulating)
	newTurn   []rewrite.Message // what the client sent this time (accumulate mode)
	accum     bool
	changed   bool
	numCtx    int
	numReason string
	limit     int
	before    budget.Estimate
	after     budget.Estimate
	result    rewrite.Result
	translate bool
	info      translate.Info
	counter   promptCounter
	// exact is the backend's model when the prompt was counted with its
	// own tokenizer; nil when estimated.
	exact *backend.Model
	// uncut are the messages before any strategy (accumulated history
	// and in-band edits applied), uncutChanged whether they already
	// differ from the request's; an overflow retry cuts from them again.
	uncut        []rewrite.Message
	uncutChanged bool
	// retries is the number of overflow retries the request took.
	retries int
	// window is the context window the backend runs the request with,
	// when ctxproxy knows it (num_ctx, or Ollama's default): a reported
	// count at it may be censored.
	window int
}

// prepare runs the request path of DESIGN.md: accumulate, size num_ctx,
// count, trim, encode. It returns the body to forward, or an error for the
// client.
func (s *Server) prepare(ctx context.Context, r *http.Request, ex *exchange, req *chatRequest) ([]byte, *apiError) {
	p := &plan{model: req.model, messages: req.messages, sent: req.messages}
	ex.plan = p
	kind := s.kind(ctx)
	switch s.cfg.TranslateOpenAI {
	case "on":
		p.translate = req.dialect == OpenAI && kind != KindOpenAI
	case "off":
	default:
		p.translate = req.dialect == OpenAI && kind == KindOllama
	}
	toOllama := (req.dialect == Ollama && kind != KindOpenAI) || p.translate

	// Accumulate: the client sends only its new turn (seed 000). It needs
	// a session the client names: a fingerprint of the new turn alone
	// would change every turn.
	if ex.named && s.store != nil && (s.cfg.Accumulate || r.Header.Get("X-Ctxproxy-Accumulate") == "1") {
		p.accum = true
		p.newTurn = req.messages
		// The turns before this one must be stored before it is built on
		// them: a client that sends its next turn the moment a reply
		// ends would otherwise find the last one missing.
		var err error
		if s.writer != nil {
			sctx, cancel := context.WithTimeout(ctx, settleWait)
			err = s.writer.Settle(sctx, ex.session)
			cancel()
		}
		if err != nil {
			s.log.Warn("the session's last turns are not stored; turn refused", "session", ex.session, "err", err)
			return nil, &apiError{status: http.StatusServiceUnavailable,
				message: "ctxproxy could not store this session's last turn yet, so it will not send the next one without it; try again"}
		}
		stored, err := s.store.Get(ctx, ex.session)
		if err != nil && !errors.Is(err, snapshots.ErrNotFound) {
			// Sending the new turn alone would answer as if the
			// conversation were new, without a word: refuse instead.
			s.log.Warn("reading the session failed; turn refused", "session", ex.session, "err", err)
			return nil, &apiError{status: http.StatusServiceUnavailable,
				message: "ctxproxy could not read this session's history from its store, so it will not send the turn without it; try again"}
		}
		history := snapshots.Accumulate(stored, toStored(req.messages))
		msgs, err := fromStored(history)
		if err != nil {
			s.log.Warn("stored session unreadable; turn refused", "session", ex.session, "err", err)
			return nil, &apiError{status: http.StatusServiceUnavailable,
				message: "this session's stored history could not be read, so ctxproxy will not send the turn without it"}
		}
		p.messages, p.sent, p.changed = msgs, msgs, len(msgs) != len(req.messages)
	}

	if s.cfg.Inband && !p.accum {
		if msgs, changed := inbandHistory(p.messages); changed {
			p.messages, p.sent, p.changed = msgs, msgs, true
		}
	}

	// num_ctx from the memory actually free (Ollama only).
	var mi backend.Model
	if toOllama {
		mi = s.be.Model(ctx, req.model)
		p.numCtx = req.numCtx
		if s.sizer != nil {
			var snap gpu.Snapshot
			if s.monitor != nil {
				snap = s.monitor.Snapshot()
			}
			window := 0
			if s.tokens != nil && mi.Facts.ContextLength == 0 {
				window = s.tokens.Limits(req.model, 0).MaxTokens
			}
			d := s.sizer.Decide(gpu.Model{Name: req.model, Facts: mi.Facts, Weights: mi.Weights, Window: window}, snap)
			p.numReason = d.Reason
			if req.numCtx > 0 && s.cfg.RespectClient {
				var why string
				p.numCtx, why = d.Client(req.numCtx)
				if p.numCtx != req.numCtx {
					ex.warn("num_ctx " + strconv.Itoa(req.numCtx) + " lowered to " + strconv.Itoa(p.numCtx) + ": " + why)
				}
			} else if d.NumCtx > 0 {
				p.numCtx = d.NumCtx
				if d.Guessed {
					ex.warn("num_ctx " + strconv.Itoa(d.NumCtx) + " is a guess: the backend did not give the model's facts")
					s.warnOnce("facts:"+req.model, "the backend did not give the model's facts; num_ctx is a guess",
						"model", req.model, "num_ctx", d.NumCtx, "reason", d.Reason, "err", mi.Err)
				}
			}
		}
	}

	// A backend that tokenizes (vLLM, llama.cpp's server) counts for
	// itself, and may say the model's window.
	var remote backend.Remote
	trained := mi.Facts.ContextLength
	if !toOllama && s.tokens != nil && !s.cfg.NoExact {
		remote = s.be.Remote(ctx, req.model)
		trained = max(trained, remote.Window)
	}

	// The window: the model's limits, capped by num_ctx, less the reply.
	var lim budget.Limits
	if s.tokens != nil {
		lim = s.tokens.Limits(req.model, trained)
		// One notion of the window: a models: max_tokens below the num_ctx
		// memory allows is the window, and num_ctx follows it, so Ollama
		// does not reserve memory for tokens ctxproxy will never send.
		if toOllama && p.numCtx > lim.MaxTokens && req.numCtx == 0 {
			p.numCtx = lim.MaxTokens
			p.numReason += fmt.Sprintf("; capped at the model's window %d (models: or the model table)", lim.MaxTokens)
		}
		switch {
		case p.numCtx > 0:
			lim = lim.Cap(p.numCtx)
		case toOllama:
			lim = lim.Cap(ollamaDefaultCtx)
			p.window = ollamaDefaultCtx
		}
		if req.maxOutput > 0 {
			lim = lim.WithOutput(req.maxOutput)
		}
		if floored, ok := lim.Floor(); ok {
			ex.warn(fmt.Sprintf("the reply reserve (%d tokens) left less than a quarter of the %d-token window for the prompt; "+
				"ctxproxy keeps a quarter (%d tokens) for it", lim.MaxOutputTokens, lim.MaxTokens, floored.Effective()))
			s.warnOnce("reserve:"+req.model, "the reply reserve leaves less than a quarter of the window for the prompt; keeping a quarter",
				"model", req.model, "window", lim.MaxTokens, "reserve", lim.MaxOutputTokens)
			lim = floored
		}
		p.limit = lim.Effective()
		est := s.tokens.MessageCounter(req.model).Frozen()
		p.counter = est
		if toOllama && mi.Tokenizer != nil && !s.cfg.NoExact {
			ec := newExactCounter(mi.Tokenizer, req)
			if ec.err == nil {
				p.before = ec.Prompt(p.messages, req.tools)
			}
			if ec.err == nil {
				p.counter = ec
				p.exact = &mi
			} else {
				s.warnOnce("exact:"+req.model, "exact counting failed for this request's shape; estimating instead",
					"model", req.model, "err", ec.err)
			}
		}
		if remote.API != "" {
			rc := newRemoteCounter(ctx, s.be, req.model, est)
			if before := rc.Prompt(p.messages, req.tools); rc.err == nil {
				p.counter, p.before = rc, before
			} else {
				s.warnOnce("remote:"+req.model, "the backend's tokenize API failed; estimating instead",
					"model", req.model, "api", remote.API, "err", rc.err)
			}
		}
		if p.exact == nil && !p.before.Exact {
			p.counter = est
			p.before = est.Prompt(p.messages, req.tools)
		}
		p.after = p.before
	}

	p.uncut, p.uncutChanged = p.messages, p.changed
	s.status.note(p, mi.Facts)
	body, aerr := s.cut(ctx, r, ex, req, p, toOllama, 0)
	if aerr != nil {
		return nil, aerr
	}
	if p.exact != nil || s.tokens != nil {
		// An overflow the backend reports despite the count is cut
		// harder and retried before the client sees a byte.
		ex.recut = func(shrink int) ([]byte, *apiError) {
			return s.cut(ctx, r, ex, req, p, toOllama, shrink)
		}
	}
	s.setPlanHeaders(ex, p)
	return body, nil
}

// cut trims the conversation to the plan's limit less shrink tokens and
// encodes the body to forward: the messages, num_ctx, truncate:false and
// the translation. prepare runs it with shrink 0; an overflow retry runs
// it again with more.
func (s *Server) cut(ctx context.Context, r *http.Request, ex *exchange, req *chatRequest, p *plan, toOllama bool, shrink int) ([]byte, *apiError) {
	p.messages, p.changed, p.result, p.after = p.uncut, p.uncutChanged, rewrite.Result{}, p.before
	// Trim when the conversation outgrows the window.
	if trimmer := s.trimmer.Load(); trimmer != nil && p.counter != nil && p.limit > 0 {
		mode := r.Header.Get("X-Ctxproxy-Strategy")
		if _, err := trimmer.Strategy(mode); err != nil {
			return nil, &apiError{status: http.StatusBadRequest, message: "X-Ctxproxy-Strategy: " + err.Error()}
		}
		tctx := rewrite.WithRequestInfo(ctx, rewrite.RequestInfo{Session: ex.session, Model: req.model,
			Auth: r.Header.Get("Authorization"), NumCtx: p.numCtx})
		if s.monitor != nil && s.monitor.Snapshot().Level >= gpu.LevelCompress {
			// Seed 004 R6.2: under memory pressure, compress earlier.
			tctx = rewrite.WithThreshold(tctx, max(trimmer.Threshold()-0.2, trimmer.Target()))
		}
		orig := p.messages
		room := p.limit - p.counter.Overhead(req.tools) - shrink
		// Exact counts measure the whole prompt; a strategy measures
		// messages one by one. Where a template joins messages the two
		// differ by a few tokens: check the cut prompt, and cut again
		// with less room when it does not fit.
		for attempt := 0; ; attempt++ {
			res, err := trimmer.Trim(tctx, mode, orig, room, p.counter)
			switch {
			case errors.Is(err, rewrite.ErrOverflow):
				return nil, &apiError{status: http.StatusBadRequest, code: "context_length_exceeded",
					message: fmt.Sprintf("the conversation needs about %d tokens and the model's context window leaves %d; "+
						"ctxproxy could not cut it down (strategy.on_overflow: %s)", p.before.Tokens, p.limit, trimmer.OnOverflow())}
			case err != nil:
				s.log.Error("trimming failed; forwarding the conversation as sent", "err", err)
			case res.Notice != "":
				p.result = res
				p.messages = res.Messages
				p.changed = true
				p.after = p.counter.Prompt(p.messages, req.tools)
			}
			fit := p.limit - shrink
			if err != nil || res.Notice == "" || !p.after.Exact || p.after.Tokens <= fit || attempt == 2 {
				break
			}
			room -= p.after.Tokens - fit + max(8, p.limit/100)
		}
	}

	// Overflow is never silent: a managed request tells Ollama to refuse
	// a prompt longer than num_ctx instead of cutting it without a word,
	// unless the client chose truncate itself, or asked for no management.
	noTruncate := toOllama && p.counter != nil && !req.truncate && s.manages(r)
	body := req.body
	if p.changed || req.annotated || (toOllama && req.dialect == Ollama && ((p.numCtx > 0 && p.numCtx != req.numCtx) || noTruncate)) {
		numCtx := 0
		if req.dialect == Ollama && toOllama && p.numCtx != req.numCtx {
			numCtx = p.numCtx
		}
		var err error
		if body, err = rebuildBody(req.body, p.messages, p.changed || req.annotated, numCtx); err == nil && noTruncate && req.dialect == Ollama {
			body, err = setMember(body, "truncate", []byte("false"))
		}
		if err != nil {
			s.log.Error("re-encoding the request failed; forwarding it as sent", "err", err)
			body = req.body
		}
	}
	if p.translate {
		out, info, err := translate.Request(body, translate.RequestOptions{NumCtx: p.numCtx})
		if err != nil {
			var te *translate.Error
			if errors.As(err, &te) {
				return nil, &apiError{status: te.Status, message: te.Message, code: te.Code, raw: te.JSON()}
			}
			return nil, &apiError{status: http.StatusBadRequest, message: err.Error()}
		}
		for _, d := range info.Dropped {
			s.log.Debug("translate: field not forwarded to Ollama", "field", d.Field, "reason", d.Reason)
		}
		if noTruncate {
			if withFlag, err := setMember(out, "truncate", []byte("false")); err == nil {
				out = withFlag
			}
		}
		p.info = info
		body = out
		ex.outPath = "/api/chat"
	}
	return body, nil
}

// manages reports whether ctxproxy manages r's context: a strategy other
// than none, and an on_overflow other than forward. Only then does it ask
// Ollama to refuse overflowing prompts (truncate: false), since it is
// then ready to cut and retry.
func (s *Server) manages(r *http.Request) bool {
	t := s.trimmer.Load()
	if t == nil || t.OnOverflow() == "forward" {
		return false
	}
	st, err := t.Strategy(r.Header.Get("X-Ctxproxy-Strategy"))
	if err != nil {
		return false
	}
	_, none := st.(rewrite.None)
	return !none
}

// warnOnce logs msg at warning level the first time key is seen; keys
// are bounded, since model names come from clients.
func (s *Server) warnOnce(key, msg string, attrs ...any) {
	s.warned.mu.Lock()
	if s.warned.m == nil || len(s.warned.m) >= 4096 {
		s.warned.m = map[string]bool{}
	}
	seen := s.warned.m[key]
	s.warned.m[key] = true
	s.warned.mu.Unlock()
	if !seen {
		s.log.Warn(msg, attrs...)
	}
}

// setPlanHeaders sets the X-Ctxproxy-* response headers of DESIGN.md.
func (s *Server) setPlanHeaders(ex *exchange, p *plan) {
	h := ex.headers
	if p.counter != nil {
		h.Set("X-Ctxproxy-Tokens", strconv.Itoa(p.after.Tokens))
		h.Set("X-Ctxproxy-Tokens-Before", strconv.Itoa(p.before.Tokens))
		h.Set("X-Ctxproxy-Limit", strconv.Itoa(p.limit))
		// Two numbers, each named: the conversation as the client sent
		// it, and what was forwarded after cutting.
		usage, fwd := p.usage(), p.forwardedUsage()
		h.Set("X-Ctxproxy-Usage", strconv.FormatFloat(usage*100, 'f', 1, 64))
		h.Set("X-Ctxproxy-Usage-Forwarded", strconv.FormatFloat(fwd*100, 'f', 1, 64))
		switch cut := p.result.Notice != ""; {
		case cut && fwd >= 0.8:
			ex.warn(fmt.Sprintf("Context at %.0f%% capacity after cutting (the conversation as sent is at %.0f%%).", fwd*100, usage*100))
		case cut:
			// The cut has answered it: X-Ctxproxy-Notice says what was
			// done. Seed 000's "approaching" warnings would mislead.
		case usage >= 0.9:
			ex.warn(warn90)
		case usage >= 0.8:
			ex.warn(warn80)
		}
	}
	// Result.Dropped counts every message not forwarded, folded ones too.
	h.Set("X-Ctxproxy-Dropped", strconv.Itoa(p.result.Dropped-p.result.Summarized))
	h.Set("X-Ctxproxy-Summarized", strconv.Itoa(p.result.Summarized))
	if p.numCtx > 0 {
		h.Set("X-Ctxproxy-Num-Ctx", strconv.Itoa(p.numCtx))
	}
	if p.result.Notice != "" {
		h.Set("X-Ctxproxy-Notice", p.result.Notice)
	}
}

// forwardedUsage is the share of the effective limit what was forwarded
// takes.
func (p *plan) forwardedUsage() float64 {
	if p.limit <= 0 {
		return 0
	}
	return float64(p.after.Tokens) / float64(p.limit)
}

// usage is the share of the effective limit the conversation, as the
// client sent it, takes.
func (p *plan) usage() float64 {
	if p.limit <= 0 {
		return 0
	}
	return float64(p.before.Tokens) / float64(p.limit)
}

// afterReply runs when the response has ended: calibrate the counter from
// the backend's truth, detect silent truncation, and record the session.
// It runs on the request's goroutine after the last byte reached the
// client; store writes are queued, never waited for.
func (s *Server) afterReply(ex *exchange, rep reply) {
	p := ex.plan
	if p == nil {
		return
	}
	truncated := false
	if s.tokens != nil && rep.status == http.StatusOK && rep.complete && rep.promptTokens > 0 {
		numCtx := p.window
		if p.numCtx > 0 && (ex.dialect == Ollama || p.translate) {
			numCtx = p.numCtx
		}
		switch {
		case p.exact != nil:
			truncated = s.checkExact(ex, p, rep.promptTokens, numCtx)
		case p.after.Exact:
			// Counted by the backend itself: nothing to calibrate, only
			// a cut to see.
			truncated = budget.Truncated(p.after.Tokens, rep.promptTokens, numCtx, 0.01)
		default:
			truncated = s.tokens.Observe(p.model, p.after, rep.promptTokens, numCtx)
		}
		s.metrics.calibrationError.Observe(relErr(p.after.Tokens, rep.promptTokens))
		ex.logAttrs = append(ex.logAttrs, "prompt_tokens", rep.promptTokens)
		if truncated {
			s.metrics.truncations.Inc()
			s.log.Warn("backend truncated the prompt silently: it reports far fewer prompt tokens than were sent",
				"model", p.model, "session", ex.session, "sent", p.after.Tokens, "exact", p.exact != nil,
				"reported", rep.promptTokens, "num_ctx", p.numCtx)
		}
	}
	s.record(ex, rep, truncated)
}

// checkExact compares an exact count of what was forwarded with the
// prompt tokens Ollama reported. A report at the window is censored (the
// backend may have cut the prompt to it): it tells of truncation, never of
// the tokenizer. An uncensored report that disagrees beyond 1% means the
// tokenizer is wrong for this model (another Ollama version, a renderer):
// backend.Model.Observe then turns exact counting off for it.
func (s *Server) checkExact(ex *exchange, p *plan, reported, numCtx int) (truncated bool) {
	sent := p.after.Tokens
	censored := budget.Censored(reported, numCtx) || (numCtx > 0 && sent > numCtx)
	if censored {
		// Ollama fits an overlong prompt into num_ctx and answers 200.
		return sent > numCtx && reported <= numCtx
	}
	if p.exact.Observe(s.log, sent, reported) {
		s.metrics.exactDisagreements.Inc()
	}
	return false
}

func relErr(est, actual int) float64 {
	if actual <= 0 {
		return 0
	}
	d := float64(est-actual) / float64(actual)
	if d < 0 {
		d = -d
	}
	return d
}

// record queues the session update for this exchange.
func (s *Server) record(ex *exchange, rep reply, truncated bool) {
	p := ex.plan
	if s.writer == nil || ex.session == "" || p == nil {
		return
	}
	if len(p.sent) == 0 || (p.accum && len(p.newTurn) == 0) {
		// No messages: a model load or unload, not a turn of the
		// conversation; recording it would replace the conversation.
		return
	}
	var replyMsg *snapshots.Message
	if rep.status == http.StatusOK && rep.complete {
		m := replyMessage(ex.dialect, rep)
		replyMsg = &m
	}
	sent := toStored(p.sent)
	newTurn := toStored(p.newTurn)
	now := time.Now()
	usage := p.usage()
	stats := snapshots.Stats{
		Tokens: p.before.Tokens, Limit: p.limit, Usage: usage, Sent: p.after.Tokens, NumCtx: p.numCtx,
		Dropped: p.result.Dropped - p.result.Summarized, Summarized: p.result.Summarized,
	}
	if rep.promptTokens > 0 {
		stats.PromptTokens, stats.CompletionTokens = rep.promptTokens, rep.outputTokens
	}
	model, accum, retries := p.model, p.accum, p.retries
	err := s.writer.Update(ex.session, func(sess *snapshots.Session) error {
		if model != "" {
			sess.Model = model
		}
		if accum {
			sess.AppendTurn(newTurn, replyMsg, now)
		} else {
			msgs := sent
			if replyMsg != nil {
				msgs = append(msgs[:len(msgs):len(msgs)], *replyMsg)
			}
			sess.SetMessages(msgs, now)
		}
		st := stats
		st.Requests = sess.Stats.Requests + 1
		st.Truncations = sess.Stats.Truncations
		st.LastTruncation = sess.Stats.LastTruncation
		st.OverflowRetries = sess.Stats.OverflowRetries + retries
		if truncated {
			st.Truncations++
			st.LastTruncation = now.UTC()
		}
		sess.Stats = st
		return nil
	})
	if err != nil {
		s.log.Warn("session not recorded", "session", ex.session, "err", err)
		return
	}
	// Snapshot before the first cut of a conversation that has outgrown
	// the window (seed 004 4.7, the pre-overflow event). The writer takes
	// the automatic snapshot at snapshots.auto_threshold itself, from the
	// usage recorded above (seed 004 4.6).
	prev, seen := s.usage.swap(ex.session, usage)
	if p.result.Dropped > 0 && (!seen || prev < s.threshold()) {
		s.log.Info("pre-overflow: conversation outgrew the window; snapshot taken before the first cut",
			"session", ex.session, "tokens", p.before.Tokens, "limit", p.limit)
		snap := snapshots.NewSnapshot(&snapshots.Session{ID: ex.session, Model: p.model, Messages: sent,
			Stats: stats}, snapshots.ReasonOverflow)
		if err := s.writer.SaveSnapshot(snap); err != nil {
			s.log.Warn("snapshot not queued", "session", ex.session, "err", err)
		}
	}
}

func (s *Server) threshold() float64 {
	if t := s.trimmer.Load(); t != nil {
		return t.Threshold()
	}
	return 0.8
}

// toStored converts messages for the session store, keeping raw bytes.
func toStored(msgs []rewrite.Message) []snapshots.Message {
	out := make([]snapshots.Message, len(msgs))
	for i, m := range msgs {
		sm := snapshots.Message{Role: m.Role, Content: m.Content, Raw: m.Raw, Preserve: m.Preserve}
		if m.Edited || m.Raw == nil {
			sm.Raw = nil
			if enc, err := encodeMessage(&msgs[i]); err == nil {
				sm.Raw = enc
			}
		}
		if m.HasImportance {
			imp := m.Importance
			sm.Importance = &imp
		}
		out[i] = sm
	}
	return out
}

// fromStored converts stored messages back, decoding their raw bytes.
func fromStored(msgs []snapshots.Message) ([]rewrite.Message, error) {
	out := make([]rewrite.Message, len(msgs))
	for i, sm := range msgs {
		raw := sm.Raw
		if raw == nil {
			b, err := json.Marshal(struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			}{sm.Role, sm.Content})
			if err != nil {
				return nil, err
			}
			raw = b
		}
		// The store keeps raw bytes as they were sent; check them before
		// scanning, as decodeChat checks a request body.
		if _, err := jsonscan.Valid(raw); err != nil {
			return nil, fmt.Errorf("stored message %d: %w", i, err)
		}
		m, _, err := decodeMessage(raw)
		if err != nil {
			return nil, fmt.Errorf("stored message %d: %w", i, err)
		}
		if sm.Importance != nil {
			m.Importance, m.HasImportance = *sm.Importance, true
		}
		m.Preserve = m.Preserve || sm.Preserve
		out[i] = m
	}
	return out, nil
}

// replyMessage is the assistant's reply as a message the client would
// send back in its next request, in the request's dialect.
func replyMessage(d Dialect, rep reply) snapshots.Message {
	m := map[string]any{"role": "assistant", "content": rep.content}
	if len(rep.toolCalls) > 0 {
		calls := make([]any, 0, len(rep.toolCalls))
		for _, tc := range rep.toolCalls {
			if d == OpenAI {
				calls = append(calls, map[string]any{"id": tc.ID, "type": "function",
					"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
				continue
			}
			var args any = map[string]any{}
			if tc.Arguments != "" {
				_ = json.Unmarshal([]byte(tc.Arguments), &args)
			}
			fn := map[string]any{"name": tc.Name, "arguments": args}
			call := map[string]any{"function": fn}
			if tc.ID != "" {
				call["id"] = tc.ID
			}
			calls = append(calls, call)
		}
		m["tool_calls"] = calls
	}
	if rep.thinking != "" && d == Ollama {
		m["thinking"] = rep.thinking
	}
	raw, _ := json.Marshal(m)
	return snapshots.Message{Role: "assistant", Content: rep.content, Raw: raw}
}
