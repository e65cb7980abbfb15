package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/imagesize"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/proxy/inband"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ollama/ollama/api"
)

// chat serves an intercepted chat route (POST /api/chat,
// /v1/chat/completions, /v1/responses, /v1/messages). Read top to bottom,
// it is the path of one request, step by step (docs/architecture.md): the
// body is read within the memory budget, decoded by the backend's rules,
// its session named, the window sized and the prompt counted, the
// conversation cut to fit, the request forwarded (and cut harder and
// resent when the backend refuses it as too long), the answer streamed
// back, and the turn recorded once the answer has passed.
func (s *Server) chat(w http.ResponseWriter, r *http.Request, d wire.Dialect) {
	if r.Header.Get("X-Ctxproxy-Bypass") == "1" {
		s.metrics.requests.WithLabelValues(r.URL.Path, d.String(), "bypass").Inc()
		s.rp.ServeHTTP(w, r)
		return
	}
	ex := newExchange(d, r.URL.Path)
	var p *plan
	defer func() { s.rec.logExchange(ex, p) }()
	if s.monitor != nil {
		// Memory is sampled every poll_active while a request is in
		// flight, every poll_idle otherwise.
		defer s.monitor.Active()()
	}

	// Read the body whole, within the memory budget.
	body, release, status := s.gate.TakeBody(w, r, d)
	if status != 0 {
		ex.status = status
		return
	}
	hold := newBodyHold(release)
	defer hold.end()

	// Decode it, reading its member names as the backend reads them.
	req, err := wire.Decode(d, body, s.cfg.MaxDepth, keyRulesOf(s.kind(r.Context())))
	if refused := s.refuseBody(w, ex, err); refused {
		return
	}
	if err != nil {
		// Not a chat request ctxproxy understands: the backend decides.
		s.metrics.unparsable.WithLabelValues(d.String()).Inc()
		s.log.Debug("forwarding unparsable chat request unchanged", "route", ex.route, "err", err)
		s.forward(w, r, ex, nil, nil, wire.PayloadOf(body), nil)
		return
	}
	ex.model, ex.stream = req.Model, req.Stream

	// Name its session.
	session, aerr := s.namer.id(r, req)
	if aerr != nil {
		ex.status = aerr.Status
		wire.WriteError(w, d, *aerr)
		return
	}
	s.noteSession(r, ex, session)

	// An in-band command is answered here, without the backend.
	if s.cfg.Inband {
		if cmd, args, ok := inband.Command(r, req); ok {
			text := s.inband.Run(r.Context(), ex.session, req.Model, cmd, args)
			ex.status = http.StatusOK
			ex.logAttrs = append(ex.logAttrs, "inband", cmd)
			copyHeader(w.Header(), ex.headers)
			inband.WriteAnswer(w, req, text)
			return
		}
	}

	// Plan it: the history it builds on, num_ctx from free memory, the
	// window, the prompt counted.
	p, aerr = s.plan.prepare(r.Context(), r, ex, req)
	if aerr != nil {
		s.refuse(w, ex, *aerr)
		return
	}
	defer p.turn.release()
	// Cut the conversation to fit, and encode what is forwarded.
	out, aerr := s.plan.cut(r.Context(), r, ex, req, p, 0)
	if aerr != nil {
		s.refuse(w, ex, *aerr)
		return
	}
	if p.pending == nil {
		// (A prompt forwarded uncounted gets its headers when counted:
		// forward.)
		p.allocate()
		setPlanHeaders(ex, p)
	}
	s.metrics.added.Observe(time.Since(ex.start).Seconds())

	// Forward it, stream the answer back, and record the turn.
	s.forward(w, r, ex, req, p, out, hold)
}

// forward sends out to the backend (cutting harder and resending while it
// refuses the prompt as too long), then streams its answer to the client
// through the tap, after which the turn is recorded. req, p and hold are
// nil for a request forwarded as it came.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, ex *exchange, req *wire.Request, p *plan, out wire.Payload, hold *bodyHold) {
	defer s.metrics.track(ex.stream)()
	resp, aerr, err := s.send(r.Context(), r, ex, req, p, out)
	switch {
	case err != nil:
		copyHeader(w.Header(), ex.headers)
		ex.status = s.backendError(w, r, ex.dialect, err)
		return
	case aerr != nil:
		s.refuse(w, ex, *aerr)
		return
	}
	if p != nil && (p.retries > 0 || p.pending != nil) {
		// The headers tell of the prompt that went through, counted
		// (settle) if it went uncounted.
		s.plan.settle(r.Context(), ex, req, p)
		p.allocate()
		setPlanHeaders(ex, p)
	}
	resp, ended, err := s.answer(resp, ex, p, func(rep wire.Reply) { s.rec.afterReply(ex, p, rep, hold) })
	if err != nil {
		ex.status = s.backendError(w, r, ex.dialect, badAnswer{err})
		return
	}
	var t *tail
	if p != nil && p.turn != nil {
		// Other replicas build on this turn: it is stored before the
		// client has the whole reply.
		t = &tail{ended: ended, wait: func() { p.turn.awaitStored(r.Context()) }}
	}
	relay(w, resp, t)
}

// refuseBody answers a body ctxproxy refuses to read: nested deeper than
// max_depth, or ambiguous toward a backend whose rules it cannot know.
func (s *Server) refuseBody(w http.ResponseWriter, ex *exchange, err error) bool {
	var amb *wire.AmbiguousError
	switch {
	case errors.Is(err, jsonscan.ErrDepth):
		s.refuse(w, ex, wire.Error{Status: http.StatusBadRequest,
			Message: fmt.Sprintf("request JSON nests deeper than %d levels", s.cfg.MaxDepth)})
	case errors.As(err, &amb):
		s.metrics.unparsable.WithLabelValues(ex.dialect.String()).Inc()
		s.refuse(w, ex, wire.Error{Status: http.StatusBadRequest, Message: err.Error()})
	default:
		return false
	}
	return true
}

// refuse answers e in the request's dialect, with the X-Ctxproxy-*
// headers gathered so far.
func (s *Server) refuse(w http.ResponseWriter, ex *exchange, e wire.Error) {
	ex.status = e.Status
	copyHeader(w.Header(), ex.headers)
	wire.WriteError(w, ex.dialect, e)
}

// noteSession records a request's session and what the client should know
// of it: a failed store write is told on the session's next response (a
// turn is stored after its reply), and on every response while the store
// fails; so is a clear by the memory guard.
func (s *Server) noteSession(r *http.Request, ex *exchange, session string) {
	ex.session = session
	ex.named = r.Header.Get(s.cfg.SessionHeader) != ""
	if s.cfg.Status.Replica != "" {
		ex.headers.Set("X-Ctxproxy-Replica", s.cfg.Status.Replica)
	}
	if session == "" {
		return
	}
	ex.headers.Set("X-Ctxproxy-Session", session)
	if _, err := sessions.Health(s.writer); err != nil || (s.writer != nil && s.writer.Unsaved(session)) {
		ex.headers.Set("X-Ctxproxy-Store", "degraded; last turn not saved")
	}
	if snap, ok := s.cleared.Take(session); ok {
		ex.warn(emergencyWarning(session, snap))
	}
}

// copyHeader adds src's values to dst.
func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

// raw handles a raw-prompt route. ctxproxy does not cut a raw prompt
// (there are no messages to choose from), but it counts it, sets the
// same headers as on chat routes, warns when the prompt is longer than
// the window, and checks the backend's count after the reply, so an
// overflow or a silent truncation is seen and reported there too. The
// body is forwarded as sent.
func (s *Server) raw(w http.ResponseWriter, r *http.Request, d wire.Dialect) {
	if r.Header.Get("X-Ctxproxy-Bypass") == "1" {
		s.rp.ServeHTTP(w, r)
		return
	}
	ex := newExchange(d, r.URL.Path)
	var p *plan
	defer func() { s.rec.logExchange(ex, p) }()
	body, release, status := s.gate.TakeBody(w, r, d)
	if status != 0 {
		ex.status = status
		return
	}
	defer release()
	req, prompt, ok := wire.DecodeRaw(body, s.cfg.MaxDepth)
	if !ok || s.tokens == nil {
		// A prompt array, or anything unusual: the backend decides.
		s.forward(w, r, ex, nil, nil, wire.PayloadOf(body), nil)
		return
	}
	ex.model = req.Model
	ex.stream = req.Stream == nil && d == wire.Ollama || req.Stream != nil && *req.Stream
	p = &plan{model: req.Model}

	toOllama := s.kind(r.Context()) == KindOllama
	var mi backend.Details
	if toOllama {
		mi = s.be.Model(r.Context(), req.Model)
	}
	lim := s.tokens.Window(req.Model, mi.Facts.ContextLength)
	switch {
	case toOllama && d == wire.Ollama && req.Options.NumCtx > 0:
		p.numCtx = req.Options.NumCtx
		lim = lim.Cap(req.Options.NumCtx)
	case toOllama:
		// No num_ctx (or Ollama's /v1 layer, which ignores it): the
		// server's default window.
		lim = lim.Cap(ollamaDefaultCtx)
	}
	window := lim.MaxTokens
	p.limit, p.window = window, window

	if tok := mi.Tokenizer; toOllama && tok != nil && !s.cfg.NoExact && req.Suffix == "" && req.Template == "" && len(req.Context) == 0 {
		var n int
		var err error
		// A raw prompt goes to the runner as sent: its images are counted
		// only where a vision model's runner finds their tags, which
		// CountPrompt does not look for. Otherwise the server renders as
		// for a chat, and Count says whether its images are exact.
		whole := len(req.Images) == 0
		if req.Raw {
			n, err = tok.CountPrompt(prompt)
		} else {
			var msgs []api.Message
			if req.System != "" {
				msgs = append(msgs, api.Message{Role: "system", Content: req.System})
			}
			msgs = append(msgs, api.Message{Role: "user", Content: prompt, Images: make([]api.ImageData, len(req.Images))})
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
		if err == nil {
			p.before = budget.Estimate{Tokens: n, Raw: n, Chars: n, Exact: whole}
			p.counter = &exactCounter{model: tok}
			if p.before.Exact {
				p.exact = &mi
			}
		}
	}
	if p.counter == nil {
		mc := s.tokens.MessageCounter(req.Model).Frozen()
		p.counter = mc
		p.before = budget.Estimate{Tokens: mc.CountText(prompt) + len(req.Context)}
	}
	p.after = p.before
	h := ex.headers
	h.Set("X-Ctxproxy-Tokens", strconv.Itoa(p.after.Tokens))
	h.Set("X-Ctxproxy-Tokens-Before", strconv.Itoa(p.before.Tokens))
	h.Set("X-Ctxproxy-Limit", strconv.Itoa(window))
	h.Set("X-Ctxproxy-Usage", strconv.FormatFloat(float64(p.after.Tokens)*100/float64(max(1, window)), 'f', 1, 64))
	if p.numCtx > 0 {
		h.Set("X-Ctxproxy-Num-Ctx", strconv.Itoa(p.numCtx))
	}
	if p.after.Tokens > window {
		s.metrics.rawOverflows.Inc()
		what := "the backend will cut it or refuse it"
		if toOllama {
			what = "Ollama will cut it to fit without a word (or refuse it with \"truncate\": false)"
		}
		ex.warn(fmt.Sprintf("the prompt (%d tokens) is longer than the model's window (%d): %s; ctxproxy does not cut raw prompts",
			p.after.Tokens, window, what))
		s.log.Warn("raw prompt longer than the window", "route", ex.route, "model", req.Model, "tokens", p.after.Tokens,
			"window", window, "exact", p.exact != nil)
	}
	s.forward(w, r, ex, nil, p, wire.PayloadOf(body), nil)
}
