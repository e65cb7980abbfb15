package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// The admin API under /ctxproxy/, as docs/admin-api.md lays it out: status,
// sessions, their messages, export and import, snapshots, compress and the
// context size. Every answer is JSON; an error is {"error": "message"}.
//
// Session routes are routed here rather than by ServeMux patterns: a
// session id is any string a client sent (slashes included), path-escaped
// in the URL, and ServeMux takes a segment that unescapes to "/" for a
// trailing slash, so the id "/" would never arrive. The segments of the
// escaped path are split and unescaped here instead.
//
// Admin writes go to the store directly, after the Writer's queue is
// flushed, so that an admin read sees the last chat turn and an admin
// change lands after it.

// adminAPI serves the admin API over the sessions and status services.
type adminAPI struct {
	token string
	off   bool
	// origins are the Origins allowed by name (allowed_origins).
	origins  []string
	maxBody  int64
	sessions *sessions.Service
	status   *Status
	// tokenize and detokenize serve /ctxproxy/tokenize and
	// /ctxproxy/detokenize.
	tokenize, detokenize http.HandlerFunc
}

// routes registers the admin API (healthz and readyz are registered
// with the chat routes and need no token).
func (s *adminAPI) routes(mux *http.ServeMux) {
	mux.Handle("/ctxproxy/status", s.only(byMethod{http.MethodGet: s.getStatus}))
	mux.Handle("/ctxproxy/sessions", s.only(byMethod{http.MethodGet: s.listSessions}))
	mux.Handle("/ctxproxy/sessions/", s.only(http.HandlerFunc(s.sessionRoutes)))
	mux.Handle("/ctxproxy/tokenize", s.only(byMethod{http.MethodPost: s.tokenize}))
	mux.Handle("/ctxproxy/detokenize", s.only(byMethod{http.MethodPost: s.detokenize}))
	mux.Handle("/ctxproxy/context/size", s.only(byMethod{
		http.MethodGet: s.getContextSize, http.MethodPut: s.putContextSize}))
	// Anything else under /ctxproxy/ is an admin route that does not
	// exist: answer it here rather than forward it to the backend.
	mux.Handle("/ctxproxy/", s.only(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adminError(w, http.StatusNotFound, fmt.Sprintf("no admin route %s %s", r.Method, r.URL.EscapedPath()))
	})))
}

// byMethod answers a route by its method, and 405 in JSON for others.
type byMethod map[string]http.HandlerFunc

func (m byMethod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := m[r.Method]; ok {
		h(w, r)
		return
	}
	allowed := slices.Sorted(maps.Keys(m))
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	adminError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: allowed methods are %s",
		r.Method, r.URL.EscapedPath(), strings.Join(allowed, ", ")))
}

// only guards an admin route: off when the admin API is off, and
// with admin.token set only for a request bearing it.
func (s *adminAPI) only(h http.Handler) http.Handler {
	want := sha256.Sum256([]byte(s.token))
	// Without a token the API trusts loopback: a page in the user's
	// browser must not change sessions by posting to it (CSRF).
	csrf := http.NewCrossOriginProtection()
	// Origins the user allowed by name (allowed_origins) may change state
	// too; patterns with * are for the Host and Origin check alone.
	for _, o := range s.origins {
		if !strings.Contains(o, "*") {
			_ = csrf.AddTrustedOrigin(o)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if err := csrf.Check(r); err != nil {
			adminError(w, http.StatusForbidden, "cross-origin admin requests that change state are refused")
			return
		}
		if s.off {
			adminError(w, http.StatusForbidden, "the admin API is off: ctxproxy listens beyond loopback and admin.token "+
				"is not set; set admin.token to turn it on")
			return
		}
		if s.token != "" {
			scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			got := sha256.Sum256([]byte(strings.TrimSpace(token)))
			// Comparing digests keeps the comparison constant-time
			// whatever the lengths.
			if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ctxproxy"`)
				msg := "the admin API needs Authorization: Bearer <admin.token>"
				if r.Header.Get("Authorization") != "" {
					msg = "wrong admin token"
				}
				adminError(w, http.StatusUnauthorized, msg)
				return
			}
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			// A store that hangs (Redis gone away mid-connection) must
			// not hang the admin API: reads answer 503 in about a second.
			ctx, cancel := context.WithTimeout(r.Context(), adminReadTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// adminReadTimeout bounds an admin read, the writer's flush included.
const adminReadTimeout = 1500 * time.Millisecond

// adminError writes {"error": msg}.
func adminError(w http.ResponseWriter, status int, msg string) {
	wire.WriteError(w, wire.Ollama, wire.Error{Status: status, Message: msg})
}

// fail answers err: an error of the session service with its status as
// it says, the store's errors by kind.
func (s *adminAPI) fail(w http.ResponseWriter, err error) {
	status, msg := s.sessions.Describe(err)
	adminError(w, status, msg)
}

// sessionRoutes routes /ctxproxy/sessions/{id}[/...] on the escaped path.
func (s *adminAPI) sessionRoutes(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/ctxproxy/sessions/")
	var segs []string
	for _, seg := range strings.Split(rest, "/") {
		u, err := url.PathUnescape(seg)
		if err != nil {
			adminError(w, http.StatusBadRequest, fmt.Sprintf("invalid escape in the path: %q", seg))
			return
		}
		segs = append(segs, u)
	}
	var h http.Handler
	switch {
	case len(segs) == 1:
		h = byMethod{http.MethodGet: s.getSession, http.MethodPut: s.putSession, http.MethodDelete: s.deleteSession}
	case len(segs) == 2 && segs[1] == "messages":
		h = byMethod{http.MethodGet: s.getMessages, http.MethodPost: s.appendMessages}
	case len(segs) == 2 && segs[1] == "export":
		h = byMethod{http.MethodGet: s.exportSession}
	case len(segs) == 2 && segs[1] == "import":
		h = byMethod{http.MethodPost: s.importSession}
	case len(segs) == 2 && segs[1] == "snapshots":
		h = byMethod{http.MethodGet: s.listSnapshots, http.MethodPost: s.createSnapshot}
	case len(segs) == 2 && segs[1] == "compress":
		h = byMethod{http.MethodPost: s.compressSession}
	case len(segs) == 3 && segs[1] == "snapshots":
		h = byMethod{http.MethodDelete: s.deleteSnapshot}
	case len(segs) == 4 && segs[1] == "snapshots" && segs[3] == "restore":
		h = byMethod{http.MethodPost: s.restoreSnapshot}
	default:
		adminError(w, http.StatusNotFound, fmt.Sprintf("no admin route %s %s", r.Method, r.URL.EscapedPath()))
		return
	}
	if err := sessions.CheckID(segs[0]); err != nil {
		s.fail(w, err)
		return
	}
	if s.sessions.Store == nil {
		s.fail(w, sessions.ErrNoStore)
		return
	}
	r.SetPathValue("id", segs[0])
	if len(segs) >= 3 {
		r.SetPathValue("snap", segs[2])
	}
	h.ServeHTTP(w, r)
}

// maxAdminBody bounds the body of an admin request other than import.
const maxAdminBody = 4 << 20

// readJSON decodes a request body into v; an empty body leaves v as it is.
func readJSON(r *http.Request, limit int64, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return sessions.Errorf(http.StatusBadRequest, "reading the request body failed")
	}
	if int64(len(data)) > limit {
		return sessions.Errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", limit)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return sessions.Errorf(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	return nil
}

// Config is what the admin routes serve from.
type Config struct {
	// Token, when set, is the bearer token every admin route but healthz
	// and readyz wants (admin.token); Off turns the admin API off (403).
	Token string
	Off   bool
	// Origins are the browser origins allowed by name (allowed_origins).
	Origins []string
	// MaxBody bounds a request body (max_body).
	MaxBody  int64
	Sessions *sessions.Service
	Status   *Status
	// Backend and BackendURL are what readyz asks; Store and Writer what
	// it reports on.
	Backend    *backend.Backend
	BackendURL *url.URL
	Store      sessions.Store
	Writer     sessions.Writer
	// Tokenize and Detokenize serve /ctxproxy/tokenize and
	// /ctxproxy/detokenize.
	Tokenize, Detokenize http.HandlerFunc
}

// Routes registers on mux the health checks (/ctxproxy/healthz and
// /ctxproxy/readyz, which need no token), the admin API and the status
// page.
func Routes(mux *http.ServeMux, c Config) {
	h := &health{backend: c.BackendURL, be: c.Backend, store: c.Store, writer: c.Writer}
	mux.HandleFunc("GET /ctxproxy/healthz", h.healthz)
	mux.HandleFunc("GET /ctxproxy/readyz", h.readyz)
	api := &adminAPI{token: c.Token, off: c.Off, origins: c.Origins, maxBody: c.MaxBody, sessions: c.Sessions,
		status: c.Status, tokenize: c.Tokenize, detokenize: c.Detokenize}
	api.routes(mux)
	statusRoutes(mux)
}
