// Package proxy is ctxproxy's HTTP side: the server, routing, the Ollama
// and OpenAI dialect codecs, forwarding through httputil.ReverseProxy, the
// response headers, the admin API and metrics.
//
// Four routes are intercepted: POST /api/chat (Ollama), POST
// /v1/chat/completions (OpenAI), POST /v1/responses (OpenAI's Responses
// API) and POST /v1/messages (Anthropic's Messages API). Everything else,
// and every byte of an intercepted request that ctxproxy does not need to
// change, passes through as the client sent it.
package proxy

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/edge"
	"github.com/ctxproxy/ctxproxy/proxy/inband"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// Deps are the parts of ctxproxy the proxy drives. A nil field turns its
// feature off: without Tokens nothing is counted or trimmed, without
// Sizer num_ctx is left to the client, without Store and Writer no
// session is kept.
type Deps struct {
	Tokens  *budget.Registry
	Trimmer *rewrite.Trimmer
	Sizer   *gpu.Sizer
	Monitor *gpu.Monitor
	Store   sessions.Store
	Writer  sessions.Writer
	// Backend is the server behind ctxproxy; nil builds one from Config
	// over the proxy's transport.
	Backend *backend.Backend
	// StoreOps, when set, are the store's operation counters
	// (snapshots.Config.Observe), served on /metrics.
	StoreOps *StoreOps
}

// Server is the ctxproxy HTTP handler.
type Server struct {
	cfg      Config
	log      *slog.Logger
	backend  *url.URL
	rp       *httputil.ReverseProxy
	metrics  *metrics
	registry *prometheus.Registry
	mux      *http.ServeMux

	tokens  *budget.Registry
	trimmer atomic.Pointer[rewrite.Trimmer]
	sizer   *gpu.Sizer
	monitor *gpu.Monitor
	store   sessions.Store
	writer  sessions.Writer

	be       *backend.Backend
	gate     *edge.Gate
	trackers *sessions.Trackers
	tok      *tokenizeRoutes
	once     *onceLog
	cleared  *sessions.Cleared

	// The services chat requests share with the admin API.
	sessions *sessions.Service
	status   *admin.Status
	inband   *inband.Commands
	guard    *memoryGuard
	rec      *recorder
	namer    sessionNamer
}

var _ http.Handler = (*Server)(nil)

// New returns a Server for cfg driving deps. log may be nil.
func New(cfg Config, deps Deps, log *slog.Logger) (*Server, error) {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u, err := url.Parse(cfg.Backend)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("proxy: backend %q is not an http(s) URL", cfg.Backend)
	}
	s := &Server{cfg: cfg, log: log, backend: u, registry: prometheus.NewRegistry(),
		tokens: deps.Tokens, sizer: deps.Sizer, monitor: deps.Monitor, store: deps.Store, writer: deps.Writer}
	s.trimmer.Store(deps.Trimmer)
	s.metrics = newMetrics(s.registry, deps)
	s.gate = edge.NewGate(cfg.Limits, cfg.MaxBody, s.metrics.refused)
	transport := NewTransport(cfg)
	if b := deps.Backend; b != nil {
		if t, ok := b.Client().Transport.(*http.Transport); ok {
			transport = t // one pool for forwarded requests and ctxproxy's own
		}
		s.be = b
	} else {
		s.be = backend.New(backend.Config{URL: u, Kind: cfg.BackendKind, Log: log,
			Client: &http.Client{Transport: transport}})
	}
	s.rp = &httputil.ReverseProxy{
		Rewrite:   s.rewrite,
		Transport: transport,
		// Go's default: a stream (Server-Sent Events, or a body of unknown
		// length, as Ollama's NDJSON streams are) is flushed chunk by
		// chunk; an answer of known length goes out in one write with
		// its headers, instead of the headers first from a timer's
		// goroutine and the body in a second write.
		FlushInterval:  0,
		BufferPool:     copyBuffers,
		ModifyResponse: s.modifyResponse,
		ErrorHandler:   s.proxyError,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	s.mux = http.NewServeMux()
	s.tok = &tokenizeRoutes{be: s.be, tokens: s.tokens, noExact: cfg.NoExact, gate: s.gate, rp: s.rp}
	s.status = admin.NewStatus(admin.StatusConfig{Info: cfg.Status, Version: cfg.Version, BackendURL: u, Backend: s.be,
		Tokens: deps.Tokens, Trimmer: &s.trimmer, Sizer: deps.Sizer, Monitor: deps.Monitor, Store: deps.Store,
		Inflight: &s.metrics.inflight, Log: log})
	s.cleared = sessions.NewCleared()
	s.sessions = &sessions.Service{Store: deps.Store, Writer: deps.Writer, Tokens: deps.Tokens, Trimmer: &s.trimmer,
		Seen: s.status.Limit, Cleared: s.cleared, Log: log}
	s.inband = &inband.Commands{Sessions: s.sessions, Status: s.status, Monitor: deps.Monitor,
		SessionHeader: cfg.SessionHeader, AdminOff: cfg.AdminOff}
	s.trackers = sessions.NewTrackers()
	s.once = newOnceLog(log)
	s.rec = &recorder{tokens: deps.Tokens, writer: deps.Writer, trimmer: &s.trimmer, trackers: s.trackers, metrics: s.metrics, log: log}
	s.namer = sessionNamer{header: cfg.SessionHeader, scopeHeaders: cfg.ScopeHeaders, noFingerprint: cfg.NoFingerprint}
	s.guard = &memoryGuard{sessions: s.sessions, trackers: s.trackers, log: log}
	if deps.Monitor != nil {
		deps.Monitor.Subscribe(s.guard.onEvent)
	}
	s.routes()
	return s, nil
}

// routes registers the admin API, metrics and the intercepted chat routes.
// Everything not registered falls through to the plain reverse proxy.
func (s *Server) routes() {
	admin.Routes(s.mux, admin.Config{Token: s.cfg.AdminToken, Off: s.cfg.AdminOff, Origins: s.cfg.Hosts.AllowedOrigins,
		MaxBody: s.cfg.MaxBody, Sessions: s.sessions, Status: s.status, Backend: s.be, BackendURL: s.backend,
		Store: s.store, Writer: s.writer, Tokenize: s.tok.postTokenize, Detokenize: s.tok.postDetokenize})
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("POST /api/tokenize", s.tok.apiTokenize(s.tok.postTokenize))
	s.mux.HandleFunc("POST /api/detokenize", s.tok.apiTokenize(s.tok.postDetokenize))
	s.mux.HandleFunc("POST /api/generate", func(w http.ResponseWriter, r *http.Request) { s.raw(w, r, wire.Ollama) })
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.raw(w, r, wire.OpenAI) })
	s.mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, r *http.Request) { s.chat(w, r, wire.Ollama) })
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.chat(w, r, wire.OpenAI) })
	s.mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) { s.chat(w, r, wire.Responses) })
	s.mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { s.chat(w, r, wire.Messages) })
	s.mux.HandleFunc("/", s.passthrough)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if why := s.cfg.Hosts.Check(r); why != "" {
		s.metrics.refused.WithLabelValues("host").Inc()
		s.log.Warn("request refused", "host", r.Host, "origin", r.Header.Get("Origin"), "path", r.URL.Path, "why", why)
		wire.WriteError(w, wire.DialectOf(r.URL.Path), wire.Error{Status: http.StatusForbidden, Message: why})
		return
	}
	done, ok := s.gate.Admit(w, r)
	if !ok {
		return
	}
	defer done()
	// The server decides after the handler whether the connection can
	// serve another request from whether its own body was left unread:
	// it must find that body, not the rate-limiting wrapper, in r.Body.
	defer func(body io.ReadCloser) { r.Body = body }(r.Body)
	s.gate.LimitRate(w, r)
	s.mux.ServeHTTP(w, r)
}

// Registry is the Prometheus registry behind /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// passthrough forwards a request ctxproxy does not read, its body as it
// arrives.
func (s *Server) passthrough(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		s.preflight(w, r)
		return
	}
	if b, ok := r.Body.(*edge.RateBody); ok {
		// The transport's own goroutine reads the body, and may still be
		// reading it (if only to find its end) when the backend's answer
		// starts to go out. Without full duplex, Go's HTTP/1 server
		// drains and closes the body at that moment, the transport's read
		// fails, and the transport closes the backend connection under
		// the answer: a streamed reply loses its end (the error line of
		// an "ollama pull", the last chunk of a large body).
		if http.NewResponseController(w).EnableFullDuplex() == nil {
			s.rp.ServeHTTP(closeUnread{w, b}, r)
			if b.Failed() {
				// The body stopped short (too slow, or cut): the rest
				// of it is still on the connection, and a server in full
				// duplex would read it as the next request. Abort the
				// connection, as ReverseProxy does with an answer it
				// cannot finish.
				panic(http.ErrAbortHandler)
			}
			return
		}
	}
	s.rp.ServeHTTP(w, r)
}

// closeUnread closes the client connection after an answer that starts
// before the request's body was read to its end (a backend that answered
// without reading it): the bytes left on the connection are not a next
// request. In full duplex Go's server no longer says so itself.
type closeUnread struct {
	http.ResponseWriter
	body *edge.RateBody
}

func (c closeUnread) WriteHeader(code int) {
	if code >= 200 && !c.body.Finished() {
		c.Header().Set("Connection", "close")
	}
	c.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's own writer.
func (c closeUnread) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// chat handles an intercepted chat route.
func (s *Server) chat(w http.ResponseWriter, r *http.Request, d wire.Dialect) {
	route := r.URL.Path
	if r.Header.Get("X-Ctxproxy-Bypass") == "1" {
		s.metrics.requests.WithLabelValues(route, d.String(), "bypass").Inc()
		s.rp.ServeHTTP(w, r)
		return
	}
	// Room for the X-Ctxproxy-* headers a counted request gets, so the
	// map is not grown while they are set.
	ex := &exchange{dialect: d, route: route, start: time.Now(), headers: make(http.Header, 16)}
	defer func() { s.rec.logExchange(ex) }()
	if s.monitor != nil {
		// Memory is sampled every poll_active while a request is in
		// flight (seed 004 1.7), every poll_idle otherwise.
		defer s.monitor.Active()()
	}

	body, release, status := s.gate.TakeBody(w, r, d)
	if status != 0 {
		ex.status = status
		return
	}
	ex.hold = newBodyHold(release)
	defer ex.hold.end()
	// One pass validates the body and bounds its nesting, before any
	// decoder reads more than it checked (DESIGN.md rule 3): it finds the
	// top-level members, and decodes a chat's messages as it validates
	// them.
	req, err := wire.Decode(d, body, s.cfg.MaxDepth, keyRulesOf(s.kind(r.Context())))
	if errors.Is(err, jsonscan.ErrDepth) {
		ex.status = http.StatusBadRequest
		wire.WriteError(w, d, wire.Error{Status: http.StatusBadRequest,
			Message: fmt.Sprintf("request JSON nests deeper than %d levels", s.cfg.MaxDepth)})
		return
	}
	if amb := (*wire.AmbiguousError)(nil); errors.As(err, &amb) {
		ex.status = http.StatusBadRequest
		s.metrics.unparsable.WithLabelValues(d.String()).Inc()
		wire.WriteError(w, d, wire.Error{Status: http.StatusBadRequest, Message: err.Error()})
		return
	}
	if err != nil && !errors.Is(err, wire.ErrNotChat) {
		err = fmt.Errorf("%w: %v", wire.ErrNotChat, err)
	}
	if err != nil {
		// Not a chat request ctxproxy understands: the backend decides
		// (DESIGN.md rule 3).
		s.metrics.unparsable.WithLabelValues(d.String()).Inc()
		s.log.Debug("forwarding unparsable chat request unchanged", "route", route, "err", err)
		s.forward(w, r, ex, wire.PayloadOf(body))
		return
	}
	ex.model, ex.stream = req.Model, req.Stream
	session, aerr := s.namer.id(r, req)
	if aerr != nil {
		ex.status = aerr.Status
		wire.WriteError(w, d, *aerr)
		return
	}
	ex.session = session
	ex.named = r.Header.Get(s.cfg.SessionHeader) != ""
	if session != "" {
		ex.headers.Set("X-Ctxproxy-Session", session)
		// A turn is stored after its reply has streamed, so a failed
		// write is told on the session's next response, and on every
		// response while the store fails.
		if _, err := sessions.Health(s.writer); err != nil || (s.writer != nil && s.writer.Unsaved(session)) {
			ex.headers.Set("X-Ctxproxy-Store", "degraded; last turn not saved")
		}
		if snap, ok := s.cleared.Take(session); ok {
			ex.warn(emergencyWarning(session, snap))
		}
	}
	if s.cfg.Inband {
		if cmd, args, ok := inband.Command(r, req); ok {
			text := s.inband.Run(r.Context(), ex.session, req.Model, cmd, args)
			ex.status = http.StatusOK
			ex.logAttrs = append(ex.logAttrs, "inband", cmd)
			for k, v := range ex.headers {
				w.Header()[k] = v
			}
			inband.WriteAnswer(w, req, text)
			return
		}
	}

	out, aerr := s.prepare(r.Context(), r, ex, req)
	if aerr != nil {
		ex.status = aerr.Status
		for k, v := range ex.headers {
			w.Header()[k] = v
		}
		wire.WriteError(w, d, *aerr)
		return
	}
	ex.ready = time.Now()
	s.forward(w, r, ex, out)
}

// forward sends body to the backend in place of r's body.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, ex *exchange, body wire.Payload) {
	defer s.metrics.track(ex.stream)()
	out := r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
	out.Body = io.NopCloser(body.Reader())
	out.ContentLength = int64(body.Size())
	out.TransferEncoding = nil
	// out shares r's header: ReverseProxy clones it before it changes
	// anything, and the transport writes Content-Length from
	// ContentLength, never from the header, so no copy is made here.
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(body.Reader()), nil }
	s.rp.ServeHTTP(flushingWriter{w}, out)
}

// flushingWriter hands every write of an answer to the client at once, its
// headers with its first bytes: the client does not wait for what ctxproxy
// does after the answer (recording the reply, the metrics) to get it.
// ReverseProxy flushes streams itself; an answer of known length would
// otherwise stay buffered until the handler returns.
type flushingWriter struct{ http.ResponseWriter }

func (f flushingWriter) Write(b []byte) (int, error) {
	n, err := f.ResponseWriter.Write(b)
	if fl, ok := f.ResponseWriter.(http.Flusher); ok && err == nil {
		fl.Flush()
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's own writer.
func (f flushingWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// rewrite is the ReverseProxy hook that shapes the outbound request.
func (s *Server) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(s.backend)
	// Keep the client's X-Forwarded-For chain and add this hop.
	pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
	pr.SetXForwarded()
	// ctxproxy's own annotations never reach the backend (DESIGN.md rule 2).
	for k := range pr.Out.Header {
		if strings.HasPrefix(k, "X-Ctxproxy-") {
			delete(pr.Out.Header, k)
		}
	}
	pr.Out.Header.Del(s.cfg.SessionHeader)
	if ex := exchangeFrom(pr.In.Context()); ex != nil && ex.outPath != "" {
		pr.Out.URL.Path = path.Join("/", s.backend.Path, ex.outPath)
		pr.Out.URL.RawPath = ""
	}
	if exchangeFrom(pr.In.Context()) != nil {
		// ctxproxy has read the whole body already: waiting for the
		// backend's 100 Continue would only add latency.
		pr.Out.Header.Del("Expect")
		// ctxproxy reads intercepted responses (usage, the reply), so ask
		// for them uncompressed; only the transfer encoding changes.
		pr.Out.Header.Del("Accept-Encoding")
	}
}

// badAnswer wraps an error in reading the backend's answer (as opposed to
// reaching the backend), so the client is told which it was.
type badAnswer struct{ err error }

func (b badAnswer) Error() string { return "reading the backend's answer: " + b.err.Error() }

func (b badAnswer) Unwrap() error { return b.err }

// modifyResponse runs when the backend's response headers arrive.
func (s *Server) modifyResponse(resp *http.Response) error {
	if err := s.shapeResponse(resp); err != nil {
		return badAnswer{err}
	}
	return nil
}

func (s *Server) shapeResponse(resp *http.Response) error {
	s.be.Answered()
	ex := exchangeFrom(resp.Request.Context())
	if ex == nil {
		return nil
	}
	if ex.recut != nil && (resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestEntityTooLarge) {
		next, own := s.retryOverflow(resp, ex)
		if next != resp {
			resp.Status, resp.StatusCode, resp.Header, resp.Body = next.Status, next.StatusCode, next.Header, next.Body
			resp.ContentLength, resp.TransferEncoding, resp.Trailer, resp.Uncompressed = next.ContentLength, next.TransferEncoding, next.Trailer, next.Uncompressed
		}
		if own {
			// ctxproxy's own answer, already in the client's dialect.
			ex.status = resp.StatusCode
			for k, v := range ex.headers {
				resp.Header[k] = v
			}
			return nil
		}
	}
	ex.status = resp.StatusCode
	for k, v := range ex.headers {
		resp.Header[k] = v
	}
	exposeOwn(resp.Header)
	if !ex.ready.IsZero() {
		s.metrics.added.Observe(ex.ready.Sub(ex.start).Seconds())
	}
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		// rewrite asked for identity; a backend that compresses anyway
		// is inflated here, so the tap and the translation read text and
		// the client gets what ctxproxy asked for on its behalf.
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			resp.Body.Close()
			return err
		}
		resp.Body = gzipBody{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Uncompressed = true
	}
	resp.Body = wire.NewTap(resp.Body, ex.wire(), resp.StatusCode, resp.Header.Get("Content-Type"), int(s.cfg.MaxBody), func(rep wire.Reply) {
		s.rec.afterReply(ex, rep)
	})
	if ex.plan != nil && ex.plan.translate {
		return wire.TranslateAnswer(resp, ex.plan.reply)
	}
	return nil
}

// gzipBody inflates a compressed response body and closes the original.
type gzipBody struct {
	*gzip.Reader
	body io.Closer
}

func (g gzipBody) Close() error { return g.body.Close() }

// proxyError answers a request the backend could not serve, in the
// client's dialect.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	d := wire.DialectOf(r.URL.Path)
	ex := exchangeFrom(r.Context())
	if ex != nil {
		d = ex.dialect
		for k, v := range ex.headers {
			w.Header()[k] = v
		}
	}
	if r.Context().Err() != nil {
		// The client went away; there is nobody to answer.
		s.log.Debug("client gone before the backend answered", "path", r.URL.Path)
		if ex != nil {
			ex.status = 499
		}
		return
	}
	e := wire.Error{Status: http.StatusBadGateway,
		Message: fmt.Sprintf("ctxproxy could not reach the backend at %s", s.backend.Redacted())}
	var bad badAnswer
	if errors.As(err, &bad) {
		e.Message = fmt.Sprintf("ctxproxy could not read the answer of the backend at %s", s.backend.Redacted())
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !isDialError(err) {
		e = wire.Error{Status: http.StatusGatewayTimeout,
			Message: fmt.Sprintf("the backend at %s sent no response headers within %s (backend.response_header_timeout)",
				s.backend.Redacted(), s.cfg.ResponseHeaderTimeout)}
	}
	if ex != nil {
		ex.status = e.Status
	}
	if isDialError(err) {
		s.be.Forget()
	}
	s.log.Warn("backend request failed", "path", r.URL.Path, "status", e.Status, "err", err)
	wire.WriteError(w, d, e)
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
