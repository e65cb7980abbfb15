// Package proxy is ctxproxy's HTTP side: the server and its routes, the
// checks every request meets first (package edge), the options a client
// sets in headers read once into a plan.Options, forwarding to the
// backend over Go's http.Transport (cutting harder and resending while
// the backend refuses a prompt as too long), relaying the answer as it
// streams, the X-Ctxproxy-* response headers, the log line and the
// metrics.
//
// Intercepted are the chat routes POST /api/chat (Ollama),
// /v1/chat/completions (OpenAI), /v1/responses (OpenAI's Responses API)
// and /v1/messages (Anthropic's Messages API); the raw-prompt routes
// /api/generate and /v1/completions; and /api/tokenize and
// /api/detokenize, answered with the model's own tokenizer where ctxproxy
// has it. What a chat or raw-prompt request forwards is decided by
// package plan, which knows nothing of HTTP. Everything else passes
// through httputil.ReverseProxy, and every byte of an intercepted request
// that ctxproxy does not need to change passes as the client sent it.
// The admin API and the status page are package admin's.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/internal/logonce"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/edge"
	"github.com/ctxproxy/ctxproxy/proxy/inband"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/spread"
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
	// Fleet is the servers behind ctxproxy, Backend the first of them;
	// nil is a fleet of one, Backend.
	Fleet *fleet.Router
	// StoreOps, when set, are the store's operation counters
	// (snapshots.Config.Observe), served on /metrics.
	StoreOps *StoreOps
}

// Server is the ctxproxy HTTP handler.
type Server struct {
	cfg     Config
	log     *slog.Logger
	backend *url.URL
	rp      *httputil.ReverseProxy
	// spread serves what rp serves when there are several servers.
	spread *spread.Handler
	// transport carries every request to the backend: the chat routes'
	// round trips, the other routes' through rp, ctxproxy's own calls.
	transport *http.Transport
	metrics   *metrics
	registry  *prometheus.Registry
	mux       *http.ServeMux

	tokens  *budget.Registry
	trimmer atomic.Pointer[rewrite.Trimmer]
	sizer   *gpu.Sizer
	monitor *gpu.Monitor
	store   sessions.Store
	writer  sessions.Writer

	be       *backend.Backend
	fleet    *fleet.Router
	gate     *edge.Gate
	trackers *sessions.Trackers
	tok      *tokenizeRoutes
	once     *logonce.Log
	cleared  *sessions.Cleared

	// plan decides what each request forwards.
	plan *plan.Planner

	// The services chat requests share with the admin API.
	sessions *sessions.Service
	status   *admin.Status
	inband   *inband.Commands
	guard    *memoryGuard
	rec      *plan.Recorder
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
	registerReplica(s.registry, cfg.Status.Replica)
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
	s.transport = transport
	s.fleet = deps.Fleet
	if s.fleet == nil {
		s.fleet = fleet.One(s.be, deps.Monitor)
	}
	s.registry.MustRegister(backendCollector{s.be})
	shape := func(pr *httputil.ProxyRequest) { shaper{cfg.SessionHeader}.to(pr, u) }
	s.rp = &httputil.ReverseProxy{
		Rewrite:   shape,
		Transport: transport,
		// Go's default: a stream (Server-Sent Events, or a body of unknown
		// length, as Ollama's NDJSON streams are) is flushed chunk by
		// chunk; an answer of known length goes out in one write with
		// its headers, instead of the headers first from a timer's
		// goroutine and the body in a second write.
		FlushInterval: 0,
		BufferPool:    copyBuffers,
		ModifyResponse: func(resp *http.Response) error {
			s.be.Answered()
			missingV1(resp, s.backend.Path)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.backendError(w, r, wire.DialectOf(r.URL.Path), err)
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	s.spread = spread.New(spread.Config{Fleet: s.fleet, MaxBody: cfg.MaxBody, Log: log,
		Shape: shape, Hop: removeHopByHop,
		Answer: func(resp *http.Response, srv *fleet.Node) { missingV1(resp, srv.URL.Path) }})
	s.mux = http.NewServeMux()
	s.tok = &tokenizeRoutes{be: s.be, fleet: s.fleet, tokens: s.tokens, noExact: cfg.Planning.NoExact, gate: s.gate, rp: s.rp}
	s.status = admin.NewStatus(admin.StatusConfig{Info: cfg.Status, Version: cfg.Version, BackendURL: u, Backend: s.be,
		Tokens: deps.Tokens, Trimmer: &s.trimmer, Sizer: deps.Sizer, Monitor: deps.Monitor, Fleet: s.fleet, Store: deps.Store,
		Inflight: &s.metrics.inflight, Log: log})
	s.cleared = sessions.NewCleared()
	s.sessions = &sessions.Service{Store: deps.Store, Writer: deps.Writer, Tokens: deps.Tokens, Trimmer: &s.trimmer,
		Seen: s.status.Limit, Cleared: s.cleared, Log: log}
	s.inband = &inband.Commands{Sessions: s.sessions, Status: s.status, Monitor: deps.Monitor,
		SessionHeader: cfg.SessionHeader, AdminOff: cfg.AdminOff}
	s.trackers = sessions.NewTrackers()
	s.once = logonce.New(log)
	s.plan = plan.New(cfg.Planning,
		plan.Deps{Fleet: s.fleet, Tokens: deps.Tokens, Trimmer: &s.trimmer, Sizer: deps.Sizer, Monitor: deps.Monitor,
			Store: deps.Store, Writer: deps.Writer, Once: s.once, Log: log})
	s.rec = plan.NewRecorder(plan.RecorderDeps{Tokens: deps.Tokens, Writer: deps.Writer, Trimmer: &s.trimmer,
		Trackers: s.trackers, Log: log})
	s.namer = sessionNamer{header: cfg.SessionHeader, scopeHeaders: cfg.ScopeHeaders, noFingerprint: cfg.NoFingerprint, noClientIDs: cfg.NoClientIDs}
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
	var next http.Handler = s.rp
	if s.fleet.Several() {
		next = s.spread // which prepares each model on its own server
	}
	b, limited := r.Body.(*edge.RateBody)
	if r.Method == http.MethodPost && mentions[r.URL.Path] && r.Body != nil && !s.fleet.Several() {
		r.Body = &mention{ReadCloser: r.Body, prepare: s.be.Prepare}
	}
	if limited {
		// The transport's own goroutine reads the body, and may still be
		// reading it (if only to find its end) when the backend's answer
		// starts to go out. Without full duplex, Go's HTTP/1 server
		// drains and closes the body at that moment, the transport's read
		// fails, and the transport closes the backend connection under
		// the answer: a streamed reply loses its end (the error line of
		// an "ollama pull", the last chunk of a large body).
		if http.NewResponseController(w).EnableFullDuplex() == nil {
			next.ServeHTTP(closeUnread{w, b}, r)
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
	next.ServeHTTP(w, r)
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

// Backend returns the backend the server forwards to.
func (s *Server) Backend() *backend.Backend { return s.be }

// preflight forwards a CORS preflight without ctxproxy's own headers in
// Access-Control-Request-Headers, and adds them to the backend's
// Access-Control-Allow-Headers when it allowed the request.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request) {
	var own, rest []string
	for _, v := range r.Header.Values("Access-Control-Request-Headers") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			if ownRequestHeader(s.cfg.SessionHeader, name) {
				own = append(own, name)
			} else {
				rest = append(rest, name)
			}
		}
	}
	if len(own) == 0 {
		s.rp.ServeHTTP(w, r)
		return
	}
	r.Header = r.Header.Clone()
	r.Header.Del("Access-Control-Request-Headers")
	if len(rest) > 0 {
		r.Header.Set("Access-Control-Request-Headers", strings.Join(rest, ", "))
	}
	s.rp.ServeHTTP(allowOwn{w, own}, r)
}

// ObserveSummary records one call of the summarizer model: how long it
// took and how it ended. err nil means a summary was made; an error that
// is or wraps context.DeadlineExceeded counts as a timeout (summarize.timeout
// or summarize.wait ran out); any other error as a failure. The summarizer
// calls it once per model call, whether the request waited for it or not.
func (s *Server) ObserveSummary(took time.Duration, err error) {
	m := s.metrics
	m.summaries.Inc()
	m.summaryDuration.Observe(took.Seconds())
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded):
		m.summaryFailures.WithLabelValues(summaryTimeout).Inc()
	default:
		m.summaryFailures.WithLabelValues(summaryError).Inc()
	}
}

// Settings are the parts of the configuration a running Server takes
// without a restart (a configuration reload). A nil field keeps what is
// in force.
type Settings struct {
	// Trimmer replaces the strategy, its thresholds and its options.
	Trimmer *rewrite.Trimmer
	// Models replaces the models: overrides of the token registry
	// (budget.Registry.SetModels); what calibration learned is kept.
	Models map[string]budget.Model
}

// Apply puts set in force from the next request on. A request under way
// keeps the strategy it started with, and no connection is touched: the
// trimmer is swapped atomically and each request loads it once.
func (s *Server) Apply(set Settings) {
	if set.Trimmer != nil {
		s.trimmer.Store(set.Trimmer)
	}
	if set.Models != nil && s.tokens != nil {
		s.tokens.SetModels(set.Models)
	}
	s.metrics.reloads.WithLabelValues("applied").Inc()
	s.metrics.lastReload.SetToCurrentTime()
	s.metrics.lastReloadFailed.Set(0)
}

// ReloadRejected records a reload whose new configuration was refused, so
// the previous one stays in force (ctxproxy_config_last_reload_failed).
func (s *Server) ReloadRejected() {
	s.metrics.reloads.WithLabelValues("rejected").Inc()
	s.metrics.lastReloadFailed.Set(1)
}
