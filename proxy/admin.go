package proxy

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/backend"

	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// The admin API under /ctxproxy/, as ADMIN_API.md lays it out: status,
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

// adminState is the admin API's own state in the Server.
type adminState struct {
	start time.Time
	seen  seenModels
}

// adminRoutes registers the admin API (healthz and readyz are registered
// with the chat routes and need no token).
func (s *Server) adminRoutes() {
	s.admin.start = time.Now()
	s.mux.Handle("/ctxproxy/status", s.adminOnly(byMethod{http.MethodGet: s.getStatus}))
	s.mux.Handle("/ctxproxy/sessions", s.adminOnly(byMethod{http.MethodGet: s.listSessions}))
	s.mux.Handle("/ctxproxy/sessions/", s.adminOnly(http.HandlerFunc(s.sessionRoutes)))
	s.mux.Handle("/ctxproxy/tokenize", s.adminOnly(byMethod{http.MethodPost: s.tok.postTokenize}))
	s.mux.Handle("/ctxproxy/detokenize", s.adminOnly(byMethod{http.MethodPost: s.tok.postDetokenize}))
	s.mux.Handle("/ctxproxy/context/size", s.adminOnly(byMethod{
		http.MethodGet: s.getContextSize, http.MethodPut: s.putContextSize}))
	// Anything else under /ctxproxy/ is an admin route that does not
	// exist: answer it here rather than forward it to the backend.
	s.mux.Handle("/ctxproxy/", s.adminOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adminError(w, http.StatusNotFound, fmt.Sprintf("no admin route %s %s", r.Method, r.URL.EscapedPath()))
	})))
}

// noteModel records what the request path decided for a model, for the
// models of /ctxproxy/status. prepare calls it once per request, after
// trimming: `s.noteModel(p, facts)`.
func (s *Server) noteModel(p *plan, facts gpu.ModelFacts) {
	if p == nil || p.model == "" {
		return
	}
	e := seenModel{name: p.model, facts: facts, numCtx: p.numCtx, reason: p.numReason,
		effective: p.limit, at: time.Now(), counting: api.CountingStatus{Method: "estimate"}}
	switch {
	case p.exact != nil:
		e.counting.Method, e.counting.Tokenizer, e.exact = "exact", p.exact.Tokenizer.Name(), p.exact
	case p.before.Exact:
		e.counting.Method = "backend"
	}
	s.admin.seen.note(e)
}

// seenModels remembers the models requests used. Model names are client
// data: it keeps the maxSeenModels most recent.
type seenModels struct {
	mu sync.Mutex
	m  map[string]seenModel
}

const maxSeenModels = 64

type seenModel struct {
	name      string
	facts     gpu.ModelFacts
	numCtx    int
	reason    string
	effective int
	at        time.Time
	counting  api.CountingStatus
	exact     *backend.Model // for its agreement, when counted exactly
}

func (sm *seenModels) note(e seenModel) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.m == nil {
		sm.m = make(map[string]seenModel)
	}
	if _, ok := sm.m[e.name]; !ok && len(sm.m) >= maxSeenModels {
		oldest := ""
		for name, o := range sm.m {
			if oldest == "" || o.at.Before(sm.m[oldest].at) {
				oldest = name
			}
		}
		delete(sm.m, oldest)
	}
	sm.m[e.name] = e
}

// list returns the models seen, most recent first.
func (sm *seenModels) list() []seenModel {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	out := slices.Collect(maps.Values(sm.m))
	slices.SortFunc(out, func(a, b seenModel) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

func (sm *seenModels) get(name string) (seenModel, bool) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	e, ok := sm.m[name]
	return e, ok
}

// Loopback reports whether a listen address (host:port) accepts
// connections from this machine only: 127.0.0.0/8, ::1 or localhost.
// Anything else, an empty host (every interface) included, is not, and
// without admin.token the admin API stays off there.
func Loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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

// adminOnly guards an admin route: off when the admin API is off, and
// with admin.token set only for a request bearing it.
func (s *Server) adminOnly(h http.Handler) http.Handler {
	want := sha256.Sum256([]byte(s.cfg.AdminToken))
	// Without a token the API trusts loopback: a page in the user's
	// browser must not change sessions by posting to it (CSRF).
	csrf := http.NewCrossOriginProtection()
	// Origins the user allowed by name (allowed_origins) may change state
	// too; patterns with * are for the Host and Origin check alone.
	for _, o := range s.cfg.Hosts.AllowedOrigins {
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
		if s.cfg.AdminOff {
			adminError(w, http.StatusForbidden, "the admin API is off: ctxproxy listens beyond loopback and admin.token "+
				"is not set; set admin.token to turn it on")
			return
		}
		if s.cfg.AdminToken != "" {
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
	writeError(w, Ollama, apiError{status: status, message: msg})
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		adminError(w, http.StatusInternalServerError, "encoding the answer failed: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// statusError is an admin error with its HTTP status.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

var errNoStore = errorf(http.StatusServiceUnavailable,
	"sessions are off: ctxproxy runs without a session store (snapshots.store)")

// fail answers err: a statusError as it says, the store's errors by kind.
func (s *Server) fail(w http.ResponseWriter, err error) {
	status, msg := s.describe(err)
	adminError(w, status, msg)
}

// describe turns an error of an admin operation into a status and a
// message for the user.
func (s *Server) describe(err error) (int, string) {
	var se *statusError
	switch {
	case errors.As(err, &se):
		return se.status, se.msg
	case errors.Is(err, snapshots.ErrInvalidID):
		return http.StatusBadRequest, "invalid id: " + strings.TrimPrefix(err.Error(), snapshots.ErrInvalidID.Error()+": ")
	case errors.Is(err, snapshots.ErrNotFound):
		return http.StatusNotFound, "not found"
	case errors.Is(err, snapshots.ErrMalformed):
		return http.StatusBadRequest, strings.TrimPrefix(err.Error(), "snapshots: ")
	case errors.Is(err, snapshots.ErrCorrupt):
		s.log.Error("admin: stored record is corrupt", "err", err)
		return http.StatusInternalServerError, "the stored record is corrupt and was set aside: " +
			strings.TrimPrefix(err.Error(), "snapshots: ")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "the session store did not answer in time"
	}
	s.log.Error("admin: session store failed", "err", err)
	return http.StatusInternalServerError, "the session store failed: " + strings.TrimPrefix(err.Error(), "snapshots: ")
}

// notFound names what was not found when err says so.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, snapshots.ErrNotFound) {
		return errorf(http.StatusNotFound, format, args...)
	}
	return err
}

// flushWait bounds the wait for queued session writes before an admin
// operation.
const flushWait = 10 * time.Second

// flush waits for the session writes queued so far, so that an admin read
// sees the last chat turn and an admin write lands after it.
func (s *Server) flush(ctx context.Context) {
	if s.writer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, flushWait)
	defer cancel()
	if err := s.writer.Flush(ctx); err != nil {
		s.log.Warn("admin: queued session writes not written in time; going on with the stored state", "err", err)
	}
}

// checkSessionID validates a session id from a URL as the store would.
func checkSessionID(id string) error {
	switch {
	case id == "":
		return errorf(http.StatusBadRequest, "invalid session id: empty")
	case len(id) > snapshots.MaxIDLen:
		return errorf(http.StatusBadRequest, "invalid session id: longer than %d bytes", snapshots.MaxIDLen)
	case !utf8.ValidString(id):
		return errorf(http.StatusBadRequest, "invalid session id: not valid UTF-8")
	}
	return nil
}

// fullStore gives the proxy's Store the methods snapshots' helpers
// (Import, Restore) want beyond it.
type fullStore struct{ Store }

func (fullStore) Counters() snapshots.Counters { return snapshots.Counters{} }
func (fullStore) Close() error                 { return nil }

func (s *Server) fullStore() snapshots.Store {
	if st, ok := s.store.(snapshots.Store); ok {
		return st
	}
	return fullStore{s.store}
}

// sessionRoutes routes /ctxproxy/sessions/{id}[/...] on the escaped path.
func (s *Server) sessionRoutes(w http.ResponseWriter, r *http.Request) {
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
	if err := checkSessionID(segs[0]); err != nil {
		s.fail(w, err)
		return
	}
	if s.store == nil {
		s.fail(w, errNoStore)
		return
	}
	r.SetPathValue("id", segs[0])
	if len(segs) >= 3 {
		r.SetPathValue("snap", segs[2])
	}
	h.ServeHTTP(w, r)
}

// finite keeps NaN and infinities, which JSON cannot carry, out of
// answers.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

func sessionInfoOf(i snapshots.SessionInfo) api.SessionInfo {
	out := api.SessionInfo{SessionID: i.ID, Model: i.Model, Created: i.Created.UTC(), Updated: i.Updated.UTC(),
		Messages: i.Messages, Tokens: i.Tokens, Limit: i.Limit, Usage: finite(i.Usage), Requests: i.Requests,
		Snapshots: i.Snapshots, Sent: i.Sent, ForwardedUsage: finite(i.Usage)}
	if i.Sent > 0 && i.Limit > 0 {
		out.ForwardedUsage = float64(i.Sent) / float64(i.Limit)
	}
	return out
}

// snapshotOf is a snapshot's JSON; nil for the zero info (no undo).
func snapshotOf(i snapshots.SnapshotInfo) *api.SnapshotInfo {
	if i.ID == "" {
		return nil
	}
	return &api.SnapshotInfo{ID: i.ID, SessionID: i.SessionID, Created: i.Created.UTC(), Model: i.Model,
		Tokens: i.Tokens, Usage: finite(i.Usage), Reason: i.Reason, Messages: i.Messages, Bytes: i.Bytes}
}

func statsOf(st snapshots.Stats) api.SessionStats {
	out := api.SessionStats{Tokens: st.Tokens, Limit: st.Limit, Usage: finite(usageOf(st)), Sent: st.Sent, NumCtx: st.NumCtx,
		Dropped: st.Dropped, Summarized: st.Summarized, PromptTokens: st.PromptTokens,
		CompletionTokens: st.CompletionTokens, Requests: st.Requests, Truncations: st.Truncations}
	if !st.LastTruncation.IsZero() {
		t := st.LastTruncation.UTC()
		out.LastTruncation = &t
	}
	return out
}

// usageOf is a session's usage, from its tokens when the usage was not
// recorded.
func usageOf(st snapshots.Stats) float64 {
	if st.Usage == 0 && st.Limit > 0 {
		return float64(st.Tokens) / float64(st.Limit)
	}
	return st.Usage
}

// usageWarning is seed 000's warning for a usage, as the chat routes send
// it in X-Ctxproxy-Warning.
func usageWarning(usage float64) string {
	switch {
	case usage >= 0.9:
		return warn90
	case usage >= 0.8:
		return warn80
	}
	return ""
}

func messagesOf(msgs []snapshots.Message) []api.SessionMessage {
	out := make([]api.SessionMessage, len(msgs))
	for i, m := range msgs {
		out[i] = api.SessionMessage{Role: m.Role, Content: m.Content, Timestamp: m.Timestamp.UTC(), Importance: m.Importance,
			Metadata: m.Metadata, Preserve: m.Preserve}
	}
	return out
}

// session reads session id with its snapshot count.
func (s *Server) session(ctx context.Context, id string) (*snapshots.Session, api.SessionDetail, error) {
	sess, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, api.SessionDetail{}, notFound(err, "session %q not found", id)
	}
	snaps, err := s.store.ListSnapshots(ctx, id)
	if err != nil {
		return nil, api.SessionDetail{}, err
	}
	md := sess.Metadata
	if md == nil {
		md = map[string]any{}
	}
	out := api.SessionDetail{SessionID: sess.ID, Model: sess.Model, Created: sess.Created.UTC(), Updated: sess.Updated.UTC(),
		Metadata: md, Stats: statsOf(sess.Stats), Messages: len(sess.Messages), Snapshots: len(snaps)}
	// As on the chat routes: a conversation that its last request cut
	// is judged by what was forwarded, never warned of as "approaching".
	usage := out.Stats.Usage
	if st := sess.Stats; st.Sent > 0 && st.Sent != st.Tokens && st.Limit > 0 {
		usage = float64(st.Sent) / float64(st.Limit)
	}
	out.Warning = usageWarning(usage)
	return sess, out, nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	if s.store == nil {
		s.fail(w, errNoStore)
		return
	}
	s.flush(r.Context())
	list, err := s.store.List(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	out := make([]api.SessionInfo, len(list))
	for i, info := range list {
		out[i] = sessionInfoOf(info)
	}
	writeJSON(w, http.StatusOK, api.Sessions{Sessions: out})
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	s.flush(r.Context())
	_, out, err := s.session(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// maxAdminBody bounds the body of an admin request other than import.
const maxAdminBody = 4 << 20

// readJSON decodes a request body into v; an empty body leaves v as it is.
func readJSON(r *http.Request, limit int64, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return errorf(http.StatusBadRequest, "reading the request body failed")
	}
	if int64(len(data)) > limit {
		return errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", limit)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errorf(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	return nil
}

// putSession creates a session or merges metadata (a null value removes
// the key) and the model into it.
func (s *Server) putSession(w http.ResponseWriter, r *http.Request) {
	var body api.SessionUpdate
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	id := r.PathValue("id")
	s.flush(r.Context())
	err := s.store.Update(r.Context(), id, func(sess *snapshots.Session) error {
		if len(body.Metadata) > 0 && sess.Metadata == nil {
			sess.Metadata = make(map[string]any, len(body.Metadata))
		}
		for k, v := range body.Metadata {
			if v == nil {
				delete(sess.Metadata, k)
			} else {
				sess.Metadata[k] = v
			}
		}
		if body.Model != nil && *body.Model != "" {
			sess.Model = *body.Model
		}
		return nil
	})
	if err != nil {
		s.fail(w, err)
		return
	}
	_, out, err := s.session(r.Context(), id)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// clearSession is seed 000's /clear: the conversation and its numbers go,
// the metadata stays; the cleared state is snapshotted first (reason
// clear) so that a /clear can be undone. With keepSystem (seed 004 R7.7's
// /context clear) the leading system messages stay.
func (s *Server) clearSession(ctx context.Context, id string, keepSystem bool, reason string) (undo snapshots.SnapshotInfo, err error) {
	sess, err := s.store.Get(ctx, id)
	if err != nil {
		return undo, notFound(err, "session %q not found", id)
	}
	if len(sess.Messages) > 0 {
		if undo, err = s.store.SaveSnapshot(ctx, snapshots.NewSnapshot(sess, reason)); err != nil {
			return undo, fmt.Errorf("saving the session before clearing it: %w", err)
		}
	}
	if !keepSystem {
		if err := s.store.Clear(ctx, id); err != nil {
			return undo, notFound(err, "session %q not found", id)
		}
		s.remeasure(ctx, id) // the limit stays known
		return undo, nil
	}
	err = s.store.Update(ctx, id, func(sess *snapshots.Session) error {
		n := 0
		for n < len(sess.Messages) && isSystemRole(sess.Messages[n].Role) {
			n++
		}
		sess.Messages, sess.Summaries = slices.Clone(sess.Messages[:n]), nil
		sess.Stats = snapshots.Stats{}
		s.measure(sess)
		return nil
	})
	return undo, err
}

// deleteSession clears a session (seed 000 /clear), or with ?purge=1
// removes it and its snapshots.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.flush(r.Context())
	if purge := r.URL.Query().Get("purge"); purge == "1" || purge == "true" {
		if err := s.store.Delete(r.Context(), id); err != nil {
			s.fail(w, notFound(err, "session %q not found", id))
			return
		}
		s.cleared.take(id)
		writeJSON(w, http.StatusOK, api.Purged{Purged: true})
		return
	}
	undo, err := s.clearSession(r.Context(), id, false, snapshots.ReasonClear)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Cleared{Cleared: true, Undo: snapshotOf(undo)})
}

func (s *Server) getMessages(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.flush(r.Context())
	sess, err := s.store.Get(r.Context(), id)
	if err != nil {
		s.fail(w, notFound(err, "session %q not found", id))
		return
	}
	writeJSON(w, http.StatusOK, api.Messages{Messages: messagesOf(sess.Messages)})
}

// appendMessages is seed 003's add: messages with an importance (and
// metadata) pinned to a session outside any chat. The session is created
// when it does not exist.
func (s *Server) appendMessages(w http.ResponseWriter, r *http.Request) {
	var body api.NewMessages
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	if len(body.Messages) == 0 {
		s.fail(w, errorf(http.StatusBadRequest, `want {"messages": [{"role", "content", "importance", "metadata"}, …]}`))
		return
	}
	now := time.Now().UTC()
	msgs := make([]snapshots.Message, len(body.Messages))
	for i, m := range body.Messages {
		switch {
		case m.Role == "":
			s.fail(w, errorf(http.StatusBadRequest, "messages[%d]: \"role\" is missing", i))
			return
		case m.Content == nil:
			s.fail(w, errorf(http.StatusBadRequest, "messages[%d]: \"content\" is missing", i))
			return
		case m.Importance != nil && !(*m.Importance >= 0 && *m.Importance <= 1):
			s.fail(w, errorf(http.StatusBadRequest, "messages[%d]: \"importance\" %v is not in [0, 1]", i, *m.Importance))
			return
		}
		msgs[i] = snapshots.Message{Role: m.Role, Content: *m.Content, Timestamp: now, Importance: m.Importance,
			Metadata: m.Metadata, Preserve: m.Preserve}
	}
	id := r.PathValue("id")
	s.flush(r.Context())
	total := 0
	err := s.store.Update(r.Context(), id, func(sess *snapshots.Session) error {
		sess.Messages = append(slices.Clip(sess.Messages), msgs...)
		total = len(sess.Messages)
		s.measure(sess)
		return nil
	})
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Appended{Appended: len(msgs), Messages: total})
}

func (s *Server) exportSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.flush(r.Context())
	sess, err := s.store.Get(r.Context(), id)
	if err != nil {
		s.fail(w, notFound(err, "session %q not found", id))
		return
	}
	data, err := snapshots.EncodeExport(sess)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(data)
}

// importSession loads an export, a bare array of messages or a chat
// request body into a session; a malformed body changes nothing.
func (s *Server) importSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	data, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBody+1))
	if err != nil {
		s.fail(w, errorf(http.StatusBadRequest, "reading the request body failed"))
		return
	}
	if int64(len(data)) > s.cfg.MaxBody {
		s.fail(w, errorf(http.StatusRequestEntityTooLarge, "import is larger than the %d bytes ctxproxy accepts (max_body)", s.cfg.MaxBody))
		return
	}
	s.flush(r.Context())
	n, undo, err := snapshots.Import(r.Context(), s.fullStore(), id, data)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.remeasure(r.Context(), id)
	writeJSON(w, http.StatusOK, api.Imported{Imported: n, Undo: snapshotOf(undo)})
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.flush(r.Context())
	list, err := s.store.ListSnapshots(r.Context(), id)
	if err != nil {
		s.fail(w, err)
		return
	}
	if len(list) == 0 {
		// No snapshots is an answer for a session that exists.
		if _, err := s.store.Get(r.Context(), id); err != nil {
			s.fail(w, notFound(err, "session %q not found", id))
			return
		}
	}
	out := make([]api.SnapshotInfo, len(list))
	for i, info := range list {
		out[i] = *snapshotOf(info)
	}
	writeJSON(w, http.StatusOK, api.Snapshots{Snapshots: out})
}

// reasons are the snapshot reasons a client may give.
var reasons = []string{snapshots.ReasonManual, snapshots.ReasonAuto, snapshots.ReasonOverflow,
	snapshots.ReasonEmergency, snapshots.ReasonRestore, snapshots.ReasonImport, snapshots.ReasonClear}

// takeSnapshot saves a snapshot of session id as stored now.
func (s *Server) takeSnapshot(ctx context.Context, id, reason string) (snapshots.SnapshotInfo, error) {
	info, err := snapshots.TakeSnapshot(ctx, s.fullStore(), id, reason)
	return info, notFound(err, "session %q not found", id)
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	if body.Reason == "" {
		body.Reason = snapshots.ReasonManual
	}
	if !slices.Contains(reasons, body.Reason) {
		s.fail(w, errorf(http.StatusBadRequest, "reason %q is not one of %s", body.Reason, strings.Join(reasons, ", ")))
		return
	}
	s.flush(r.Context())
	info, err := s.takeSnapshot(r.Context(), r.PathValue("id"), body.Reason)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOf(info))
}

// restore replaces session id's conversation with snapshot snap's and
// returns how many messages it has now and the undo snapshot.
func (s *Server) restore(ctx context.Context, id, snap string) (n int, undo snapshots.SnapshotInfo, err error) {
	undo, err = snapshots.Restore(ctx, s.fullStore(), id, snap)
	if err != nil {
		return 0, undo, notFound(err, "snapshot %q of session %q not found", snap, id)
	}
	sess, err := s.store.Get(ctx, id)
	if err != nil {
		return 0, undo, err
	}
	s.cleared.take(id)
	return len(sess.Messages), undo, nil
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	id, snap := r.PathValue("id"), r.PathValue("snap")
	s.flush(r.Context())
	n, undo, err := s.restore(r.Context(), id, snap)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Restored{Restored: snap, Messages: n, Undo: snapshotOf(undo)})
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id, snap := r.PathValue("id"), r.PathValue("snap")
	s.flush(r.Context())
	if err := s.store.DeleteSnapshot(r.Context(), id, snap); err != nil {
		s.fail(w, notFound(err, "snapshot %q of session %q not found", snap, id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// errChanged aborts a compress whose session changed under it.
var errChanged = errorf(http.StatusConflict, "the session changed while it was being compressed; try again")

// compress trims (or summarizes) the stored conversation of session id
// now with the configured strategy, down to strategy.target of the
// model's effective limit (seed 004 R7.8). The conversation as it was is
// snapshotted first.
func (s *Server) compress(ctx context.Context, id string) (api.Compressed, error) {
	trimmer := s.trimmer.Load()
	if trimmer == nil || s.tokens == nil {
		return api.Compressed{}, errorf(http.StatusServiceUnavailable, "compress needs token counting and a strategy, and ctxproxy runs without them")
	}
	if trimmer.Mode() == "none" {
		return api.Compressed{}, errorf(http.StatusConflict, "nothing to compress with: strategy.mode is none")
	}
	sess, err := s.store.Get(ctx, id)
	if err != nil {
		return api.Compressed{}, notFound(err, "session %q not found", id)
	}
	msgs, err := fromStored(sess.Messages)
	if err != nil {
		return api.Compressed{}, errorf(http.StatusInternalServerError, "the stored conversation cannot be read: %v", err)
	}
	counter := s.tokens.MessageCounter(sess.Model)
	limit := s.limitFor(sess.Model, sess.Stats)
	before := counter.Prompt(msgs, nil).Tokens
	res := api.Compressed{Before: before, After: before}
	// Acting from the target itself cuts down to it now: a threshold
	// lower than the target would lower the target with it (Trim cuts to
	// min(target, threshold)).
	tctx := rewrite.WithThreshold(ctx, trimmer.Target())
	out, err := trimmer.Trim(tctx, "", msgs, limit-counter.Overhead(nil), counter)
	switch {
	case errors.Is(err, rewrite.ErrOverflow):
		return res, errorf(http.StatusUnprocessableEntity, "the conversation needs about %d tokens and cannot be cut "+
			"below the model's limit of %d (strategy.on_overflow: %s)", before, limit, trimmer.OnOverflow())
	case err != nil:
		return res, errorf(http.StatusInternalServerError, "compress failed: %v", err)
	case out.Notice == "" || (out.Dropped == 0 && out.Summarized == 0 && len(out.Messages) == len(msgs)):
		res.Notice = fmt.Sprintf("Nothing to compress: the conversation uses %s of %s tokens, within the target of %s.",
			grouped(before), grouped(limit), percent(trimmer.Target(), 0))
		return res, nil
	}
	undo, err := s.store.SaveSnapshot(ctx, snapshots.NewSnapshot(sess, snapshots.ReasonManual))
	if err != nil {
		return res, fmt.Errorf("saving the session before compressing it: %w", err)
	}
	kept := keepStored(sess.Messages, msgs, out.Messages, time.Now().UTC())
	after := counter.Prompt(out.Messages, nil).Tokens
	err = s.store.Update(ctx, id, func(cur *snapshots.Session) error {
		if !cur.Updated.Equal(sess.Updated) || len(cur.Messages) != len(sess.Messages) {
			return errChanged
		}
		// Cached summaries stay: they are keyed by the messages they cover.
		cur.Messages = kept
		cur.Stats.Tokens, cur.Stats.Limit = after, limit
		cur.Stats.Usage = finite(float64(after) / float64(max(limit, 1)))
		cur.Stats.Dropped, cur.Stats.Summarized = out.Dropped, out.Summarized
		return nil
	})
	if err != nil {
		return res, err
	}
	res.After, res.Dropped, res.Summarized, res.Notice = after, out.Dropped, out.Summarized, out.Notice
	res.Undo = snapshotOf(undo)
	return res, nil
}

func (s *Server) compressSession(w http.ResponseWriter, r *http.Request) {
	s.flush(r.Context())
	res, err := s.compress(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// keepStored maps a strategy's output back to the stored messages, so a
// kept message keeps its timestamp and metadata: strategies keep the order
// and the raw bytes of what they do not change. A message they made or
// changed (a marker, a summary, a shortened tool result) is stored new.
func keepStored(stored []snapshots.Message, in, out []rewrite.Message, now time.Time) []snapshots.Message {
	kept := make([]snapshots.Message, 0, len(out))
	j := 0
	for i := range out {
		m := &out[i]
		if !m.Edited && !m.Synthetic {
			k := j
			for k < len(in) && !(in[k].Role == m.Role && bytes.Equal(in[k].Raw, m.Raw)) {
				k++
			}
			if k < len(in) {
				kept = append(kept, stored[k])
				j = k + 1
				continue
			}
		}
		sm := toStored(out[i : i+1])[0]
		sm.Timestamp = now
		kept = append(kept, sm)
	}
	return kept
}

// limitFor is the effective limit of a stored session's model: the last
// request's, else the last one seen for the model, else its table limit.
func (s *Server) limitFor(model string, st snapshots.Stats) int {
	if st.Limit > 0 {
		return st.Limit
	}
	if e, ok := s.admin.seen.get(model); ok && e.effective > 0 {
		return e.effective
	}
	if s.tokens == nil {
		return 0
	}
	return s.tokens.Limits(model, 0).Effective()
}

// measure counts a stored conversation changed outside a chat request,
// so that its stats describe it.
func (s *Server) measure(sess *snapshots.Session) {
	if s.tokens == nil {
		return
	}
	msgs, err := fromStored(sess.Messages)
	if err != nil {
		return
	}
	sess.Stats.Tokens = s.tokens.MessageCounter(sess.Model).Prompt(msgs, nil).Tokens
	if sess.Stats.Limit = s.limitFor(sess.Model, sess.Stats); sess.Stats.Limit > 0 {
		sess.Stats.Usage = finite(float64(sess.Stats.Tokens) / float64(sess.Stats.Limit))
	}
}

// remeasure measures a stored session again (after an import or a
// clear).
func (s *Server) remeasure(ctx context.Context, id string) {
	if s.tokens == nil {
		return
	}
	if err := s.store.Update(ctx, id, func(sess *snapshots.Session) error {
		s.measure(sess)
		return nil
	}); err != nil {
		s.log.Warn("admin: counting the session failed", "session", id, "err", err)
	}
}

func (s *Server) contextSize() api.ContextSize {
	if s.sizer == nil {
		return api.ContextSize{}
	}
	auto, target := s.sizer.Mode()
	if auto {
		target = 0
		if seen := s.admin.seen.list(); len(seen) > 0 {
			target = seen[0].numCtx
		}
	}
	return api.ContextSize{Auto: auto, Target: target}
}

func (s *Server) getContextSize(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.contextSize())
}

// setContextSize fixes num_ctx at tokens, or with tokens 0 sizes it from
// free memory again (seed 004 R7.2, R7.3).
func (s *Server) setContextSize(tokens int) error {
	if s.sizer == nil {
		return errorf(http.StatusServiceUnavailable, "context sizing is off: ctxproxy runs without a sizer")
	}
	if tokens == 0 {
		s.sizer.SetAuto()
		s.log.Info("context size: auto, from free memory")
		return nil
	}
	lo, hi := s.cfg.Status.minSize(), s.cfg.Status.maxSize()
	if tokens < lo || tokens > hi {
		return errorf(http.StatusBadRequest, "context size %d is outside context.min_size–context.max_size (%d–%d)", tokens, lo, hi)
	}
	if err := s.sizer.SetTarget(tokens); err != nil {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	s.log.Info("context size fixed", "tokens", tokens)
	return nil
}

func (s *Server) putContextSize(w http.ResponseWriter, r *http.Request) {
	var body api.ContextSizeRequest
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	var err error
	switch {
	case body.Tokens != nil && body.Auto != nil && *body.Auto:
		err = errorf(http.StatusBadRequest, `give {"tokens": N} or {"auto": true}, not both`)
	case body.Auto != nil && *body.Auto:
		err = s.setContextSize(0)
	case body.Tokens != nil && *body.Tokens > 0:
		err = s.setContextSize(*body.Tokens)
	case body.Tokens != nil:
		err = errorf(http.StatusBadRequest, "context size %d: want a positive number of tokens", *body.Tokens)
	default:
		err = errorf(http.StatusBadRequest, `want {"tokens": N} or {"auto": true}`)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.contextSize())
}

// levelName is a guard level as the status says it.
func levelName(l gpu.Level) string {
	if l == gpu.LevelNormal {
		return "ok"
	}
	return l.String()
}

// effectiveThreshold is where trimming starts now: chat.go lowers it by
// 0.2 (not below the target) while the guard is at the compress level or
// above.
func (s *Server) effectiveThreshold(t *rewrite.Trimmer) float64 {
	if s.monitor != nil && s.monitor.Snapshot().Level >= gpu.LevelCompress {
		// Rounded: 0.8 − 0.2 is 0.6000000000000001 in floating point.
		return math.Round(max(t.Threshold()-0.2, t.Target())*1e6) / 1e6
	}
	return t.Threshold()
}

// status gathers GET /ctxproxy/status from live data.
func (s *Server) status(ctx context.Context) api.Status {
	info := s.cfg.Status
	st := api.Status{
		Version:       s.cfg.Version,
		UptimeSeconds: math.Round(time.Since(s.admin.start).Seconds()*10) / 10,
		Backend: api.BackendStatus{URL: s.backend.Redacted(), Kind: s.kind(ctx),
			Ready: s.be.Ready(ctx)},
		Strategy: api.StrategyStatus{Mode: "none"},
		Context: api.ContextStatus{MinSize: info.minSize(), MaxSize: info.maxSize(),
			KVQuantization: cmp.Or(info.KVQuantization, "f16"), NumParallel: max(info.NumParallel, 1)},
		GPU:       api.GPUStatus{Level: "ok", Devices: []api.Device{}},
		Models:    s.modelStatuses(),
		Snapshots: api.SnapshotsStatus{Store: "off"},
		Summarize: api.SummarizeStatus{Model: info.SummarizeModel, KeepRecent: info.KeepRecent},
		Inflight:  s.metrics.inflight.Load(), // the gauge ctxproxy_inflight_requests reads
	}
	if t := s.trimmer.Load(); t != nil {
		st.Strategy = api.StrategyStatus{Mode: t.Mode(), Threshold: t.Threshold(), Target: t.Target(),
			OnOverflow: t.OnOverflow(), EffectiveThreshold: s.effectiveThreshold(t)}
	}
	if s.sizer != nil {
		st.Context.Auto, st.Context.TargetSize = s.sizer.Mode()
	}
	if s.monitor != nil {
		snap := s.monitor.Snapshot()
		st.GPU.Probe, st.GPU.Level = snap.Probe, levelName(snap.Level)
		st.GPU.Total, st.GPU.Used, st.GPU.Free = snap.Total(), snap.Used(), snap.Free()
		if st.GPU.Total > 0 {
			st.GPU.Usage = float64(st.GPU.Used) / float64(st.GPU.Total)
		}
		st.GPU.GuardUsage = finite(snap.Usage())
		for _, d := range snap.Devices {
			st.GPU.Devices = append(st.GPU.Devices, api.Device(d))
		}
		if snap.Err != nil {
			st.GPU.Error = snap.Err.Error()
		}
	}
	if s.store != nil {
		st.Snapshots = api.SnapshotsStatus{Store: cmp.Or(info.SnapshotStore, snapshots.StoreFile),
			AutoThreshold: cmp.Or(info.AutoThreshold, snapshots.DefaultAutoThreshold),
			MaxCount:      cmp.Or(info.MaxCount, snapshots.DefaultMaxCount)}
		if list, err := s.store.List(ctx); err == nil {
			st.Sessions = len(list)
		} else {
			s.log.Warn("admin: listing sessions failed", "err", err)
		}
	}
	return st
}

// modelStatuses lists the models requests used, most recent first, and
// any other model calibration has learned about.
func (s *Server) modelStatuses() []api.ModelStatus {
	out := []api.ModelStatus{}
	quant, parallel := cmp.Or(s.cfg.Status.KVQuantization, "f16"), max(s.cfg.Status.NumParallel, 1)
	done := map[string]bool{}
	add := func(e seenModel) {
		m := api.ModelStatus{Name: e.name, Effective: e.effective, NumCtx: e.numCtx, Reason: e.reason, Counting: e.counting}
		if m.Counting.Method == "" {
			m.Counting.Method = "estimate"
		}
		if e.exact != nil {
			a := e.exact.Agreement()
			m.Counting.Checked, m.Counting.WorstError, m.Counting.Disagreed = a.Checked, a.WorstError, a.Off
		}
		if s.tokens != nil {
			lim := s.tokens.Limits(e.name, e.facts.ContextLength)
			m.MaxTokens, m.MaxOutputTokens = lim.MaxTokens, lim.MaxOutputTokens
			if m.Effective == 0 {
				m.Effective = lim.Effective()
			}
			c := s.tokens.Calibration(e.name)
			m.Calibration = api.CalibrationStatus{Ratio: finite(c.Ratio), Observations: c.Observations}
		}
		if e.facts.Known() {
			m.BytesPerToken = e.facts.BytesPerToken(quant, parallel)
		}
		done[e.name] = true
		out = append(out, m)
	}
	for _, e := range s.admin.seen.list() {
		add(e)
	}
	if s.tokens != nil {
		cals := s.tokens.Calibrations()
		for _, name := range slices.Sorted(maps.Keys(cals)) {
			if !done[name] {
				add(seenModel{name: name})
			}
		}
	}
	return out
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	s.flush(r.Context()) // the session count includes the last turn
	writeJSON(w, http.StatusOK, s.status(r.Context()))
}
