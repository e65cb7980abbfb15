// Package spread serves, when ctxproxy has several servers behind it,
// the requests that are not chat routes, so that a client still sees
// one server's worth:
//
//   - the listings (GET /api/tags, /api/ps, /v1/models) are asked of
//     every server that is up, at once, and merged into one answer of
//     the same shape: a model several servers list appears once, and the
//     order is Ollama's own (most recently modified first for /api/tags
//     and /v1/models, longest time left loaded first for /api/ps). A
//     server that fails to answer is left out; when all fail the client
//     gets a 502. GET /v1/models/{model} is the first server's (in the
//     configuration's order) that knows the model.
//   - GET /api/version is answered by the first server that is up.
//   - model management (POST /api/pull, /api/create, /api/copy,
//     DELETE /api/delete, HEAD and POST /api/blobs/{digest}) goes to the
//     server the request header X-Ctxproxy-Backend names, else to every
//     server that is up, the body streamed to all of them at once; the
//     client reads the first one's answer, and a failure of any other is
//     told after it. POST /api/push goes to the named server, else to the
//     first that lists the model.
//   - any other POST whose JSON body names its model ("model" or "name":
//     /api/show, /api/embed, /v1/embeddings, …) goes where a chat request
//     for that model would go first (fleet.Router.Order), the next server
//     tried when one cannot be reached; every other request goes to the
//     first server that is up.
//
// An answer that came from one server carries X-Ctxproxy-Backend: its
// name.
package spread

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// BackendHeader names the server a model-management request goes to
// (request) and the server that answered (response).
const BackendHeader = "X-Ctxproxy-Backend"

// Config is what a Handler needs.
type Config struct {
	// Fleet is the servers.
	Fleet *fleet.Router
	// Shape shapes each outbound request as every other route of
	// ctxproxy does (X-Forwarded-*, ctxproxy's own headers removed). The
	// URL it sets is replaced by the chosen server's.
	Shape func(*httputil.ProxyRequest)
	// Hop removes a message's hop-by-hop headers.
	Hop func(http.Header)
	// Answer, when set, may edit the answer of a request that went to
	// one server before the client sees it.
	Answer func(*http.Response, *fleet.Node)
	// MaxBody bounds the body read for its model (default 32 MiB); a
	// larger one goes to the first server unread.
	MaxBody int64
	// Timeout bounds each server's answer to a listing (default 10 s).
	Timeout time.Duration
	// Log is where failures are logged; nil is nowhere.
	Log *slog.Logger
}

// Handler serves the routes of several servers; see the package doc.
type Handler struct {
	cfg Config
}

// New returns a Handler for cfg.
func New(cfg Config) *Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 32 << 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Hop == nil {
		cfg.Hop = func(http.Header) {}
	}
	return &Handler{cfg: cfg}
}

// managed are the model-management routes, each with whether it goes
// to every server when no server is named.
var managed = map[string]bool{
	"POST /api/pull": true, "POST /api/create": true, "POST /api/copy": true,
	"DELETE /api/delete": true, "POST /api/push": false,
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	route := r.Method + " " + p
	switch {
	case r.Method == http.MethodGet && (p == "/api/tags" || p == "/api/ps" || p == "/v1/models"):
		h.listing(w, r)
		return
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/v1/models/"):
		h.retrieve(w, r)
		return
	}
	_, isManaged := managed[route]
	blob := strings.HasPrefix(p, "/api/blobs/") && (r.Method == http.MethodHead || r.Method == http.MethodPost)
	if isManaged || blob {
		h.manage(w, r, managed[route] || blob)
		return
	}
	if r.Method == http.MethodPost {
		h.byModel(w, r)
		return
	}
	h.forward(w, r, h.upFirst(), nil)
}

// upFirst is every server, those up first, each group in the
// configuration's order.
func (h *Handler) upFirst() []*fleet.Node {
	now := time.Now()
	var up, down []*fleet.Node
	for _, s := range h.cfg.Fleet.Servers() {
		if s.Up(now) {
			up = append(up, s)
		} else {
			down = append(down, s)
		}
	}
	return append(up, down...)
}

// up is the servers that are up; all of them when none is.
func (h *Handler) up() []*fleet.Node {
	now := time.Now()
	var up []*fleet.Node
	for _, s := range h.cfg.Fleet.Servers() {
		if s.Up(now) {
			up = append(up, s)
		}
	}
	if len(up) == 0 {
		return h.cfg.Fleet.Servers()
	}
	return up
}

// byModel sends a POST to the server its model goes to, the next one
// tried when it cannot be reached; a body too large or not naming a
// model goes to the first server that is up.
func (h *Handler) byModel(w http.ResponseWriter, r *http.Request) {
	body, whole, err := readUpTo(r.Body, h.cfg.MaxBody)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	if !whole {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		h.forward(w, r, h.upFirst()[:1], nil)
		return
	}
	model := modelOf(body)
	if model == "" {
		h.forward(w, r, h.upFirst(), body)
		return
	}
	order := h.cfg.Fleet.Order(model, "", "").Order
	order[0].Backend.Prepare([]string{model})
	h.forward(w, r, order, body)
}

// readUpTo reads rc to its end when it holds at most limit bytes (whole
// true); else it returns the first limit+1 bytes read.
func readUpTo(rc io.ReadCloser, limit int64) (data []byte, whole bool, err error) {
	if rc == nil || rc == http.NoBody {
		return nil, true, nil
	}
	data, err = io.ReadAll(io.LimitReader(rc, limit+1))
	return data, int64(len(data)) <= limit, err
}

// modelOf is the model a JSON body names ("model", else "name"), "" for
// none.
func modelOf(body []byte) string {
	var v struct {
		Model json.RawMessage `json:"model"`
		Name  json.RawMessage `json:"name"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	for _, raw := range []json.RawMessage{v.Model, v.Name} {
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// forward sends r to the first of order that can be reached, relaying
// its answer as it streams. body, when not nil, is r's body, read
// already: it is sent again to the next server when one could not be
// reached. With a nil body r's own is sent, to the first server only.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, order []*fleet.Node, body []byte) {
	replay := body != nil || r.Body == nil || r.Body == http.NoBody
	var err error
	var last *fleet.Node
	for i, s := range order {
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		last = s
		if err = h.forwardTo(w, r, s); err == nil {
			return
		}
		if !isDialError(err) || r.Context().Err() != nil {
			break
		}
		s.Failed(err.Error())
		if !replay || i == len(order)-1 {
			break
		}
		h.cfg.Log.Warn("backend unreachable; trying the next", "backend", s.Name, "path", r.URL.Path, "err", err)
	}
	if r.Context().Err() != nil {
		return
	}
	h.cfg.Log.Warn("backend request failed", "backend", last.Name, "path", r.URL.Path, "err", err)
	status, msg := http.StatusBadGateway, fmt.Sprintf("ctxproxy could not reach backend %s at %s", last.Name, last.URL.Redacted())
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !isDialError(err) {
		status, msg = http.StatusGatewayTimeout, fmt.Sprintf("backend %s at %s sent no response headers in time", last.Name, last.URL.Redacted())
	}
	h.fail(w, r, status, msg)
}

// forwardTo relays r to s through a reverse proxy. It returns the error
// of a request that reached the client with nothing: the client is to
// be answered yet.
func (h *Handler) forwardTo(w http.ResponseWriter, r *http.Request, s *fleet.Node) error {
	var failed error
	s.Begin()
	defer s.End()
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { h.shape(pr, s) },
		Transport: s.Transport,
		ModifyResponse: func(resp *http.Response) error {
			s.Answered()
			if h.cfg.Answer != nil {
				h.cfg.Answer(resp, s)
			}
			resp.Header.Set(BackendHeader, s.Name)
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { failed = err },
		ErrorLog:     slog.NewLogLogger(h.cfg.Log.Handler(), slog.LevelDebug),
	}
	rp.ServeHTTP(w, r)
	return failed
}

// shape readies pr's outbound request for s: shaped as ctxproxy's other
// routes shape theirs, to s's URL.
func (h *Handler) shape(pr *httputil.ProxyRequest, s *fleet.Node) {
	if h.cfg.Shape != nil {
		h.cfg.Shape(pr)
	}
	u := *pr.In.URL
	pr.Out.URL = &u
	pr.SetURL(s.URL)
}

// outbound is r, shaped for s, with body (nil for none).
func (h *Handler) outbound(ctx context.Context, r *http.Request, s *fleet.Node, body io.ReadCloser) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.Body = body
	if body == nil {
		out.ContentLength = 0
	}
	out.GetBody = nil
	out.TransferEncoding = nil
	h.cfg.Hop(out.Header)
	// ctxproxy reads these answers: the transport asks for them
	// compressed and inflates them itself.
	out.Header.Del("Accept-Encoding")
	h.shape(&httputil.ProxyRequest{In: r, Out: out}, s)
	return out
}

// fail answers r with status and msg in its route's dialect.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	wire.WriteError(w, wire.DialectOf(r.URL.Path), wire.Error{Status: status, Message: msg})
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// failure is what a server said when it failed a request.
func failure(s *fleet.Node, what string) string {
	return fmt.Sprintf("backend %s: %s", s.Name, what)
}
