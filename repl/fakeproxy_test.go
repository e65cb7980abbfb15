package repl

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/internal/fakebackend"
)

// fakeProxy plays a running ctxproxy for the terminal commands' tests: the
// admin API as ADMIN_API.md lays it out, and the chat routes in accumulate
// mode with their X-Ctxproxy-* answer headers, in front of
// internal/fakebackend. It counts tokens as seed 000 does (4 characters a
// token), warns at 80% and 90% of its limit with seed 000's texts, and
// trims to the first 2 and last 10 messages past 100%.
type fakeProxy struct {
	*httptest.Server
	backend *fakebackend.Fake

	mu sync.Mutex
	// token, when set, is the admin token every admin route wants.
	token string
	// limit is every session's effective limit in tokens.
	limit int
	// backendOpts shape the backend's answers; Reply defaults to an echo.
	backendOpts fakebackend.Options
	now         time.Time
	sessions    map[string]*fakeSession
	sizeAuto    bool
	sizeTarget  int
	nextSnap    int
	// chats are the chat requests received, as sent.
	chats []fakeChat
}

type fakeChat struct {
	path     string
	header   http.Header
	messages []fakeMessage
}

type fakeSession struct {
	id, model        string
	created, updated time.Time
	metadata         map[string]any
	messages         []fakeMessage
	snapshots        []*fakeSnapshot // oldest first
	requests         int
	sent             int
	dropped          int
	promptTokens     int
	completionTokens int
}

type fakeMessage struct {
	Role       string         `json:"role"`
	Content    string         `json:"content"`
	Timestamp  time.Time      `json:"timestamp"`
	Importance *float64       `json:"importance,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
}

type fakeSnapshot struct {
	info     api.SnapshotInfo
	messages []fakeMessage
}

func newFakeProxy(t *testing.T) *fakeProxy {
	t.Helper()
	f := &fakeProxy{
		backend:  fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{}),
		limit:    1000,
		now:      time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
		sessions: map[string]*fakeSession{},
		sizeAuto: true,
	}
	mux := http.NewServeMux()
	admin := func(pattern string, h func(w http.ResponseWriter, r *http.Request)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
				fakeError(w, http.StatusUnauthorized, "admin token required")
				return
			}
			h(w, r)
		})
	}
	admin("GET /ctxproxy/status", f.getStatus)
	admin("GET /ctxproxy/sessions", f.listSessions)
	admin("GET /ctxproxy/sessions/{id}", f.getSession)
	admin("PUT /ctxproxy/sessions/{id}", f.putSession)
	admin("DELETE /ctxproxy/sessions/{id}", f.deleteSession)
	admin("POST /ctxproxy/sessions/{id}/messages", f.addMessages)
	admin("GET /ctxproxy/sessions/{id}/export", f.export)
	admin("POST /ctxproxy/sessions/{id}/import", f.importSession)
	admin("GET /ctxproxy/sessions/{id}/snapshots", f.listSnapshots)
	admin("POST /ctxproxy/sessions/{id}/snapshots", f.createSnapshot)
	admin("POST /ctxproxy/sessions/{id}/snapshots/{snap}/restore", f.restore)
	admin("POST /ctxproxy/sessions/{id}/compress", f.compress)
	admin("GET /ctxproxy/context/size", f.getSize)
	admin("PUT /ctxproxy/context/size", f.putSize)
	mux.HandleFunc("POST /api/chat", f.chat)
	mux.HandleFunc("POST /v1/chat/completions", f.chat)
	mux.HandleFunc("GET /api/ps", func(w http.ResponseWriter, r *http.Request) {
		fakeJSON(w, 200, map[string]any{"models": []any{map[string]any{
			"name": "llama3.1:latest", "model": "llama3.1:latest", "size": 6 << 30, "size_vram": 5 << 30}}})
	})
	mux.Handle("/", f.backend)
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func fakeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fakeError(w http.ResponseWriter, status int, msg string) {
	fakeJSON(w, status, map[string]string{"error": msg})
}

// tick is the fake clock: a second passes with each change.
func (f *fakeProxy) tick() time.Time {
	f.now = f.now.Add(time.Second)
	return f.now
}

// fakeTokens counts as seed 000 does: 4 characters a token, rounded up.
func fakeTokens(msgs []fakeMessage) int {
	n := 0
	for _, m := range msgs {
		n += (len(m.Content) + 3) / 4
	}
	return n
}

// session returns a session, creating it when create is set.
func (f *fakeProxy) session(id string, create bool) *fakeSession {
	s := f.sessions[id]
	if s == nil && create {
		now := f.tick()
		s = &fakeSession{id: id, created: now, updated: now, metadata: map[string]any{}}
		f.sessions[id] = s
	}
	return s
}

// seed fills a session with n alternating user and assistant messages of
// size characters each.
func (f *fakeProxy) seed(id string, n, size int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.session(id, true)
	s.model = "llama3.1"
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		prefix := fmt.Sprintf("message %d ", len(s.messages))
		s.messages = append(s.messages, fakeMessage{Role: role, Timestamp: f.tick(),
			Content: prefix + strings.Repeat("x", max(size-len(prefix), 0))})
	}
	s.updated = f.now
	s.requests, s.sent = len(s.messages)/2, fakeTokens(s.messages)
	s.promptTokens, s.completionTokens = s.sent*2, s.sent/2
}

// snapshotNow snapshots a session as it is.
func (f *fakeProxy) snapshotNow(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snap(f.sessions[id], "manual")
}

// stored returns a copy of a session's messages.
func (f *fakeProxy) stored(id string) []fakeMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.sessions[id]; s != nil {
		return slices.Clone(s.messages)
	}
	return nil
}

func (f *fakeProxy) chatLog() []fakeChat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.chats)
}

func (f *fakeProxy) setBackend(o fakebackend.Options) {
	f.mu.Lock()
	f.backendOpts = o
	f.mu.Unlock()
}

func (f *fakeProxy) info(s *fakeSession) map[string]any {
	tokens := fakeTokens(s.messages)
	return map[string]any{"session_id": s.id, "model": s.model, "created": s.created, "updated": s.updated,
		"messages": len(s.messages), "tokens": tokens, "limit": f.limit,
		"usage": float64(tokens) / float64(f.limit), "requests": s.requests, "snapshots": len(s.snapshots)}
}

func (f *fakeProxy) detail(s *fakeSession) map[string]any {
	tokens := fakeTokens(s.messages)
	usage := float64(tokens) / float64(f.limit)
	d := map[string]any{"session_id": s.id, "model": s.model, "created": s.created, "updated": s.updated,
		"metadata": s.metadata, "messages": len(s.messages), "snapshots": len(s.snapshots),
		"stats": map[string]any{"tokens": tokens, "limit": f.limit, "usage": usage, "sent": s.sent,
			"num_ctx": 8192, "dropped": s.dropped, "summarized": 0, "prompt_tokens": s.promptTokens,
			"completion_tokens": s.completionTokens, "requests": s.requests, "truncations": 0,
			"last_truncation": nil}}
	if w := seedWarning(usage); w != "" {
		d["warning"] = w
	}
	return d
}

// seedWarning is seed 000's warning for a usage.
func seedWarning(usage float64) string {
	switch {
	case usage >= 0.9:
		return "Context at 90% capacity. Auto-trimming soon."
	case usage >= 0.8:
		return "Context at 80% capacity. Consider /clear or /save."
	}
	return ""
}

func (f *fakeProxy) getStatus(w http.ResponseWriter, r *http.Request) {
	const gib = 1 << 30
	used, total := int64(51*gib/10), int64(24*gib)
	fakeJSON(w, 200, map[string]any{
		"version": "test", "uptime_seconds": 3723.4,
		"backend":  map[string]any{"url": "http://127.0.0.1:11434", "kind": "ollama", "ready": true},
		"strategy": map[string]any{"mode": "smart", "threshold": 0.8, "target": 0.6, "on_overflow": "shrink", "effective_threshold": 0.8},
		"context": map[string]any{"auto": f.sizeAuto, "target_size": f.sizeTarget, "min_size": 2048, "max_size": 131072,
			"kv_quantization": "f16", "num_parallel": 1},
		"gpu": map[string]any{"probe": "nvidia", "level": "ok", "total": total, "used": used, "free": total - used,
			"usage": float64(used) / float64(total), "devices": []any{map[string]any{"vendor": "nvidia",
				"name": "NVIDIA GeForce RTX 4090", "total": total, "used": used, "free": total - used}}},
		"models": []any{map[string]any{"name": "llama3.1", "max_tokens": 131072, "max_output_tokens": 4096,
			"effective": f.limit, "num_ctx": 8192, "bytes_per_token": 131072,
			"calibration": map[string]any{"ratio": 1.08, "observations": 14}, "reason": "8192 tokens fit in free VRAM"}},
		"snapshots": map[string]any{"store": "file", "auto_threshold": 0.8, "max_count": 20},
		"summarize": map[string]any{"model": "", "keep_recent": 3},
		"sessions":  len(f.sessions), "inflight": 0,
	})
}

func (f *fakeProxy) listSessions(w http.ResponseWriter, r *http.Request) {
	var all []*fakeSession
	for _, s := range f.sessions {
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b *fakeSession) int { return b.updated.Compare(a.updated) })
	list := []any{}
	for _, s := range all {
		list = append(list, f.info(s))
	}
	fakeJSON(w, 200, map[string]any{"sessions": list})
}

// found returns the session of the path, or answers 404.
func (f *fakeProxy) found(w http.ResponseWriter, r *http.Request) *fakeSession {
	id := r.PathValue("id")
	s := f.sessions[id]
	if s == nil {
		fakeError(w, http.StatusNotFound, fmt.Sprintf("session %q not found", id))
	}
	return s
}

func (f *fakeProxy) getSession(w http.ResponseWriter, r *http.Request) {
	if s := f.found(w, r); s != nil {
		fakeJSON(w, 200, f.detail(s))
	}
}

func (f *fakeProxy) putSession(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Metadata map[string]any `json:"metadata"`
		Model    string         `json:"model"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		fakeError(w, 400, "invalid session body: "+err.Error())
		return
	}
	s := f.session(r.PathValue("id"), true)
	for k, v := range body.Metadata {
		s.metadata[k] = v
	}
	if body.Model != "" {
		s.model = body.Model
	}
	s.updated = f.tick()
	fakeJSON(w, 200, f.detail(s))
}

// snap snapshots a session.
func (f *fakeProxy) snap(s *fakeSession, reason string) *fakeSnapshot {
	f.nextSnap++
	data, _ := json.Marshal(s.messages)
	tokens := fakeTokens(s.messages)
	sn := &fakeSnapshot{messages: slices.Clone(s.messages), info: api.SnapshotInfo{
		ID: fmt.Sprintf("snap-%d", f.nextSnap), SessionID: s.id, Created: f.tick(), Model: s.model, Tokens: tokens,
		Usage: float64(tokens) / float64(f.limit), Reason: reason, Messages: len(s.messages), Bytes: len(data)}}
	s.snapshots = append(s.snapshots, sn)
	return sn
}

func (f *fakeProxy) deleteSession(w http.ResponseWriter, r *http.Request) {
	s := f.found(w, r)
	if s == nil {
		return
	}
	if r.URL.Query().Get("purge") == "1" {
		delete(f.sessions, s.id)
		fakeJSON(w, 200, map[string]any{"purged": true})
		return
	}
	f.snap(s, "clear")
	s.messages, s.requests, s.sent, s.dropped, s.promptTokens, s.completionTokens = nil, 0, 0, 0, 0, 0
	s.updated = f.tick()
	fakeJSON(w, 200, map[string]any{"cleared": true})
}

func (f *fakeProxy) addMessages(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []fakeMessage `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Messages) == 0 {
		fakeError(w, 400, "want {\"messages\": [...]}")
		return
	}
	for _, m := range body.Messages {
		if m.Role == "" || (m.Importance != nil && (*m.Importance < 0 || *m.Importance > 1)) {
			fakeError(w, 400, "a message needs a role and an importance from 0 to 1")
			return
		}
	}
	s := f.session(r.PathValue("id"), true)
	for _, m := range body.Messages {
		m.Timestamp = f.tick()
		s.messages = append(s.messages, m)
	}
	s.updated = f.now
	fakeJSON(w, 200, map[string]any{"appended": len(body.Messages), "messages": len(s.messages)})
}

func (f *fakeProxy) export(w http.ResponseWriter, r *http.Request) {
	if s := f.found(w, r); s != nil {
		msgs := s.messages
		if msgs == nil {
			msgs = []fakeMessage{}
		}
		fakeJSON(w, 200, map[string]any{"session_id": s.id, "messages": msgs, "metadata": s.metadata})
	}
}

func (f *fakeProxy) importSession(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	var msgs []fakeMessage
	var obj struct {
		Messages []fakeMessage `json:"messages"`
	}
	switch {
	case json.Unmarshal(data, &msgs) == nil:
	case json.Unmarshal(data, &obj) == nil && obj.Messages != nil:
		msgs = obj.Messages
	default:
		fakeError(w, 400, "import: want an export, an array of messages or a chat request")
		return
	}
	for _, m := range msgs {
		if m.Role == "" {
			fakeError(w, 400, "import: a message without a role")
			return
		}
	}
	s := f.session(r.PathValue("id"), true)
	var undo any
	if len(s.messages) > 0 {
		undo = f.snap(s, "import").info
	}
	s.messages = msgs
	s.updated = f.tick()
	fakeJSON(w, 200, map[string]any{"imported": len(msgs), "undo": undo})
}

func (f *fakeProxy) listSnapshots(w http.ResponseWriter, r *http.Request) {
	if s := f.found(w, r); s != nil {
		list := []api.SnapshotInfo{}
		for _, sn := range slices.Backward(s.snapshots) {
			list = append(list, sn.info)
		}
		fakeJSON(w, 200, map[string]any{"snapshots": list})
	}
}

func (f *fakeProxy) createSnapshot(w http.ResponseWriter, r *http.Request) {
	s := f.found(w, r)
	if s == nil {
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	if body.Reason == "" {
		body.Reason = "manual"
	}
	fakeJSON(w, http.StatusCreated, f.snap(s, body.Reason).info)
}

func (f *fakeProxy) restore(w http.ResponseWriter, r *http.Request) {
	s := f.found(w, r)
	if s == nil {
		return
	}
	id := r.PathValue("snap")
	i := slices.IndexFunc(s.snapshots, func(sn *fakeSnapshot) bool { return sn.info.ID == id })
	if i < 0 {
		fakeError(w, http.StatusNotFound, fmt.Sprintf("snapshot %q not found", id))
		return
	}
	target := s.snapshots[i]
	undo := f.snap(s, "restore")
	s.messages = slices.Clone(target.messages)
	s.updated = f.tick()
	fakeJSON(w, 200, map[string]any{"restored": id, "messages": len(s.messages), "undo": undo.info})
}

// compress keeps the first 2 and the last 2 messages.
func (f *fakeProxy) compress(w http.ResponseWriter, r *http.Request) {
	s := f.found(w, r)
	if s == nil {
		return
	}
	before, dropped := fakeTokens(s.messages), 0
	if n := len(s.messages); n > 4 {
		dropped = n - 4
		s.messages = append(slices.Clone(s.messages[:2]), s.messages[n-2:]...)
		s.dropped += dropped
	}
	s.updated = f.tick()
	res := map[string]any{"before": before, "after": fakeTokens(s.messages), "dropped": dropped, "summarized": 0}
	if dropped > 0 {
		res["notice"] = "Context trimmed. Kept first 2 and last 2 turns."
	}
	fakeJSON(w, 200, res)
}

func (f *fakeProxy) getSize(w http.ResponseWriter, r *http.Request) {
	target := f.sizeTarget
	if f.sizeAuto {
		target = 8192
	}
	fakeJSON(w, 200, map[string]any{"auto": f.sizeAuto, "target": target})
}

func (f *fakeProxy) putSize(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Tokens int  `json:"tokens"`
		Auto   bool `json:"auto"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || (!body.Auto && body.Tokens < 256) {
		fakeError(w, 400, "want {\"tokens\": N} with N at least 256, or {\"auto\": true}")
		return
	}
	f.sizeAuto, f.sizeTarget = body.Auto, body.Tokens
	f.getSize(w, r)
}

// chat is accumulate mode: the stored history goes before the new
// messages, and the reply is stored after the answer.
func (f *fakeProxy) chat(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	var parsed struct {
		Model    string        `json:"model"`
		Messages []fakeMessage `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(body, &parsed) != nil {
		fakeError(w, 400, "invalid chat request")
		return
	}
	f.mu.Lock()
	f.chats = append(f.chats, fakeChat{path: r.URL.Path, header: r.Header.Clone(), messages: parsed.Messages})
	id := r.Header.Get("X-Session-ID")
	if id == "" || r.Header.Get("X-Ctxproxy-Accumulate") != "1" {
		f.mu.Unlock()
		fakeError(w, 400, "the fake proxy wants X-Session-ID and X-Ctxproxy-Accumulate: 1")
		return
	}
	s := f.session(id, true)
	s.model = parsed.Model
	for i := range parsed.Messages {
		parsed.Messages[i].Timestamp = f.tick()
	}
	all := append(slices.Clone(s.messages), parsed.Messages...)
	before := fakeTokens(all)
	usage := float64(before) / float64(f.limit)
	h := w.Header()
	if warning := seedWarning(usage); warning != "" {
		h.Set("X-Ctxproxy-Warning", warning)
	}
	dropped := 0
	if usage >= 1 && len(all) > 12 {
		dropped = len(all) - 12
		all = append(all[:2:2], all[len(all)-10:]...)
		h.Set("X-Ctxproxy-Notice", "Context trimmed. Kept first 2 and last 10 turns.")
	}
	after := fakeTokens(all)
	h.Set("X-Ctxproxy-Session", id)
	h.Set("X-Ctxproxy-Tokens", fmt.Sprint(after))
	h.Set("X-Ctxproxy-Tokens-Before", fmt.Sprint(before))
	h.Set("X-Ctxproxy-Limit", fmt.Sprint(f.limit))
	h.Set("X-Ctxproxy-Usage", fmt.Sprintf("%.1f", 100*float64(after)/float64(f.limit)))
	h.Set("X-Ctxproxy-Dropped", fmt.Sprint(dropped))
	h.Set("X-Ctxproxy-Summarized", "0")
	h.Set("X-Ctxproxy-Num-Ctx", "8192")
	o := f.backendOpts
	if o.Reply == "" {
		o.Reply = "echo: " + parsed.Messages[len(parsed.Messages)-1].Content
	}
	f.backend.SetOptions(o)
	req["messages"] = all
	out, _ := json.Marshal(req)
	f.mu.Unlock()

	r2 := r.Clone(r.Context())
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(out)), int64(len(out))
	rec := &statusRecorder{ResponseWriter: w, status: 200}
	f.backend.ServeHTTP(rec, r2)
	select {
	case <-f.backend.Cancelled():
		return // the client hung up: no reply to keep
	default:
	}
	if rec.status != 200 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := fakeMessage{Role: "assistant", Content: o.Reply, Timestamp: f.tick()}
	s.messages = append(all, reply)
	s.requests++
	s.sent, s.dropped = after, s.dropped+dropped
	s.promptTokens += after
	s.completionTokens += fakeTokens([]fakeMessage{reply})
	s.updated = f.now
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() { s.ResponseWriter.(http.Flusher).Flush() }

// Golden files.

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}
