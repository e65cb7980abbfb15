package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/inband"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
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
	var p *plan.Plan
	defer func() { logExchange(s.log, s.metrics, ex, p) }()
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
	h := &holds{body: release}
	defer h.release()

	// Decode it, reading its member names as the backend reads them.
	req, err := wire.Decode(d, body, s.cfg.MaxDepth, keyRulesOf(s.be.Kind(r.Context())))
	if refused := s.refuseBody(w, ex, err); refused {
		return
	}
	if err != nil {
		// Not a chat request ctxproxy understands: the backend decides.
		s.metrics.unparsable.WithLabelValues(d.String()).Inc()
		s.log.Debug("forwarding unparsable chat request unchanged", "route", ex.route, "err", err)
		s.forward(w, r, ex, nil, wire.PayloadOf(body), nil)
		return
	}
	ex.model, ex.stream = req.Model, req.Stream

	// Name its session, and read what the client asks of ctxproxy.
	session, aerr := s.namer.id(r, req)
	if aerr != nil {
		ex.status = aerr.Status
		wire.WriteError(w, d, *aerr)
		return
	}
	s.noteSession(ex, session)
	opt, aerr := options(r, s.cfg.SessionHeader, session)
	if aerr != nil {
		s.refuse(w, ex, *aerr)
		return
	}

	// An in-band command is answered here, without the backend.
	if s.cfg.Planning.Inband {
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
	prepared, aerr := s.plan.Prepare(r.Context(), plan.Chat(req), opt)
	if aerr != nil {
		s.refuse(w, ex, *aerr)
		return
	}
	// The request is in flight on its server until it ends, on the
	// server it ends on (a move changes it).
	server := prepared.Server
	defer func() { server.End() }()
	h.turn = prepared.Turn
	ex.tell(prepared)
	if prepared.TurnWait > time.Millisecond {
		ex.logAttrs = append(ex.logAttrs, "turn_wait_ms", float64(prepared.TurnWait.Microseconds())/1000)
	}
	if !prepared.Fixed && !prepared.Uncounted() {
		s.status.Note(seen(prepared))
	}
	// Cut the conversation to fit, and encode what is forwarded.
	cut, aerr := s.plan.Cut(r.Context(), prepared, 0)
	if aerr != nil {
		s.refuse(w, ex, *aerr)
		return
	}
	p = &cut
	ex.tell(cut)
	if !cut.Uncounted() {
		// (A prompt forwarded uncounted gets its headers when counted:
		// forward.)
		setPlanHeaders(ex, cut)
	}
	s.metrics.added.Observe(time.Since(ex.start).Seconds())

	// Forward it, stream the answer back, and record the turn.
	p = s.forward(w, r, ex, p, cut.Body, h)
	server = p.Server
}

// forward sends out to the backend (cutting harder and resending while it
// refuses the prompt as too long), then streams its answer to the client
// through the tap; at the end of the stream the turn is recorded, and,
// when other replicas build on it, stored before the reply's last byte
// leaves. It returns the plan the answer came for. p and h are nil for a
// request forwarded as it came.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, ex *exchange, p *plan.Plan, out wire.Payload, h *holds) *plan.Plan {
	defer s.metrics.track(ex.stream)()
	resp, p, aerr, err := s.send(r.Context(), r, ex, p, out)
	switch {
	case err != nil:
		copyHeader(w.Header(), ex.headers)
		ex.status = s.backendError(w, r, ex.dialect, err)
		return p
	case aerr != nil:
		s.refuse(w, ex, *aerr)
		return p
	}
	if p != nil && (p.Retries > 0 || p.Uncounted()) {
		// The headers tell of the prompt that went through, counted
		// (Settle) if it went uncounted.
		uncounted := p.Uncounted()
		settled := s.plan.Settle(r.Context(), *p)
		p = &settled
		if uncounted {
			s.status.Note(seen(settled))
		}
		ex.tell(settled)
		setPlanHeaders(ex, settled)
	}
	resp, tap, err := s.answer(resp, ex, p)
	if err != nil {
		ex.status = s.backendError(w, r, ex.dialect, badAnswer{err})
		return p
	}
	// The turn is recorded when the reply is over, before the client has
	// all of it; other replicas build on an accumulated turn, so it is
	// also stored by then.
	relay(w, resp, tap, p != nil && (p.Turn != nil || p.Placed), func() { s.replyEnded(r.Context(), ex, p, tap.Reply(), h) })
	return p
}

// replyEnded runs when the reply is over, before its last byte leaves
// (relay): the recorder checks the backend's count and queues the turn,
// and a turn the writer has for other replicas is waited for until
// stored.
func (s *Server) replyEnded(ctx context.Context, ex *exchange, p *plan.Plan, rep wire.Reply, h *holds) {
	if p == nil {
		return
	}
	var holder plan.Holder
	if h != nil {
		holder = h
	}
	rec := s.rec.Record(*p, plan.Outcome{Reply: rep, Holds: holder})
	s.metrics.recorded(rec)
	if rec.PromptTokens > 0 {
		ex.logAttrs = append(ex.logAttrs, "prompt_tokens", rec.PromptTokens)
	}
	if h.writerHas() {
		h.turn.AwaitStored(ctx)
	}
	if p.Placed && s.writer != nil {
		// The session's server is new to its record: other replicas
		// read it there for the next turn.
		sctx, cancel := context.WithTimeout(ctx, placeWait)
		_ = s.writer.Settle(sctx, ex.session)
		cancel()
	}
}

// placeWait bounds how long a reply's last byte waits for the record
// that places its session on a server.
const placeWait = 2 * time.Second

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
func (s *Server) noteSession(ex *exchange, session string) {
	ex.session = session
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
// (there are no messages to choose from), but it plans it as a chat
// (Planner.Prepare): it counts it, sets the same headers as on chat
// routes, warns when the prompt is longer than the window, and checks the
// backend's count after the reply, so an overflow or a silent truncation
// is seen and reported there too. The body is forwarded as sent.
func (s *Server) raw(w http.ResponseWriter, r *http.Request, d wire.Dialect) {
	if r.Header.Get("X-Ctxproxy-Bypass") == "1" {
		s.rp.ServeHTTP(w, r)
		return
	}
	ex := newExchange(d, r.URL.Path)
	var p *plan.Plan
	defer func() { logExchange(s.log, s.metrics, ex, p) }()
	body, release, status := s.gate.TakeBody(w, r, d)
	if status != 0 {
		ex.status = status
		return
	}
	defer release()
	req, prompt, ok := wire.DecodeRaw(body, s.cfg.MaxDepth)
	if !ok || s.tokens == nil {
		// A prompt array, or anything unusual: the backend decides.
		s.forward(w, r, ex, nil, wire.PayloadOf(body), nil)
		return
	}
	ex.model = req.Model
	ex.stream = req.Stream == nil && d == wire.Ollama || req.Stream != nil && *req.Stream
	prepared, aerr := s.plan.Prepare(r.Context(), plan.Raw(d, &req, prompt, body), plan.Options{Backend: r.Header.Get("X-Ctxproxy-Backend")})
	if aerr != nil {
		s.refuse(w, ex, *aerr)
		return
	}
	server := prepared.Server
	defer func() { server.End() }()
	p = &prepared
	ex.tell(prepared)
	setRawHeaders(ex, prepared)
	if prepared.After.Tokens > prepared.Limit {
		s.metrics.rawOverflows.Inc()
		s.log.Warn("raw prompt longer than the window", "route", ex.route, "model", req.Model, "tokens", prepared.After.Tokens,
			"window", prepared.Limit, "exact", prepared.Exact != nil)
	}
	p = s.forward(w, r, ex, p, prepared.Body, nil)
	server = p.Server
}
