package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// fakeProbe is a GPU with 24 GiB, 5 GiB of it in use.
type fakeProbe struct{}

func (fakeProbe) Name() string { return gpu.ProbeNVIDIA }
func (fakeProbe) Devices(context.Context) ([]gpu.Device, error) {
	return []gpu.Device{{Vendor: "nvidia", Name: "Test GPU", Total: 24 << 30, Used: 5 << 30, Free: 19 << 30}}, nil
}
func (fakeProbe) Close() error { return nil }

// adminEnv is a ctxproxy with every part (file store, writer, counting,
// trimming, sizing, a memory monitor) in front of a fake Ollama.
type adminEnv struct {
	t      *testing.T
	srv    *Server
	ts     *httptest.Server
	be     *fakebackend.Fake
	dir    string
	writer *snapshots.Writer
	token  string
}

type adminOption func(*Config, *Deps)

// tinyModel is a model with a small window, so that a few messages fill
// it: 2000 tokens, 100 kept for the reply.
const tinyModel = "tiny"

func newAdminEnv(t *testing.T, dir string, opts ...adminOption) *adminEnv {
	t.Helper()
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "Hello from the model."})
	if dir == "" {
		dir = t.TempDir()
	}
	store, err := snapshots.NewFileStore(snapshots.Config{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	writer := snapshots.NewWriter(store, snapshots.Config{Dir: dir}, nil)
	t.Cleanup(func() { _ = writer.Close(context.Background()) })
	trimmer, err := rewrite.NewTrimmer(rewrite.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mon := gpu.NewMonitor(fakeProbe{}, gpu.Config{}, gpu.MonitorOptions{})
	mon.Sample(context.Background())
	deps := Deps{
		Tokens: budget.NewRegistry(budget.Config{Encoding: tokenizer.EncodingApproximate,
			Models: map[string]budget.Model{tinyModel: {MaxTokens: 2000, MaxOutputTokens: 100}}}, nil),
		Trimmer: trimmer, Sizer: gpu.NewSizer(gpu.Config{}), Monitor: mon, Store: store, Writer: writer,
	}
	cfg := Config{Backend: be.URL, Version: "test"}
	for _, o := range opts {
		o(&cfg, &deps)
	}
	srv, err := New(cfg, deps, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &adminEnv{t: t, srv: srv, ts: ts, be: be, dir: dir, writer: writer, token: cfg.AdminToken}
}

// do sends an admin request and returns the status and body.
func (e *adminEnv) do(method, path string, body any) (int, []byte) {
	e.t.Helper()
	return e.doHeader(method, path, body, nil)
}

func (e *adminEnv) doHeader(method, path string, body any, header map[string]string) (int, []byte) {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, data
}

// json sends an admin request that must answer want, and decodes the
// answer into a map.
func (e *adminEnv) json(method, path string, body any, want int) map[string]any {
	e.t.Helper()
	status, data := e.do(method, path, body)
	if status != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, data)
	}
	var v map[string]any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &v); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return v
}

// chat sends an accumulating Ollama chat turn (not streamed) in session
// and returns the reply's text.
func (e *adminEnv) chat(session, model, text string) string {
	e.t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "stream": false,
		"messages": []any{map[string]string{"role": "user", "content": text}}})
	status, data := e.doHeader(http.MethodPost, "/api/chat", body,
		map[string]string{"X-Session-ID": session, "X-Ctxproxy-Accumulate": "1"})
	if status != http.StatusOK {
		e.t.Fatalf("chat: %d %s", status, data)
	}
	var v struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	}
	_ = json.Unmarshal(data, &v)
	return v.Message.Content
}

func sessionPath(id string) string { return "/ctxproxy/sessions/" + url.PathEscape(id) }

// fill adds n messages of about size characters to a session of the tiny
// model.
func (e *adminEnv) fill(id string, n, size int) {
	e.t.Helper()
	e.json(http.MethodPut, sessionPath(id), map[string]any{"model": tinyModel}, 200)
	var msgs []map[string]any
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": strings.Repeat("word ", size/5)})
	}
	e.json(http.MethodPost, sessionPath(id)+"/messages", map[string]any{"messages": msgs}, 200)
}

func errorOf(t *testing.T, data []byte) string {
	t.Helper()
	var v struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(data, &v); err != nil || v.Error == "" {
		t.Fatalf("not a JSON error: %s", data)
	}
	return v.Error
}

// TestAdminErrors checks each route's error answers: status and message.
func TestAdminErrors(t *testing.T) {
	e := newAdminEnv(t, "")
	e.fill("s1", 2, 20)
	snap := e.json(http.MethodPost, sessionPath("s1")+"/snapshots", nil, 201)["id"].(string)
	long := strings.Repeat("x", snapshots.MaxIDLen+1)
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		msg                string // a part of the error message
	}{
		{"unknown session", "GET", sessionPath("nope"), nil, 404, `session "nope" not found`},
		{"unknown session messages", "GET", sessionPath("nope") + "/messages", nil, 404, `session "nope" not found`},
		{"unknown session export", "GET", sessionPath("nope") + "/export", nil, 404, `session "nope" not found`},
		{"unknown session snapshots", "GET", sessionPath("nope") + "/snapshots", nil, 404, `session "nope" not found`},
		{"unknown session snapshot", "POST", sessionPath("nope") + "/snapshots", nil, 404, `session "nope" not found`},
		{"unknown session clear", "DELETE", sessionPath("nope"), nil, 404, `session "nope" not found`},
		{"unknown session purge", "DELETE", sessionPath("nope") + "?purge=1", nil, 404, `session "nope" not found`},
		{"unknown session compress", "POST", sessionPath("nope") + "/compress", nil, 404, `session "nope" not found`},
		{"id too long", "GET", sessionPath(long), nil, 400, fmt.Sprintf("more than %d", snapshots.MaxIDLen)},
		{"id not UTF-8", "GET", "/ctxproxy/sessions/%FF", nil, 400, "not valid UTF-8"},
		{"unknown snapshot", "POST", sessionPath("s1") + "/snapshots/20990101-000000-abcdef/restore", nil, 404,
			`snapshot "20990101-000000-abcdef" of session "s1" not found`},
		{"bad snapshot id", "POST", sessionPath("s1") + "/snapshots/" + url.PathEscape("../etc") + "/restore", nil, 400, "invalid id"},
		{"delete unknown snapshot", "DELETE", sessionPath("s1") + "/snapshots/20990101-000000-abcdef", nil, 404, "not found"},
		{"malformed import", "POST", sessionPath("s1") + "/import", `{"messages": [{"content": "no role"}]}`, 400,
			`malformed import: messages[0]: "role" missing`},
		{"import not JSON", "POST", sessionPath("s1") + "/import", `hello`, 400, "malformed import"},
		{"import empty", "POST", sessionPath("s1") + "/import", ``, 400, "malformed import: empty"},
		{"bad reason", "POST", sessionPath("s1") + "/snapshots", map[string]string{"reason": "whim"}, 400, `reason "whim"`},
		{"bad JSON", "PUT", sessionPath("s1"), `{"metadata":`, 400, "invalid JSON body"},
		{"no messages", "POST", sessionPath("s1") + "/messages", map[string]any{"messages": []any{}}, 400, "want {"},
		{"message without role", "POST", sessionPath("s1") + "/messages",
			map[string]any{"messages": []any{map[string]any{"content": "x"}}}, 400, `"role" is missing`},
		{"message with a role no API sends", "POST", sessionPath("s1") + "/messages",
			map[string]any{"messages": []any{map[string]any{"role": "wizard", "content": "x"}}}, 400, `messages[0]: "role" "wizard" is not one of`},
		{"import with a role no API sends", "POST", sessionPath("s1") + "/import", `[{"role":"wizard"}]`, 400,
			`malformed import: messages[0]: "role" "wizard" is not one of system, developer, user, assistant, tool`},
		{"import without content", "POST", sessionPath("s1") + "/import", `[{"role":"user"}]`, 400, `messages[0]: no "content"`},
		{"importance out of range", "POST", sessionPath("s1") + "/messages",
			map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x", "importance": 1.5}}}, 400, "not in [0, 1]"},
		{"size too small", "PUT", "/ctxproxy/context/size", map[string]int{"tokens": 10}, 400, "outside context.min_size"},
		{"size negative", "PUT", "/ctxproxy/context/size", map[string]int{"tokens": -1}, 400, "positive"},
		{"size empty", "PUT", "/ctxproxy/context/size", `{}`, 400, `want {"tokens": N} or {"auto": true}`},
		{"size both", "PUT", "/ctxproxy/context/size", `{"tokens": 4096, "auto": true}`, 400, "not both"},
		{"unknown route", "GET", "/ctxproxy/nonsense", nil, 404, "no admin route GET /ctxproxy/nonsense"},
		{"unknown session route", "GET", sessionPath("s1") + "/nonsense", nil, 404, "no admin route"},
		{"wrong method", "PATCH", sessionPath("s1"), nil, 405, "allowed methods are DELETE, GET, PUT"},
		{"wrong method on status", "POST", "/ctxproxy/status", nil, 405, "allowed methods are GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, data := e.do(tc.method, tc.path, tc.body)
			if status != tc.status {
				t.Errorf("status %d, want %d: %s", status, tc.status, data)
			}
			if msg := errorOf(t, data); !strings.Contains(msg, tc.msg) {
				t.Errorf("error %q does not say %q", msg, tc.msg)
			}
		})
	}
	// A malformed import changed nothing.
	got := e.json("GET", sessionPath("s1")+"/messages", nil, 200)["messages"].([]any)
	if len(got) != 2 {
		t.Errorf("after malformed imports: %d messages, want 2", len(got))
	}
	// The snapshot is still there after the failed restores.
	if list := e.json("GET", sessionPath("s1")+"/snapshots", nil, 200)["snapshots"].([]any); len(list) != 1 ||
		list[0].(map[string]any)["id"] != snap {
		t.Errorf("snapshots: %v", list)
	}
}

func TestAdminToken(t *testing.T) {
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.AdminToken = "s3cret" })
	for _, tc := range []struct {
		name, auth string
		status     int
		msg        string
	}{
		{"missing", "", 401, "needs Authorization: Bearer"},
		{"wrong", "Bearer nope", 401, "wrong admin token"},
		{"wrong scheme", "Basic s3cret", 401, "wrong admin token"},
		{"prefix of the token", "Bearer s3cre", 401, "wrong admin token"},
		{"right", "Bearer s3cret", 200, ""},
		{"scheme in lower case", "bearer s3cret", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/ctxproxy/status", "/ctxproxy/sessions", sessionPath("a/b"), "/ctxproxy/context/size"} {
				req, _ := http.NewRequest("GET", e.ts.URL+path, nil)
				if tc.auth != "" {
					req.Header.Set("Authorization", tc.auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if tc.status == 200 {
					if resp.StatusCode == 401 {
						t.Errorf("%s: 401 with the right token", path)
					}
					continue
				}
				if resp.StatusCode != tc.status {
					t.Errorf("%s: status %d, want %d", path, resp.StatusCode, tc.status)
				}
				if msg := errorOf(t, data); !strings.Contains(msg, tc.msg) {
					t.Errorf("%s: %q does not say %q", path, msg, tc.msg)
				}
				if g := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(g, "Bearer") {
					t.Errorf("%s: WWW-Authenticate %q", path, g)
				}
			}
		})
	}
	// Health checks need no token.
	for _, path := range []string{"/ctxproxy/healthz", "/ctxproxy/readyz"} {
		resp, err := http.Get(e.ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s without a token: %d", path, resp.StatusCode)
		}
	}
}

func TestAdminOff(t *testing.T) {
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.AdminOff = true })
	status, data := e.do("GET", "/ctxproxy/sessions", nil)
	if status != 403 || !strings.Contains(errorOf(t, data), "admin.token") {
		t.Errorf("admin off: %d %s", status, data)
	}
	if status, _ := e.do("GET", "/ctxproxy/healthz", nil); status != 200 {
		t.Errorf("healthz with the admin API off: %d", status)
	}
}

// TestAdminWithoutStore: with sessions off the session routes say so; the
// rest work.
func TestAdminWithoutStore(t *testing.T) {
	e := newAdminEnv(t, "", func(_ *Config, d *Deps) { d.Store, d.Writer = nil, nil })
	for _, path := range []string{"/ctxproxy/sessions", sessionPath("s1"), sessionPath("s1") + "/snapshots"} {
		status, data := e.do("GET", path, nil)
		if status != 503 || !strings.Contains(errorOf(t, data), "sessions are off") {
			t.Errorf("%s: %d %s", path, status, data)
		}
	}
	st := e.json("GET", "/ctxproxy/status", nil, 200)
	if st["snapshots"].(map[string]any)["store"] != "off" || st["sessions"].(float64) != 0 {
		t.Errorf("status without a store: %v", st["snapshots"])
	}
	e.json("GET", "/ctxproxy/context/size", nil, 200)
}

// TestAdminSessionIDs sends ids that need escaping through every kind of
// session route: they must arrive as sent.
func TestAdminSessionIDs(t *testing.T) {
	e := newAdminEnv(t, "")
	ids := []string{"plain", "a/b", "/", "a/../b", "x/", "with space", "ünïcødé/ß", "%41", "a?b#c", "日本語", "..", "."}
	for _, id := range ids {
		t.Run(id, func(t *testing.T) {
			p := "/ctxproxy/sessions/" + escapeID(id)
			got := e.json("PUT", p, map[string]any{"metadata": map[string]any{"id": id}}, 200)
			if got["session_id"] != id {
				t.Fatalf("PUT: session_id %q, want %q", got["session_id"], id)
			}
			e.json("POST", p+"/messages", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi " + id}}}, 200)
			if got := e.json("GET", p, nil, 200); got["session_id"] != id || got["messages"].(float64) != 1 {
				t.Errorf("GET: %v", got)
			}
			snap := e.json("POST", p+"/snapshots", nil, 201)
			if snap["session_id"] != id {
				t.Errorf("snapshot of %q: %v", id, snap)
			}
			e.json("POST", p+"/snapshots/"+url.PathEscape(snap["id"].(string))+"/restore", nil, 200)
			var exp snapshots.Export
			_, data := e.do("GET", p+"/export", nil)
			if err := json.Unmarshal(data, &exp); err != nil || exp.SessionID != id {
				t.Errorf("export: %v %s", err, data)
			}
		})
	}
	var listed []string
	for _, s := range e.json("GET", "/ctxproxy/sessions", nil, 200)["sessions"].([]any) {
		listed = append(listed, s.(map[string]any)["session_id"].(string))
	}
	if diff := cmp.Diff(len(ids), len(listed)); diff != "" {
		t.Errorf("listed %q", listed)
	}
}

// escapeID escapes a session id for a path as url.PathEscape does, and
// the dot segments "." and ".." too, which HTTP clients and servers
// otherwise resolve as directories.
func escapeID(id string) string {
	if id == "." || id == ".." {
		return strings.ReplaceAll(id, ".", "%2E")
	}
	return url.PathEscape(id)
}

// TestAdminSessionLifecycle walks the session routes in the order a user
// would, checking each answer's fields.
func TestAdminSessionLifecycle(t *testing.T) {
	e := newAdminEnv(t, "")
	id := "proj/feature-x"
	p := sessionPath(id)

	// Create with metadata, then merge (a null removes a key).
	got := e.json("PUT", p, map[string]any{"metadata": map[string]any{"agent": "augment", "ticket": 42, "tmp": 1}, "model": tinyModel}, 200)
	if got["model"] != tinyModel || got["messages"].(float64) != 0 || got["warning"] != nil {
		t.Errorf("created: %v", got)
	}
	got = e.json("PUT", p, map[string]any{"metadata": map[string]any{"phase": "review", "tmp": nil}}, 200)
	want := map[string]any{"agent": "augment", "ticket": float64(42), "phase": "review"}
	if diff := cmp.Diff(want, got["metadata"]); diff != "" {
		t.Errorf("merged metadata (-want +got):\n%s", diff)
	}
	for _, k := range []string{"session_id", "model", "created", "updated", "metadata", "stats", "messages", "snapshots"} {
		if _, ok := got[k]; !ok {
			t.Errorf("session answer lacks %q: %v", k, got)
		}
	}
	for _, k := range []string{"tokens", "limit", "usage", "sent", "num_ctx", "dropped", "summarized", "prompt_tokens",
		"completion_tokens", "requests", "truncations", "last_truncation"} {
		if _, ok := got["stats"].(map[string]any)[k]; !ok {
			t.Errorf("stats lack %q", k)
		}
	}

	// Append messages with importance and metadata (context add).
	imp := 0.9
	res := e.json("POST", p+"/messages", map[string]any{"messages": []any{
		map[string]any{"role": "system", "content": "Be brief."},
		map[string]any{"role": "user", "content": "Implement feature X", "importance": imp, "metadata": map[string]any{"kind": "task"}},
	}}, 200)
	if res["appended"].(float64) != 2 || res["messages"].(float64) != 2 {
		t.Errorf("append: %v", res)
	}
	msgs := e.json("GET", p+"/messages", nil, 200)["messages"].([]any)
	m1 := msgs[1].(map[string]any)
	if m1["importance"] != imp || m1["content"] != "Implement feature X" || m1["metadata"].(map[string]any)["kind"] != "task" {
		t.Errorf("message: %v", m1)
	}
	if _, err := time.Parse(time.RFC3339, m1["timestamp"].(string)); err != nil || !strings.HasSuffix(m1["timestamp"].(string), "Z") {
		t.Errorf("timestamp %v is not RFC 3339 UTC", m1["timestamp"])
	}
	got = e.json("GET", p, nil, 200)
	if st := got["stats"].(map[string]any); st["tokens"].(float64) == 0 || st["limit"].(float64) != 1900 {
		t.Errorf("stats after add: %v", st)
	}

	// Snapshots: create, list, restore, delete.
	s1 := e.json("POST", p+"/snapshots", map[string]string{"reason": "manual"}, 201)
	for _, k := range []string{"id", "session_id", "created", "model", "tokens", "usage", "reason", "messages", "bytes"} {
		if _, ok := s1[k]; !ok {
			t.Errorf("snapshot info lacks %q: %v", k, s1)
		}
	}
	if s1["reason"] != "manual" || s1["messages"].(float64) != 2 || s1["bytes"].(float64) == 0 {
		t.Errorf("snapshot: %v", s1)
	}
	e.json("POST", p+"/messages", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "more"}}}, 200)
	restored := e.json("POST", p+"/snapshots/"+s1["id"].(string)+"/restore", nil, 200)
	if restored["restored"] != s1["id"] || restored["messages"].(float64) != 2 || restored["undo"].(map[string]any)["reason"] != "restore" {
		t.Errorf("restore: %v", restored)
	}
	list := e.json("GET", p+"/snapshots", nil, 200)["snapshots"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["reason"] != "restore" {
		t.Errorf("snapshots newest first: %v", list)
	}
	if status, data := e.do("DELETE", p+"/snapshots/"+s1["id"].(string), nil); status != 204 || len(data) != 0 {
		t.Errorf("delete snapshot: %d %s", status, data)
	}
	if list := e.json("GET", p+"/snapshots", nil, 200)["snapshots"].([]any); len(list) != 1 {
		t.Errorf("after delete: %v", list)
	}

	// The session list.
	e.json("PUT", sessionPath("other"), nil, 200)
	sessions := e.json("GET", "/ctxproxy/sessions", nil, 200)["sessions"].([]any)
	if len(sessions) != 2 || sessions[0].(map[string]any)["session_id"] != "other" {
		t.Errorf("sessions, most recent first: %v", sessions)
	}
	for _, k := range []string{"session_id", "model", "created", "updated", "messages", "tokens", "limit", "usage", "requests", "snapshots"} {
		if _, ok := sessions[1].(map[string]any)[k]; !ok {
			t.Errorf("session info lacks %q", k)
		}
	}
	if sessions[1].(map[string]any)["snapshots"].(float64) != 1 {
		t.Errorf("session info snapshots: %v", sessions[1])
	}

	// Purge removes the session and its snapshots.
	if got := e.json("DELETE", p+"?purge=1", nil, 200); got["purged"] != true {
		t.Errorf("purge: %v", got)
	}
	e.json("GET", p, nil, 404)
	if status, _ := e.do("GET", p+"/snapshots", nil); status != 404 {
		t.Errorf("snapshots of a purged session: %d", status)
	}
}

// TestClearKeepsMetadata: DELETE clears the turns and the
// numbers and keeps the metadata; the cleared state is a snapshot.
func TestClearKeepsMetadata(t *testing.T) {
	e := newAdminEnv(t, "")
	p := sessionPath("s")
	e.json("PUT", p, map[string]any{"metadata": map[string]any{"agent": "augment"}}, 200)
	e.chat("s", "llama3.1", "first question")
	e.chat("s", "llama3.1", "second question")
	got := e.json("DELETE", p, nil, 200)
	if got["cleared"] != true || got["undo"].(map[string]any)["reason"] != "clear" || got["undo"].(map[string]any)["messages"].(float64) != 4 {
		t.Errorf("clear: %v", got)
	}
	got = e.json("GET", p, nil, 200)
	if got["messages"].(float64) != 0 || got["metadata"].(map[string]any)["agent"] != "augment" || got["stats"].(map[string]any)["tokens"].(float64) != 0 {
		t.Errorf("after clear: %v", got)
	}
	// The next prompt starts fresh.
	e.chat("s", "llama3.1", "fresh start")
	last, _ := e.be.Last("/api/chat")
	var sent struct {
		Messages []map[string]any `json:"messages"`
	}
	_ = json.Unmarshal(last.Body, &sent)
	if len(sent.Messages) != 1 || sent.Messages[0]["content"] != "fresh start" {
		t.Errorf("after clear the backend got %v", sent.Messages)
	}
}

// TestExportImportContext: an export holds every turn in the export
// format; importing it into another session gives the same turns,
// which the next prompt includes.
func TestExportImportContext(t *testing.T) {
	e := newAdminEnv(t, "")
	e.json("PUT", sessionPath("src"), map[string]any{"metadata": map[string]any{"agent": "augment"}}, 200)
	e.chat("src", "llama3.1", "remember the number 7")
	status, data := e.do("GET", sessionPath("src")+"/export", nil)
	if status != 200 {
		t.Fatalf("export: %d %s", status, data)
	}
	var exp struct {
		SessionID string           `json:"session_id"`
		Metadata  map[string]any   `json:"metadata"`
		Messages  []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(data, &exp); err != nil {
		t.Fatal(err)
	}
	if exp.SessionID != "src" || exp.Metadata["agent"] != "augment" || len(exp.Messages) != 2 ||
		exp.Messages[1]["role"] != "assistant" || exp.Messages[1]["content"] != "Hello from the model." {
		t.Errorf("export: %s", data)
	}
	for _, m := range exp.Messages {
		if ts, _ := m["timestamp"].(string); !strings.HasSuffix(ts, "Z") {
			t.Errorf("timestamp %v not UTC", m["timestamp"])
		}
	}
	// Import into a session with a conversation of its own: undo is its
	// snapshot.
	e.chat("dst", "llama3.1", "something else")
	got := e.json("POST", sessionPath("dst")+"/import", data, 200)
	if got["imported"].(float64) != 2 || got["undo"].(map[string]any)["reason"] != "import" {
		t.Errorf("import: %v", got)
	}
	got = e.json("GET", sessionPath("dst"), nil, 200)
	if got["metadata"].(map[string]any)["agent"] != "augment" || got["stats"].(map[string]any)["tokens"].(float64) == 0 {
		t.Errorf("imported session: %v", got)
	}
	e.chat("dst", "llama3.1", "what was the number?")
	last, _ := e.be.Last("/api/chat")
	if !bytes.Contains(last.Body, []byte("remember the number 7")) {
		t.Errorf("the next prompt lacks the imported turns: %s", last.Body)
	}
	// A bare array and a chat request body import too; an empty session
	// has nothing to undo.
	for name, body := range map[string]string{
		"array":        `[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]`,
		"chat request": `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
	} {
		got := e.json("POST", sessionPath("new-"+name)+"/import", body, 200)
		if got["imported"].(float64) == 0 || got["undo"] != nil {
			t.Errorf("%s: %v", name, got)
		}
	}
}

// TestAdminReadsAfterChat: a chat turn, then at once GET export: the
// admin read waits for the queued session write and shows the reply. A
// client that has read the response to its end has let the proxy see the
// backend's end, and so queue the write, first.
func TestAdminReadsAfterChat(t *testing.T) {
	e := newAdminEnv(t, "")
	for _, stream := range []bool{false, true} {
		for i := range 10 {
			id := fmt.Sprintf("s-%v-%d", stream, i)
			body, _ := json.Marshal(map[string]any{"model": "llama3.1", "stream": stream,
				"messages": []any{map[string]string{"role": "user", "content": "hello"}}})
			status, data := e.doHeader(http.MethodPost, "/api/chat", body,
				map[string]string{"X-Session-ID": id, "X-Ctxproxy-Accumulate": "1"})
			if status != 200 {
				t.Fatalf("chat: %d %s", status, data)
			}
			_, exp := e.do("GET", sessionPath(id)+"/export", nil)
			if !bytes.Contains(exp, []byte("Hello from the model.")) {
				t.Fatalf("stream %v, turn %d: export right after the turn lacks the reply:\n%s", stream, i, exp)
			}
		}
	}
}

// TestSessionsPersistAcrossRestarts: a second ctxproxy over the
// same directory shows the same sessions and snapshots.
func TestSessionsPersistAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	e1 := newAdminEnv(t, dir)
	e1.json("PUT", sessionPath("tta-feature-xyz"), map[string]any{"metadata": map[string]any{"agent": "augment"}}, 200)
	e1.chat("tta-feature-xyz", "llama3.1", "Implement feature X")
	e1.chat("a/b c", "llama3.1", "hi")
	e1.json("POST", sessionPath("tta-feature-xyz")+"/snapshots", nil, 201)
	sessions1 := e1.json("GET", "/ctxproxy/sessions", nil, 200)
	snaps1 := e1.json("GET", sessionPath("tta-feature-xyz")+"/snapshots", nil, 200)
	msgs1 := e1.json("GET", sessionPath("tta-feature-xyz")+"/messages", nil, 200)
	if err := e1.writer.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	e1.ts.Close()

	e2 := newAdminEnv(t, dir)
	if diff := cmp.Diff(sessions1, e2.json("GET", "/ctxproxy/sessions", nil, 200)); diff != "" {
		t.Errorf("sessions after restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(snaps1, e2.json("GET", sessionPath("tta-feature-xyz")+"/snapshots", nil, 200)); diff != "" {
		t.Errorf("snapshots after restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(msgs1, e2.json("GET", sessionPath("tta-feature-xyz")+"/messages", nil, 200)); diff != "" {
		t.Errorf("messages after restart (-before +after):\n%s", diff)
	}
	if got := e2.json("GET", sessionPath("tta-feature-xyz"), nil, 200); got["metadata"].(map[string]any)["agent"] != "augment" {
		t.Errorf("metadata after restart: %v", got)
	}
}

func TestAdminCompress(t *testing.T) {
	e := newAdminEnv(t, "")
	p := sessionPath("long")
	e.fill("long", 30, 200) // about 30 × 55 tokens: past the 1900-token window
	before := e.json("GET", p+"/messages", nil, 200)["messages"].([]any)
	res := e.json("POST", p+"/compress", nil, 200)
	if res["before"].(float64) <= res["after"].(float64) || res["dropped"].(float64) == 0 || res["notice"] == "" {
		t.Fatalf("compress: %v", res)
	}
	if after := res["after"].(float64); after > 0.6*1900 {
		t.Errorf("after %v tokens: above the target of 60%% of 1900", after)
	}
	if res["undo"].(map[string]any)["messages"].(float64) != 30 {
		t.Errorf("undo: %v", res["undo"])
	}
	after := e.json("GET", p+"/messages", nil, 200)["messages"].([]any)
	if len(after) >= len(before) {
		t.Errorf("%d messages after compress, %d before", len(after), len(before))
	}
	// Kept messages keep their timestamps; the last is the last.
	if diff := cmp.Diff(before[len(before)-1], after[len(after)-1]); diff != "" {
		t.Errorf("last message changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(before[0], after[0]); diff != "" {
		t.Errorf("first message changed (-before +after):\n%s", diff)
	}
	st := e.json("GET", p, nil, 200)["stats"].(map[string]any)
	if st["tokens"] != res["after"] || st["dropped"] != res["dropped"] {
		t.Errorf("stats after compress: %v", st)
	}

	// Again: it is within the target now.
	res = e.json("POST", p+"/compress", nil, 200)
	if res["dropped"].(float64) != 0 || !strings.Contains(res["notice"].(string), "Nothing to compress") || res["undo"] != nil {
		t.Errorf("second compress: %v", res)
	}

	// Without counting there is nothing to compress with.
	e2 := newAdminEnv(t, "", func(_ *Config, d *Deps) { d.Tokens = nil })
	e2.json("PUT", p, nil, 200)
	if status, data := e2.do("POST", p+"/compress", nil); status != 503 {
		t.Errorf("compress without counting: %d %s", status, data)
	}
}

func TestAdminContextSize(t *testing.T) {
	e := newAdminEnv(t, "")
	if got := e.json("GET", "/ctxproxy/context/size", nil, 200); got["auto"] != true {
		t.Errorf("default: %v", got)
	}
	got := e.json("PUT", "/ctxproxy/context/size", map[string]int{"tokens": 8192}, 200)
	if got["auto"] != false || got["target"].(float64) != 8192 {
		t.Errorf("fixed: %v", got)
	}
	st := e.json("GET", "/ctxproxy/status", nil, 200)["context"].(map[string]any)
	if st["auto"] != false || st["target_size"].(float64) != 8192 {
		t.Errorf("status after size: %v", st)
	}
	// The next request gets the fixed num_ctx.
	e.chat("s", "llama3.1", "hi")
	last, _ := e.be.Last("/api/chat")
	if !bytes.Contains(last.Body, []byte(`"num_ctx":8192`)) {
		t.Errorf("num_ctx not fixed at 8192: %s", last.Body)
	}
	got = e.json("PUT", "/ctxproxy/context/size", map[string]bool{"auto": true}, 200)
	if got["auto"] != true {
		t.Errorf("auto: %v", got)
	}
	if st := e.json("GET", "/ctxproxy/status", nil, 200)["context"].(map[string]any); st["auto"] != true {
		t.Errorf("status after auto: %v", st)
	}
}

// TestStatusFields: the status has every field of the
// contract, from live data.
func TestStatusFields(t *testing.T) {
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) {
		c.Status = admin.StatusInfo{KVQuantization: "q8_0", SummarizeModel: "llama3.2:1b", KeepRecent: 3, MaxCount: 7}
	})
	e.chat("s", "llama3.1", "hello")
	e.srv.status.Note(admin.ModelSeen{Name: "llama3.1", NumCtx: 8192, Reason: "8192 tokens fit", Limit: 7168,
		Facts: mustFacts(t), Counting: "estimate"})
	done := e.srv.metrics.track(false)
	st := e.json("GET", "/ctxproxy/status", nil, 200)
	done()
	blank := func(m map[string]any, keys ...string) {
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("status lacks %q", k)
			}
			m[k] = "…"
		}
	}
	blank(st, "uptime_seconds")
	blank(st["backend"].(map[string]any), "url")
	model := st["models"].([]any)[0].(map[string]any)
	blank(model["calibration"].(map[string]any), "ratio", "observations")
	want := map[string]any{
		"version": "test", "uptime_seconds": "…",
		"backend":  map[string]any{"url": "…", "kind": "ollama", "ready": true},
		"strategy": map[string]any{"mode": "smart", "threshold": 0.8, "target": 0.6, "on_overflow": "shrink", "effective_threshold": 0.8},
		"context": map[string]any{"auto": true, "target_size": 0.0, "min_size": 2048.0, "max_size": 131072.0,
			"kv_quantization": "q8_0", "num_parallel": 1.0},
		"gpu": map[string]any{"probe": "nvidia", "level": "ok", "total": float64(24 << 30), "used": float64(5 << 30),
			"free": float64(19 << 30), "usage": 5.0 / 24, "guard_usage": 5.0 / 24,
			"devices": []any{map[string]any{"vendor": "nvidia", "name": "Test GPU", "total": float64(24 << 30),
				"used": float64(5 << 30), "free": float64(19 << 30)}}},
		"models": []any{map[string]any{"name": "llama3.1", "max_tokens": 131072.0, "max_output_tokens": 1024.0,
			"effective": 7168.0, "num_ctx": 8192.0, "bytes_per_token": 65536.0,
			"calibration": map[string]any{"ratio": "…", "observations": "…"}, "reason": "8192 tokens fit",
			"counting": map[string]any{"method": "estimate"}}},
		"snapshots": map[string]any{"store": "file", "auto_threshold": 0.8, "max_count": 7.0},
		"summarize": map[string]any{"model": "llama3.2:1b", "keep_recent": 3.0},
		"sessions":  1.0, "inflight": 1.0,
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func mustFacts(t *testing.T) modelinfo.Facts {
	t.Helper()
	f, err := modelinfo.Parse(fakebackend.Llama31ModelInfo())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestStatusUnderMemoryPressure: the effective threshold drops while the
// guard is at the compress level, as the request path's does.
func TestStatusUnderMemoryPressure(t *testing.T) {
	mon := gpu.NewMonitor(pressedProbe{}, gpu.Config{}, gpu.MonitorOptions{})
	mon.Sample(context.Background())
	e := newAdminEnv(t, "", func(_ *Config, d *Deps) { d.Monitor = mon })
	st := e.json("GET", "/ctxproxy/status", nil, 200)
	if got := st["strategy"].(map[string]any)["effective_threshold"]; got != 0.6 {
		t.Errorf("effective threshold under pressure: %v", got)
	}
	if got := st["gpu"].(map[string]any)["level"]; got != "compress" {
		t.Errorf("level: %v", got)
	}
}

// pressedProbe is a GPU 85% used.
type pressedProbe struct{ fakeProbe }

func (pressedProbe) Devices(context.Context) ([]gpu.Device, error) {
	return []gpu.Device{{Vendor: "nvidia", Name: "Test GPU", Total: 100 << 30, Used: 85 << 30, Free: 15 << 30}}, nil
}

var updateAdmin = update // the package's -update flag

// golden compares got with testdata/admin/name, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "admin", name)
	if *updateAdmin {
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

// stable replaces what changes from run to run (times, snapshot ids).
func stable(s string) string {
	s = regexp.MustCompile(`\d{8}-\d{6}-[0-9a-f]{6}`).ReplaceAllString(s, "SNAPSHOT-ID")
	s = regexp.MustCompile(`\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC`).ReplaceAllString(s, "YYYY-MM-DD HH:MM:SS UTC")
	return s
}

// TestAdminCorruptSnapshot: a snapshot file damaged on disk is reported
// as such (and set aside), not as missing.
func TestAdminCorruptSnapshot(t *testing.T) {
	e := newAdminEnv(t, "")
	e.fill("s", 2, 20)
	snap := e.json("POST", sessionPath("s")+"/snapshots", nil, 201)["id"].(string)
	files, _ := filepath.Glob(filepath.Join(e.dir, "snapshots", "*", snap+".json.gz"))
	if len(files) != 1 {
		t.Fatalf("snapshot file of %s: %v", snap, files)
	}
	if err := os.WriteFile(files[0], []byte("not gzip at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	status, data := e.do("POST", sessionPath("s")+"/snapshots/"+snap+"/restore", nil)
	if status != 500 || !strings.Contains(errorOf(t, data), "corrupt") {
		t.Errorf("restore of a corrupt snapshot: %d %s", status, data)
	}
	// Nothing was restored or lost.
	if got := e.json("GET", sessionPath("s"), nil, 200); got["messages"].(float64) != 2 {
		t.Errorf("session after the failed restore: %v", got)
	}
}

func TestAdminCompressModeNone(t *testing.T) {
	e := newAdminEnv(t, "", func(_ *Config, d *Deps) {
		d.Trimmer, _ = rewrite.NewTrimmer(rewrite.Config{Mode: "none"}, nil)
	})
	e.fill("s", 4, 20)
	if status, data := e.do("POST", sessionPath("s")+"/compress", nil); status != 409 || !strings.Contains(errorOf(t, data), "strategy.mode is none") {
		t.Errorf("compress with mode none: %d %s", status, data)
	}
}

// TestAdminRefusesCrossSiteWrites: without admin.token the admin API
// trusts loopback, so a web page the user visits must not be able to
// change sessions with a form-like POST to it (CSRF); reads, ctxproxy's
// own status page and non-browser clients are unaffected.
func TestAdminRefusesCrossSiteWrites(t *testing.T) {
	e := newAdminEnv(t, "")
	e.chat("victim", "m", "hello")
	path := sessionPath("victim") + "/messages"
	body := `{"messages":[{"role":"user","content":"injected"}]}`
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"cross-site browser", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}, http.StatusForbidden},
		{"foreign origin", map[string]string{"Origin": "https://evil.example", "Content-Type": "text/plain"}, http.StatusForbidden},
		{"same origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"curl", nil, http.StatusOK},
	} {
		if got, data := e.doHeader(http.MethodPost, path, body, tc.header); got != tc.want {
			t.Errorf("%s: status %d, want %d: %s", tc.name, got, tc.want, data)
		}
	}
	if got, _ := e.doHeader(http.MethodGet, path, nil, map[string]string{"Sec-Fetch-Site": "cross-site"}); got != http.StatusOK {
		t.Errorf("cross-site read: status %d", got)
	}
}

// summarizeFunc is a rewrite.Summarizer from a function.
type summarizeFunc func(ctx context.Context, req rewrite.SummaryRequest) (string, error)

func (f summarizeFunc) Summarize(ctx context.Context, req rewrite.SummaryRequest) (string, error) {
	return f(ctx, req)
}

// TestAdminCompressSummarized: a compress that folds messages into a
// summary counts them as summarized, not also as dropped (the chat path's
// headers count them the same way), in its answer and in the stats.
func TestAdminCompressSummarized(t *testing.T) {
	e := newAdminEnv(t, "", func(_ *Config, d *Deps) {
		c := rewrite.NewCompactor(rewrite.SummarizeConfig{KeepRecent: 2, MinMessages: 2, Wait: time.Minute},
			summarizeFunc(func(context.Context, rewrite.SummaryRequest) (string, error) {
				return "The user and the assistant talked about numbers.", nil
			}), rewrite.CompactorOptions{})
		tr, err := rewrite.NewTrimmer(rewrite.Config{Mode: "summarize"}, nil, c.Summarize(), c.Hybrid())
		if err != nil {
			t.Fatal(err)
		}
		d.Trimmer = tr
	})
	p := sessionPath("folded")
	e.fill("folded", 30, 200)
	res := e.json("POST", p+"/compress", nil, 200)
	summarized, dropped := res["summarized"].(float64), res["dropped"].(float64)
	if summarized == 0 {
		t.Fatalf("compress with mode summarize summarized nothing: %v", res)
	}
	after := e.json("GET", p+"/messages", nil, 200)["messages"].([]any)
	// Every message of the 30 is kept, summarized or dropped, once; the
	// summary itself is one message more.
	if kept := float64(len(after)) - 1; kept+summarized+dropped != 30 {
		t.Errorf("%v kept + %v summarized + %v dropped ≠ 30: %v", kept, summarized, dropped, res)
	}
	// The summarizer's text is what replaced them: a system message at
	// the start, one summary per batch of folded iterations (up to 8).
	first, _ := after[0].(map[string]any)
	if n := strings.Count(fmt.Sprint(first["content"]), "talked about numbers"); first["role"] != "system" ||
		n == 0 || n < int(summarized)/2/8 || n > int(summarized)/2 {
		t.Errorf("the history does not start with the summaries of the %v folded messages: %v", summarized, first)
	}
	st := e.json("GET", p, nil, 200)["stats"].(map[string]any)
	if st["dropped"] != res["dropped"] || st["summarized"] != res["summarized"] {
		t.Errorf("stats %v disagree with the answer %v", st, res)
	}
}
