package plan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/internal/logonce"
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

// Config is how the planner plans.
type Config struct {
	// TranslateOpenAI is auto (the default: translate OpenAI-dialect
	// requests to Ollama's /api/chat when the backend is Ollama), on or
	// off.
	TranslateOpenAI string
	// RespectClient keeps a client's own options.num_ctx when it fits.
	RespectClient bool
	// NoExact counts every prompt by estimate (tiktoken and calibration),
	// even for Ollama models whose own tokenizer could count it exactly
	// (tokens.exact: false).
	NoExact bool
	// Accumulate puts the stored history before every named session's
	// turn (clients that send only the new turn), as Options.Accumulate
	// does for one request.
	Accumulate bool
	// Inband answers /context commands typed as a chat message
	// (commands.inband; off by default) and applies their history rules
	// (a restore, a client's edits).
	Inband bool
}

// Planner decides what a request forwards. It sends nothing. A nil
// field turns its part off, as in proxy.Deps.
type Planner struct {
	cfg     Config
	fleet   *fleet.Router
	tokens  *budget.Registry
	trimmer *atomic.Pointer[rewrite.Trimmer]
	sizer   *gpu.Sizer
	monitor *gpu.Monitor
	store   sessions.Store
	writer  sessions.Writer
	once    *logonce.Log
	log     *slog.Logger
	// place chooses each plan's server.
	place *placement
}

// Deps are the parts a Planner reads.
type Deps struct {
	// Fleet is the servers a plan is made for; nil is a fleet of one,
	// Backend, whose memory is the Monitor's.
	Fleet   *fleet.Router
	Backend *backend.Backend
	Tokens  *budget.Registry
	// Trimmer is the strategy in force; a reload swaps it.
	Trimmer *atomic.Pointer[rewrite.Trimmer]
	Sizer   *gpu.Sizer
	Monitor *gpu.Monitor
	Store   sessions.Store
	Writer  sessions.Writer
	Once    *logonce.Log
	Log     *slog.Logger
}

// New returns a Planner for cfg over deps.
func New(cfg Config, deps Deps) *Planner {
	if deps.Fleet == nil {
		deps.Fleet = fleet.One(deps.Backend, deps.Monitor)
	}
	return &Planner{cfg: cfg, fleet: deps.Fleet, tokens: deps.Tokens, trimmer: deps.Trimmer, sizer: deps.Sizer,
		monitor: deps.Monitor, store: deps.Store, writer: deps.Writer, once: deps.Once, log: deps.Log,
		place: newPlacement(deps.Fleet, deps.Store, deps.Log)}
}

// Prepare plans a request: for a chat, the history it builds on
// (accumulated, restored), num_ctx from the memory actually free, the
// window, and the prompt counted; for a raw prompt, the window and the
// count. It returns the plan, or an error for the client. A chat plan is
// cut and encoded by Cut before it is forwarded.
//
// The plan's Server counts the request in flight from the moment it is
// chosen (fleet.Node.Begin), so that requests prepared at the same
// moment spread over the servers: the handler ends it (End) when the
// request ends, on the server it ended on. A refused Prepare has ended
// it.
func (pl *Planner) Prepare(ctx context.Context, in Request, opt Options) (Plan, *wire.Error) {
	if in.Raw != nil {
		where := Plan{Model: in.Raw.Model, opt: opt}
		if aerr := pl.place.choose(ctx, &where, ""); aerr != nil {
			return Plan{}, aerr
		}
		p := pl.prepareRaw(ctx, in, opt, where.Server)
		p.tries = where.tries
		return p, nil
	}
	req := in.Chat
	p := Plan{Model: req.Model, Dialect: req.Dialect, Messages: req.Messages, Sent: req.Messages, Tools: req.Tools, req: req, in: in, opt: opt}
	if aerr := pl.place.choose(ctx, &p, opt.Session); aerr != nil {
		return Plan{}, aerr
	}
	pl.route(ctx, &p)
	if p.Fixed || req.ServerState != "" {
		sent, aerr := pl.asSent(ctx, &p)
		if aerr != nil {
			p.Server.End()
		}
		return sent, aerr
	}
	if aerr := pl.history(ctx, &p); aerr != nil {
		p.Server.End()
		return Plan{}, aerr
	}
	pl.size(ctx, &p)
	return p, nil
}

// Move returns p made again for the next server of its tries: the one
// it went to could not be reached, or refused it before its answer
// began. The conversation is the one p was prepared from; its count,
// num_ctx, window and cut are the new server's. ok is false when no
// server is left. The caller moves the request's count in flight
// (fleet.Node.End, Begin) when it sends the new plan.
func (pl *Planner) Move(ctx context.Context, p Plan, why string) (_ Plan, ok bool, _ *wire.Error) {
	if p.in.Raw != nil {
		q := Plan{Warnings: p.Warnings, in: p.in, opt: p.opt}
		if !pl.place.next(p, &q, why) {
			return p, false, nil
		}
		moved := pl.prepareRaw(ctx, p.in, p.opt, q.Server)
		moved.tries, moved.Moved, moved.Backend = q.tries, q.Moved, q.Backend
		moved.Warnings = append(q.Warnings, moved.Warnings...)
		return moved, true, nil
	}
	q := Plan{Model: p.Model, Dialect: p.Dialect, Messages: p.uncut, Sent: p.Sent, NewTurn: p.NewTurn, Turn: p.Turn,
		TurnWait: p.TurnWait, Accumulated: p.Accumulated, Changed: p.uncutChanged, Restore: p.Restore, KeepWhole: p.KeepWhole,
		Tools: p.Tools, Warnings: p.Warnings, req: p.req, opt: p.opt, in: p.in}
	if q.Messages == nil {
		q.Messages = p.req.Messages // a plan left as sent
	}
	if !pl.place.next(p, &q, why) {
		return p, false, nil
	}
	pl.route(ctx, &q)
	if q.Fixed || q.req.ServerState != "" {
		q, aerr := pl.asSent(ctx, &q)
		return q, true, aerr
	}
	pl.size(ctx, &q)
	cut, aerr := pl.Cut(ctx, q, 0)
	return cut, true, aerr
}

// size makes the plan for its server's window: the model's details and
// num_ctx from the memory the server has free, the window, the prompt
// counted.
func (pl *Planner) size(ctx context.Context, p *Plan) {
	var snap gpu.Reading
	known := true
	if m := p.Server.Memory; p.ToOllama && m != nil {
		snap, known = m.Reading(ctx)
	} else if p.ToOllama {
		known = false
	}
	pend := pl.details(ctx, p, snap, known)
	remote := pl.remote(ctx, p)
	if pl.tokens != nil {
		pl.window(p, snap, remote.Window)
		pl.count(ctx, p, pend, remote)
	}
	p.uncut, p.uncutChanged = p.Messages, p.Changed
	p.Resend = (p.Exact != nil || pl.tokens != nil) && !clientNoTruncate(p.req)
}

// prepareRaw plans a raw prompt (/api/generate, /v1/completions).
// ctxproxy does not cut one (there are no messages to choose from) and
// forwards its body as sent, but it counts it against the window the
// backend runs it with, warns when it is longer, and has the backend's
// count checked after the reply, as for a chat. The planner needs a
// counter (Deps.Tokens) for it.
func (pl *Planner) prepareRaw(ctx context.Context, in Request, opt Options, server *fleet.Node) Plan {
	req := in.Raw
	p := Plan{Model: req.Model, Dialect: in.Dialect, Fixed: true, Body: wire.PayloadOf(in.Body), in: in, opt: opt, Server: server}
	if pl.fleet.Several() {
		p.Backend = server.Name
	}
	p.ToOllama = p.be().Kind(ctx) == backend.KindOllama
	if p.ToOllama {
		p.Details = p.be().Model(ctx, req.Model)
	}
	lim := pl.tokens.Window(req.Model, p.Details.Facts.ContextLength)
	switch {
	case p.ToOllama && in.Dialect == wire.Ollama && req.Options.NumCtx > 0:
		p.NumCtx = req.Options.NumCtx
		lim = lim.Cap(req.Options.NumCtx)
	case p.ToOllama:
		// No num_ctx (or Ollama's /v1 layer, which ignores it): the
		// server's default window.
		lim = lim.Cap(ollamaDefaultCtx)
	}
	p.Limit, p.Window = lim.MaxTokens, lim.MaxTokens
	if tok := p.Details.Tokenizer; p.ToOllama && tok != nil && !pl.cfg.NoExact && req.Suffix == "" && req.Template == "" && len(req.Context) == 0 {
		pl.countRaw(&p, in, tok)
	}
	if p.Counter == nil {
		mc := pl.tokens.MessageCounter(req.Model).Frozen()
		p.Counter = mc
		p.Before = budget.Estimate{Tokens: mc.CountText(in.Prompt) + len(req.Context)}
	}
	p.After = p.Before
	if p.After.Tokens > p.Limit {
		what := "the backend will cut it or refuse it"
		if p.ToOllama {
			what = "Ollama will cut it to fit without a word (or refuse it with \"truncate\": false)"
		}
		p.warn(fmt.Sprintf("the prompt (%d tokens) is longer than the model's window (%d): %s; ctxproxy does not cut raw prompts",
			p.After.Tokens, p.Limit, what))
	}
	return p
}

// route decides where a chat request goes: translated to Ollama's
// /api/chat, to Ollama's own chat route, or left as sent (Fixed) to a
// route only the backend can answer.
func (pl *Planner) route(ctx context.Context, p *Plan) {
	req := p.req
	kind := p.be().Kind(ctx)
	switch pl.cfg.TranslateOpenAI {
	case "on":
		p.Translate = req.Dialect != wire.Ollama && kind != backend.KindOpenAI
	case "off":
	default:
		p.Translate = req.Dialect != wire.Ollama && kind == backend.KindOllama
	}
	p.ToOllama = (req.Dialect == wire.Ollama && kind != backend.KindOpenAI) || p.Translate
	switch {
	case p.Translate && req.Conv != nil && req.Conv.Compaction:
		// Ollama's own compaction (Codex's remote compaction): only its
		// /v1/responses reads it, so the request goes there as sent.
		p.Fixed = true
		p.Notice = "Not counted or trimmed: the input holds Ollama's own compaction, " +
			"which only its /v1/responses reads; ctxproxy leaves this request to it."
	case p.ToOllama && cloudModel(req.Model):
		// Ollama answers it from its cloud: the model's tokenizer and
		// window are not this server's. Its own route takes it as sent.
		p.Fixed = true
		p.Notice = "Not counted or trimmed: " + req.Model +
			" is answered by Ollama's cloud, whose tokenizer and window ctxproxy cannot see."
	default:
		return
	}
	p.Translate, p.ToOllama = false, false
	p.Body = wire.PayloadOf(req.Body)
}

// asSent finishes the plan of a request forwarded as sent: one left to
// the backend (route), or one that continues state the backend keeps.
func (pl *Planner) asSent(ctx context.Context, p *Plan) (Plan, *wire.Error) {
	if p.Fixed {
		return *p, nil
	}
	body, aerr := continueServerState(pl.log, p, p.be().Kind(ctx) == backend.KindOllama)
	if aerr != nil {
		return Plan{}, aerr
	}
	p.Fixed, p.Body = true, wire.PayloadOf(body)
	return *p, nil
}

// cloudModel reports whether Ollama answers model from its cloud rather
// than on this machine: a name whose tag ends in "cloud" ("gpt-oss:120b-cloud",
// "kimi-k2:cloud"), as Ollama tells them apart.
func cloudModel(model string) bool {
	return strings.HasSuffix(model, "-cloud") || strings.HasSuffix(model, ":cloud")
}

// history puts before the turn what it builds on. Accumulating (the
// client sends only its new turn, in a session it names: a fingerprint
// of the new turn alone would change every turn), the stored history;
// for a client that resends everything, a pending restore or its own
// in-band edits. The conversation dialects are not accumulated: their
// clients send the whole conversation, or continue the backend's
// (previous_response_id).
func (pl *Planner) history(ctx context.Context, p *Plan) *wire.Error {
	req, opt := p.req, p.opt
	if opt.Named && pl.store != nil && req.Conv == nil && (pl.cfg.Accumulate || opt.Accumulate) {
		return pl.accumulate(ctx, p)
	}
	if pl.cfg.Inband {
		if msgs, mark := (inband.Restorer{Store: pl.store, Log: pl.log}).Apply(ctx, opt.Session, p.Messages); mark != nil {
			p.Messages, p.Sent, p.Changed, p.Restore = msgs, msgs, true, mark
		} else if msgs, changed := inband.History(p.Messages); changed {
			p.Messages, p.Sent, p.Changed = msgs, msgs, true
		}
	}
	return nil
}

// accumulate puts the session's stored history before the turn sent.
// The turns before this one must be stored before it is built on them
// (a client that sends its next turn the moment a reply ends would
// otherwise find the last one missing), and, with replicas sharing the
// store, the turns answered elsewhere too: the plan holds its Turn.
func (pl *Planner) accumulate(ctx context.Context, p *Plan) *wire.Error {
	req, session := p.req, p.opt.Session
	p.Accumulated, p.NewTurn = true, req.Messages
	var err error
	if pl.writer != nil {
		sctx, cancel := context.WithTimeout(ctx, settleWait)
		err = pl.writer.Settle(sctx, session)
		cancel()
	}
	if err != nil {
		pl.log.Warn("the session's last turns are not stored; turn refused", "session", session, "err", err)
		return wire.Unavailable("ctxproxy could not store this session's last turn yet, so it will not send the next one without it; try again")
	}
	var gaveUp bool
	p.Turn, p.TurnWait, gaveUp = awaitTurns(ctx, pl.store, session, pl.log)
	if gaveUp {
		p.warn(turnWaitWarning)
	}
	stored, err := pl.store.Get(ctx, session)
	if err != nil && !errors.Is(err, snapshots.ErrNotFound) {
		p.Turn.End()
		// Sending the new turn alone would answer as if the
		// conversation were new, without a word: refuse instead.
		pl.log.Warn("reading the session failed; turn refused", "session", session, "err", err)
		return wire.Unavailable("ctxproxy could not read this session's history from its store, so it will not send the turn without it; try again")
	}
	history := snapshots.Accumulate(stored, sessions.ToStored(req.Messages))
	msgs, err := sessions.FromStored(history)
	if err != nil {
		p.Turn.End()
		pl.log.Warn("stored session unreadable; turn refused", "session", session, "err", err)
		return wire.Unavailable("this session's stored history could not be read, so ctxproxy will not send the turn without it")
	}
	p.Messages, p.Sent, p.Changed = msgs, msgs, len(msgs) != len(req.Messages)
	// A client that asked for no cut keeps its stored history whole
	// too (pruneStored).
	p.KeepWhole = clientNoTruncate(req) || p.opt.Strategy == "none"
	return nil
}

// clientNoTruncate reports whether the client itself sent Ollama's
// "truncate": false: it asks that nothing of its prompt be cut, so
// ctxproxy drops no message either. ctxproxy also sets truncate: false on
// the requests it manages, but only after this is read, from the body as
// the client sent it.
func clientNoTruncate(req *wire.Request) bool {
	return req.Dialect == wire.Ollama && req.NoTruncate
}

// ollamaDefaultCtx is the window Ollama uses when a request sets no
// num_ctx (its documented default); ctxproxy assumes it when it does not
// set num_ctx itself.
const ollamaDefaultCtx = 4096

// details asks the backend what it knows of a request bound for Ollama
// and sizes num_ctx from the memory actually free (snap; known false: the
// server's memory is read nowhere, and num_ctx is left to it). It
// returns the model still being read when the request may go before its
// tokenizer is built (mayForwardUncounted); nil otherwise.
func (pl *Planner) details(ctx context.Context, p *Plan, snap gpu.Reading, known bool) *backend.Pending {
	if !p.ToOllama {
		return nil
	}
	req := p.req
	var pend *backend.Pending
	if pl.mayForwardUncounted(p) {
		p.Details, pend = p.be().ModelSoon(ctx, req.Model)
	} else {
		p.Details = p.be().Model(ctx, req.Model)
	}
	mi := p.Details
	if p.Translate {
		p.opts = translate.RequestOptions{Version: p.be().Version(ctx), NoThinking: mi.Lacks("thinking")}
	}
	p.NumCtx = req.NumCtx
	if pl.sizer == nil || !known {
		return pend
	}
	window := 0
	if pl.tokens != nil && mi.Facts.ContextLength == 0 {
		window = pl.tokens.Window(req.Model, 0).MaxTokens
	}
	d := pl.sizer.Decide(gpu.Workload{Name: req.Model, Server: p.Backend, Facts: mi.Facts, Weights: mi.Weights, Window: window, NumCtx: mi.NumCtx}, snap)
	p.NumReason = d.Reason
	switch {
	case req.NumCtx > 0 && pl.cfg.RespectClient:
		var why string
		p.NumCtx, why = d.Client(req.NumCtx)
		if p.NumCtx != req.NumCtx {
			p.warn("num_ctx " + strconv.Itoa(req.NumCtx) + " lowered to " + strconv.Itoa(p.NumCtx) + ": " + why)
		}
	case d.NumCtx > 0:
		p.NumCtx = d.NumCtx
		if d.Guessed {
			p.warn("num_ctx " + strconv.Itoa(d.NumCtx) + " is a guess: the backend did not give the model's facts")
			pl.once.Warn("facts:"+req.Model, "the backend did not give the model's facts; num_ctx is a guess",
				"model", req.Model, "num_ctx", d.NumCtx, "reason", d.Reason, "err", mi.Err)
		}
	}
	return pend
}

// remote is what a backend that tokenizes (vLLM, llama.cpp's server)
// says of the model: it counts for itself, and may say the window.
func (pl *Planner) remote(ctx context.Context, p *Plan) backend.Remote {
	if p.ToOllama || pl.tokens == nil || pl.cfg.NoExact || p.req.Conv != nil {
		return backend.Remote{}
	}
	return p.be().Remote(ctx, p.req.Model)
}

// window sets the plan's limits: the model's (trained: its own context
// length, or what the backend said), capped by num_ctx, less the reply.
func (pl *Planner) window(p *Plan, snap gpu.Reading, remoteWindow int) {
	req := p.req
	lim := pl.tokens.Window(req.Model, max(p.Details.Facts.ContextLength, remoteWindow))
	// One notion of the window: a models: max_tokens below the num_ctx
	// memory allows is the window, and num_ctx follows it, so Ollama
	// does not reserve memory for tokens ctxproxy will never send.
	if p.ToOllama && p.NumCtx > lim.MaxTokens && req.NumCtx == 0 {
		p.NumCtx = lim.MaxTokens
		p.NumReason += fmt.Sprintf("; capped at the model's window %d (models: or the model table)", lim.MaxTokens)
	}
	switch {
	case p.NumCtx > 0:
		lim = lim.Cap(p.NumCtx)
	case p.ToOllama:
		// Ollama's window for a request that sets none: the model's own
		// num_ctx, else the one it runs the model with now (from 0.30
		// Ollama chooses it by its free memory), else its smallest
		// default.
		w := ollamaDefaultCtx
		if n := loadedNumCtx(snap, req.Model); p.Details.NumCtx > 0 {
			w = p.Details.NumCtx
		} else if n > 0 {
			w = n
		}
		lim = lim.Cap(w)
		p.Window = w
	}
	// The reply's reserve: the request's max_tokens or num_predict, else
	// the model's. Ollama counts no reply into the window, so bound for
	// it a larger request gives way to the prompt down to the model's
	// own reserve, the floor, before a message is cut.
	floor := lim.MaxOutputTokens
	if req.MaxOutput > 0 {
		lim = lim.WithOutput(req.MaxOutput)
	}
	if p.ToOllama && lim.MaxOutputTokens > floor {
		p.ReplyAsked = lim.MaxOutputTokens
		lim = lim.Yield(floor)
	}
	if floored, ok := lim.Floor(); ok {
		p.warn(fmt.Sprintf("the reply reserve (%d tokens) left less than a quarter of the %d-token window for the prompt; "+
			"ctxproxy keeps a quarter (%d tokens) for it", lim.MaxOutputTokens, lim.MaxTokens, floored.Effective()))
		pl.once.Warn("reserve:"+req.Model, "the reply reserve leaves less than a quarter of the window for the prompt; keeping a quarter",
			"model", req.Model, "window", lim.MaxTokens, "reserve", lim.MaxOutputTokens)
		lim = floored
	}
	p.Limit, p.Limits = lim.Effective(), lim
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
