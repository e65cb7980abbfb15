package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/inband"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
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
	model    string
	messages []rewrite.Message // what is forwarded
	sent     []rewrite.Message // the conversation as the client meant it (history included when accumulating)
	newTurn  []rewrite.Message // what the client sent this time (accumulate mode)
	// turn is this turn as announced to the replicas sharing the store
	// (accumulate mode; nil otherwise): the request releases it, or hands
	// it to the writer with the turn's record.
	turn      *turnMark
	accum     bool
	changed   bool
	numCtx    int
	numReason string
	limit     int
	before    budget.Estimate
	after     budget.Estimate
	result    rewrite.Result
	translate bool
	// reply carries a translated request's answer back to the client's
	// dialect; ollamaOpts are how its request is translated (the server's
	// version, what the model cannot do; num_ctx is set when encoding).
	reply      wire.Translation
	ollamaOpts translate.RequestOptions
	counter    promptCounter
	// exact is the backend's model when the prompt was counted with its
	// own tokenizer; nil when estimated. exactShape is the request's shape
	// as exact counting tells shapes apart (exactCounter.shape).
	exact      *backend.Details
	exactShape string
	// notExact says why a request bound for Ollama was not counted
	// exactly (the status page shows it).
	notExact string
	// uncut are the messages before any strategy (accumulated history
	// and in-band edits applied), uncutChanged whether they already
	// differ from the request's; an overflow retry cuts from them again.
	uncut        []rewrite.Message
	uncutChanged bool
	// retries is the number of overflow retries the request took.
	retries int
	// lim are the model's limits as this request runs with them; alloc
	// how its window was divided (setPlanHeaders).
	lim   budget.Window
	alloc adminapi.Budget
	// replyAsked is the reply the request asked for when it was more than
	// the floor lim keeps (Window.Yield): the reply gets what the prompt
	// leaves of it. 0 otherwise.
	replyAsked int
	tools      json.RawMessage
	// window is the context window the backend runs the request with,
	// when ctxproxy knows it (num_ctx, or Ollama's default): a reported
	// count at it may be censored.
	window int
	// restore is the pending restore this request applied (a client
	// that resends its whole history, after /context restore); nil when
	// none did.
	restore *sessions.Mark
	// keepWhole keeps an accumulated history unpruned (the client's
	// truncate: false, or strategy none for the request).
	keepWhole bool
	// toOllama: the request goes to Ollama's own chat route (num_ctx,
	// truncate); resend: an overflow the backend reports despite the
	// count is cut harder and sent again (never for a client that asked
	// for no cut).
	toOllama, resend bool
	// fixed, when set, is forwarded as it is: a request ctxproxy neither
	// counts nor cuts.
	fixed wire.Payload
	// pending is the model whose tokenizer was still being built when
	// the request's bytes proved it fits as sent (unread): it was
	// forwarded uncounted, and settle counts it before the answer's
	// headers leave. nil once counted, or when counted before forwarding.
	pending *backend.Pending
}

// loadedNumCtx is the num_ctx the backend runs model with now, as its
// /api/ps said at the last memory sample; 0 when it is not loaded.
func loadedNumCtx(snap gpu.Reading, model string) int {
	for _, m := range snap.Models {
		if m.Name == model || m.Name == model+":latest" {
			return m.NumCtx
		}
	}
	return 0
}

// cloudModel reports whether Ollama answers model from its cloud rather
// than on this machine: a name whose tag ends in "cloud" ("gpt-oss:120b-cloud",
// "kimi-k2:cloud"), as Ollama tells them apart.
func cloudModel(model string) bool {
	return strings.HasSuffix(model, "-cloud") || strings.HasSuffix(model, ":cloud")
}

// resendable reports whether an overflow the backend reports is cut
// harder and sent again.
func (p *plan) resendable(*wire.Request) bool { return p.resend }

// planner decides what a chat request forwards: the history it builds on,
// num_ctx from the memory actually free, the window, the count of its
// prompt (prepare), and the conversation cut to fit it (cut). It sends
// nothing: the Server forwards what it planned.
type planner struct {
	cfg     Config
	be      *backend.Backend
	tokens  *budget.Registry
	trimmer *atomic.Pointer[rewrite.Trimmer]
	sizer   *gpu.Sizer
	monitor *gpu.Monitor
	store   sessions.Store
	writer  sessions.Writer
	status  *admin.Status
	once    *onceLog
	log     *slog.Logger
}

// prepare plans a chat request: the history it builds on (accumulated,
// restored), num_ctx from the memory actually free, the window, and the
// prompt counted. It returns the plan, or an error for the client.
func (s *planner) prepare(ctx context.Context, r *http.Request, ex *exchange, req *wire.Request) (*plan, *wire.Error) {
	p := &plan{model: req.Model, messages: req.Messages, sent: req.Messages}
	kind := s.be.Kind(ctx)
	switch s.cfg.TranslateOpenAI {
	case "on":
		p.translate = req.Dialect != wire.Ollama && kind != KindOpenAI
	case "off":
	default:
		p.translate = req.Dialect != wire.Ollama && kind == KindOllama
	}
	toOllama := (req.Dialect == wire.Ollama && kind != KindOpenAI) || p.translate
	p.toOllama = toOllama
	if p.translate && req.Conv != nil && req.Conv.Compaction {
		// Ollama's own compaction (Codex's remote compaction): only its
		// /v1/responses reads it, so the request goes there as sent.
		p.translate, p.toOllama = false, false
		p.fixed = wire.PayloadOf(req.Body)
		ex.headers.Set("X-Ctxproxy-Notice", "Not counted or trimmed: the input holds Ollama's own compaction, "+
			"which only its /v1/responses reads; ctxproxy leaves this request to it.")
		return p, nil
	}
	if toOllama && cloudModel(req.Model) {
		// Ollama answers it from its cloud: the model's tokenizer and
		// window are not this server's. Its own route takes it as sent.
		p.translate, p.toOllama = false, false
		p.fixed = wire.PayloadOf(req.Body)
		ex.headers.Set("X-Ctxproxy-Notice", "Not counted or trimmed: "+req.Model+
			" is answered by Ollama's cloud, whose tokenizer and window ctxproxy cannot see.")
		return p, nil
	}
	if req.ServerState != "" {
		body, aerr := continueServerState(s.log, ex, req, p, kind == KindOllama)
		p.fixed = wire.PayloadOf(body)
		return p, aerr
	}

	// Accumulate: the client sends only its new turn. It needs
	// a session the client names: a fingerprint of the new turn alone
	// would change every turn.
	// The conversation dialects are not accumulated: their clients send
	// the whole conversation, or continue the backend's
	// (previous_response_id).
	if ex.named && s.store != nil && req.Conv == nil && (s.cfg.Accumulate || r.Header.Get("X-Ctxproxy-Accumulate") == "1") {
		p.accum = true
		p.newTurn = req.Messages
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
			return nil, &wire.Error{Status: http.StatusServiceUnavailable,
				Message: "ctxproxy could not store this session's last turn yet, so it will not send the next one without it; try again"}
		}
		// Replicas sharing the store: the turns answered elsewhere too.
		p.turn = awaitTurns(ctx, s.store, ex, s.log)
		stored, err := s.store.Get(ctx, ex.session)
		if err != nil && !errors.Is(err, snapshots.ErrNotFound) {
			p.turn.release()
			// Sending the new turn alone would answer as if the
			// conversation were new, without a word: refuse instead.
			s.log.Warn("reading the session failed; turn refused", "session", ex.session, "err", err)
			return nil, &wire.Error{Status: http.StatusServiceUnavailable,
				Message: "ctxproxy could not read this session's history from its store, so it will not send the turn without it; try again"}
		}
		history := snapshots.Accumulate(stored, sessions.ToStored(req.Messages))
		msgs, err := sessions.FromStored(history)
		if err != nil {
			p.turn.release()
			s.log.Warn("stored session unreadable; turn refused", "session", ex.session, "err", err)
			return nil, &wire.Error{Status: http.StatusServiceUnavailable,
				Message: "this session's stored history could not be read, so ctxproxy will not send the turn without it"}
		}
		p.messages, p.sent, p.changed = msgs, msgs, len(msgs) != len(req.Messages)
		// A client that asked for no cut keeps its stored history whole
		// too (pruneStored).
		p.keepWhole = clientNoTruncate(req) || r.Header.Get("X-Ctxproxy-Strategy") == "none"
	}

	if s.cfg.Inband && !p.accum {
		if msgs, mark := (inband.Restorer{Store: s.store, Log: s.log}).Apply(ctx, ex.session, p.messages); mark != nil {
			p.messages, p.sent, p.changed, p.restore = msgs, msgs, true, mark
		} else if msgs, changed := inband.History(p.messages); changed {
			p.messages, p.sent, p.changed = msgs, msgs, true
		}
	}

	// num_ctx from the memory actually free (Ollama only).
	var mi backend.Details
	var snap gpu.Reading
	if toOllama && s.monitor != nil {
		snap = s.monitor.Current(ctx)
	}
	var pend *backend.Pending
	if toOllama {
		if s.mayForwardUncounted(r, req) {
			mi, pend = s.be.ModelSoon(ctx, req.Model)
		} else {
			mi = s.be.Model(ctx, req.Model)
		}
		if p.translate {
			p.ollamaOpts = translate.RequestOptions{Version: s.be.Version(ctx), NoThinking: mi.Lacks("thinking")}
		}
		p.numCtx = req.NumCtx
		if s.sizer != nil {
			window := 0
			if s.tokens != nil && mi.Facts.ContextLength == 0 {
				window = s.tokens.Window(req.Model, 0).MaxTokens
			}
			d := s.sizer.Decide(gpu.Workload{Name: req.Model, Facts: mi.Facts, Weights: mi.Weights, Window: window, NumCtx: mi.NumCtx}, snap)
			p.numReason = d.Reason
			if req.NumCtx > 0 && s.cfg.RespectClient {
				var why string
				p.numCtx, why = d.Client(req.NumCtx)
				if p.numCtx != req.NumCtx {
					ex.warn("num_ctx " + strconv.Itoa(req.NumCtx) + " lowered to " + strconv.Itoa(p.numCtx) + ": " + why)
				}
			} else if d.NumCtx > 0 {
				p.numCtx = d.NumCtx
				if d.Guessed {
					ex.warn("num_ctx " + strconv.Itoa(d.NumCtx) + " is a guess: the backend did not give the model's facts")
					s.once.warn("facts:"+req.Model, "the backend did not give the model's facts; num_ctx is a guess",
						"model", req.Model, "num_ctx", d.NumCtx, "reason", d.Reason, "err", mi.Err)
				}
			}
		}
	}

	// A backend that tokenizes (vLLM, llama.cpp's server) counts for
	// itself, and may say the model's window.
	var remote backend.Remote
	trained := mi.Facts.ContextLength
	if !toOllama && s.tokens != nil && !s.cfg.NoExact && req.Conv == nil {
		remote = s.be.Remote(ctx, req.Model)
		trained = max(trained, remote.Window)
	}

	// The window: the model's limits, capped by num_ctx, less the reply.
	var lim budget.Window
	if s.tokens != nil {
		lim = s.tokens.Window(req.Model, trained)
		// One notion of the window: a models: max_tokens below the num_ctx
		// memory allows is the window, and num_ctx follows it, so Ollama
		// does not reserve memory for tokens ctxproxy will never send.
		if toOllama && p.numCtx > lim.MaxTokens && req.NumCtx == 0 {
			p.numCtx = lim.MaxTokens
			p.numReason += fmt.Sprintf("; capped at the model's window %d (models: or the model table)", lim.MaxTokens)
		}
		switch {
		case p.numCtx > 0:
			lim = lim.Cap(p.numCtx)
		case toOllama:
			// Ollama's window for a request that sets none: the
			// model's own num_ctx, else the one it runs the model with
			// now (from 0.30 Ollama chooses it by its free memory), else
			// its smallest default.
			w := ollamaDefaultCtx
			if n := loadedNumCtx(snap, req.Model); mi.NumCtx > 0 {
				w = mi.NumCtx
			} else if n > 0 {
				w = n
			}
			lim = lim.Cap(w)
			p.window = w
		}
		// The reply's reserve: the request's max_tokens or num_predict,
		// else the model's. Ollama counts no reply into the window, so
		// bound for it a larger request gives way to the prompt down to
		// the model's own reserve, the floor, before a message is cut.
		floor := lim.MaxOutputTokens
		if req.MaxOutput > 0 {
			lim = lim.WithOutput(req.MaxOutput)
		}
		if toOllama && lim.MaxOutputTokens > floor {
			p.replyAsked = lim.MaxOutputTokens
			lim = lim.Yield(floor)
		}
		if floored, ok := lim.Floor(); ok {
			ex.warn(fmt.Sprintf("the reply reserve (%d tokens) left less than a quarter of the %d-token window for the prompt; "+
				"ctxproxy keeps a quarter (%d tokens) for it", lim.MaxOutputTokens, lim.MaxTokens, floored.Effective()))
			s.once.warn("reserve:"+req.Model, "the reply reserve leaves less than a quarter of the window for the prompt; keeping a quarter",
				"model", req.Model, "window", lim.MaxTokens, "reserve", lim.MaxOutputTokens)
			lim = floored
		}
		p.limit, p.lim = lim.Effective(), lim
		est := s.tokens.MessageCounter(req.Model).Frozen()
		p.counter = est
		switch {
		case pend != nil && s.fitsUnread(req, p, pend):
			// The model's tokenizer is still being built: a prompt whose
			// bytes prove it fits goes at once, counted as it goes
			// (settle); until then, estimated.
			p.pending = pend
			p.before = est.Prompt(p.messages, req.Tools)
		case pend != nil:
			mi = pend.Wait(ctx)
			fallthrough
		default:
			s.countExactly(ctx, ex, req, p, mi, remote, est)
		}
		p.after = p.before
	}

	p.uncut, p.uncutChanged = p.messages, p.changed
	if p.pending == nil {
		s.note(p, mi)
	}
	p.resend = (p.exact != nil || s.tokens != nil) && !clientNoTruncate(req)
	p.tools = req.Tools
	return p, nil
}

// allocate divides the window among the parts of what is forwarded (its
// budget): the system prompt, the tools, the template's own tokens (what
// belongs to no message and no tool), the reply's reserve, and the rest
// of the conversation.
func (p *plan) allocate() {
	if p.counter == nil || p.lim.MaxTokens <= 0 {
		return
	}
	system := 0
	for i := range p.messages {
		if wire.IsSystemRole(p.messages[i].Role) {
			system += p.counter.CountMessage(&p.messages[i])
		}
	}
	overhead := p.counter.Overhead(p.tools)
	template := min(overhead, p.counter.Overhead(nil))
	reserve := p.lim.MaxOutputTokens
	if p.replyAsked > 0 {
		// What the prompt leaves the reply, up to what it asked for.
		reserve = max(reserve, min(p.replyAsked, p.lim.ReplyRoom(p.after.Tokens)))
	}
	p.alloc = adminapi.Budget{Total: p.lim.MaxTokens, SystemPrompt: system, Tools: overhead - template, Template: template,
		ResponseReserve: reserve, Conversation: max(0, p.after.Tokens-system-overhead)}
}

// cut trims the conversation to the plan's limit less shrink tokens and
// encodes the body to forward: the messages, num_ctx, truncate:false and
// the translation. prepare runs it with shrink 0; an overflow retry runs
// it again with more.
func (s *planner) cut(ctx context.Context, r *http.Request, ex *exchange, req *wire.Request, p *plan, shrink int) (wire.Payload, *wire.Error) {
	if p.fixed != nil {
		return p.fixed, nil
	}
	toOllama := p.toOllama
	p.messages, p.changed, p.result, p.after = p.uncut, p.uncutChanged, rewrite.Result{}, p.before
	capN, aerr := maxMessages(r)
	if aerr != nil {
		return nil, aerr
	}
	// A client's own truncate: false: no message is dropped; the request
	// goes uncut (num_ctx still sized), or gets an overflow error.
	uncut := clientNoTruncate(req)
	if uncut {
		if capN > 0 {
			ex.warn(maxMessagesHeader + " ignored: the request sets \"truncate\": false, so no message is dropped")
		}
		if aerr := checkUncut(ex, p); aerr != nil {
			return nil, aerr
		}
	}
	// Trim when the conversation outgrows the window.
	mode := r.Header.Get("X-Ctxproxy-Strategy")
	if trimmer := s.trimmer.Load(); trimmer != nil && mode != "" {
		if _, err := trimmer.Strategy(mode); err != nil {
			return nil, &wire.Error{Status: http.StatusBadRequest, Message: "X-Ctxproxy-Strategy: " + err.Error()}
		}
	}
	// A prompt forwarded uncounted fits as it is (fitsUnread).
	if trimmer := s.trimmer.Load(); trimmer != nil && p.counter != nil && p.limit > 0 && !uncut && p.pending == nil {
		treq := rewrite.Request{Session: ex.session, Model: req.Model, Auth: r.Header.Get("Authorization"),
			NumCtx: p.numCtx, Mode: mode, MaxMessages: capN}
		if s.monitor != nil && s.monitor.Reading().Level >= gpu.LevelCompress {
			// Under memory pressure, compress earlier.
			treq.Threshold = max(trimmer.Threshold()-0.2, trimmer.Target())
		}
		orig := p.messages
		overhead := p.counter.Overhead(req.Tools)
		room := p.limit - overhead - shrink
		if room <= 0 && trimmer.OnOverflow() != rewrite.OverflowForward && shrink == 0 {
			// Messages are cut, tools never: a request whose tools alone
			// leave no room is answered here, not sent to fail.
			return nil, &wire.Error{Status: http.StatusBadRequest, Code: "context_length_exceeded",
				Message: fmt.Sprintf("the tools' definitions and the chat template take %d tokens, and the model's context window "+
					"leaves %d for the prompt; ctxproxy cuts messages, never tools: send fewer tools, or give the model a larger window", overhead, p.limit)}
		}
		// Exact counts measure the whole prompt; a strategy measures
		// messages one by one. Where a template joins messages the two
		// differ by a few tokens: check the cut prompt, and cut again
		// with less room when it does not fit.
		for attempt := 0; ; attempt++ {
			res, err := trimmer.Trim(ctx, treq, orig, room, p.counter)
			switch {
			case errors.Is(err, rewrite.ErrOverflow):
				return nil, &wire.Error{Status: http.StatusBadRequest, Code: "context_length_exceeded",
					Message: fmt.Sprintf("the conversation needs about %d tokens and the model's context window leaves %d; "+
						"ctxproxy could not cut it down (strategy.on_overflow: %s)", p.before.Tokens, p.limit, trimmer.OnOverflow())}
			case err != nil:
				s.log.Error("trimming failed; forwarding the conversation as sent", "err", err)
			case res.Notice != "":
				p.result = res
				p.messages = res.Messages
				p.changed = true
				p.after = p.counter.Prompt(p.messages, req.Tools)
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
	noTruncate := toOllama && p.counter != nil && !req.Truncate && s.manages(r)
	body := wire.PayloadOf(req.Body)
	if req.Conv != nil {
		body = wire.PayloadOf(encodeConversation(s.log, req, p))
	} else if p.changed || req.Annotated || (toOllama && req.Dialect == wire.Ollama && ((p.numCtx > 0 && p.numCtx != req.NumCtx) || noTruncate)) {
		numCtx := 0
		if req.Dialect == wire.Ollama && toOllama && p.numCtx != req.NumCtx {
			numCtx = p.numCtx
		}
		var err error
		if body, err = req.Rebuild(p.messages, p.changed || req.Annotated, numCtx, noTruncate && req.Dialect == wire.Ollama); err != nil {
			s.log.Error("re-encoding the request failed; forwarding it as sent", "err", err)
			body = wire.PayloadOf(req.Body)
		}
	}
	if p.translate {
		opts := p.ollamaOpts
		opts.NumCtx = p.numCtx
		out, rt, err := wire.ToOllama(req.Dialect, body.Bytes(), opts, p.after.Tokens)
		if err != nil {
			return nil, wire.TranslationError(rt, err)
		}
		for _, d := range rt.Dropped() {
			s.log.Debug("translate: field not forwarded to Ollama", "field", d.Field, "reason", d.Reason)
		}
		if noTruncate {
			if withFlag, err := wire.SetMember(out, "truncate", []byte("false")); err == nil {
				out = withFlag
			}
		}
		p.reply = rt
		body = wire.PayloadOf(out)
	}
	return body, nil
}

// manages reports whether ctxproxy manages r's context: a strategy other
// than none, and an on_overflow other than forward. Only then does it ask
// Ollama to refuse overflowing prompts (truncate: false), since it is
// then ready to cut and retry.
func (s *planner) manages(r *http.Request) bool {
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
