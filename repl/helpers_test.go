package repl

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/client"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/report"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/proxytest"
)

// These tests run the REPL and the context commands against the real
// ctxproxy server (testkit/proxytest) in front of testkit/fakebackend.

// limit is llama3.1's effective window in these tests: small, so that a
// few messages reach the 80% and 90% warnings and trimming.
const limit = 1000

// echo answers each chat with "echo: " and its last message.
func echo(body []byte) string {
	var req struct{ Messages []struct{ Content string } }
	_ = json.Unmarshal(body, &req)
	if len(req.Messages) == 0 {
		return "echo:"
	}
	return "echo: " + req.Messages[len(req.Messages)-1].Content
}

// start runs a proxy where llama3.1 has a window of limit tokens (100
// more are kept for the reply) and is loaded with 6 GiB, 5 in VRAM; the
// backend echoes unless o says otherwise, and counts 4 characters a
// token as the proxy does.
func start(t *testing.T, o proxytest.Options) *proxytest.Proxy {
	t.Helper()
	if o.Models == nil {
		o.Models = map[string]budget.Model{"llama3.1": {MaxTokens: limit + 100, MaxOutputTokens: 100}}
	}
	if o.Loaded == nil {
		o.Loaded = []modelinfo.Loaded{{Name: "llama3.1:latest", Size: 6 * proxytest.GiB, SizeVRAM: 5 * proxytest.GiB}}
	}
	if o.Backend.Reply == "" && o.Backend.ReplyFunc == nil {
		o.Backend.ReplyFunc = echo
	}
	if o.Backend.Tokenize == nil {
		// The backend counts as the proxy does, so that what fits the
		// proxy's count fits the backend's window.
		o.Backend.Tokenize = func(text string) int { return (len(text) + 3) / 4 }
	}
	return proxytest.Start(t, o)
}

// newClient is a client of p with the admin token.
func newClient(t *testing.T, p *proxytest.Proxy, token string) *client.Client {
	t.Helper()
	c, err := client.New(p.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// say sends one turn in session id as the chat does (accumulate mode)
// and returns the reply.
func say(t *testing.T, c *client.Client, id, model string, msgs ...client.Message) string {
	t.Helper()
	r, err := c.Send(context.Background(), client.Request{Dialect: client.DialectOllama, Model: model, Session: id, Messages: msgs},
		func(string, bool) {})
	if err != nil {
		t.Fatalf("turn in %s: %v", id, err)
	}
	return r.Content
}

// chatOut is what a chat printed.
type chatOut struct {
	stdout, stderr string
	// both is stdout and stderr as one stream, in the order written.
	both string
}

// chatRun is how a test chats: the settings of Chat that vary.
type chatRun struct {
	session, model, system, dialect, token, apiKey string
	url                                            string // default: the proxy's
	color, noBar                                   bool
}

// runChat runs a chat against p with script as its piped stdin.
func runChat(t *testing.T, p *proxytest.Proxy, cr chatRun, script string) chatOut {
	t.Helper()
	if cr.url == "" {
		cr.url = p.URL
	}
	if cr.dialect == "" {
		cr.dialect = client.DialectOllama
	}
	c, err := client.New(cr.url, cr.token)
	if err != nil {
		t.Fatal(err)
	}
	c.APIKey = cr.apiKey
	var out, errw, both syncBuffer
	r := &Chat{Client: c, Session: cr.session, Model: cr.model, Dialect: cr.dialect, System: cr.system, StatusBar: !cr.noBar,
		Stdin: strings.NewReader(script), Out: io.MultiWriter(&out, &both), Err: io.MultiWriter(&errw, &both),
		OutPalette: report.Palette{On: cr.color}, ErrPalette: report.Palette{On: cr.color}, Loc: time.UTC}
	// A scripted chat ends in an error exactly when it showed errors,
	// and says how many.
	err = r.Run(context.Background(), "")
	shown := len(errorLine.FindAllString(errw.String(), -1))
	if want := fmt.Sprintf("chat: %d error(s), shown above", shown); (shown == 0) != (err == nil) || err != nil && err.Error() != want {
		t.Fatalf("chat: %v (want %q)\nstdout:\n%s\nstderr:\n%s", err, want, out.String(), errw.String())
	}
	if p != nil {
		p.Flush(t)
	}
	return chatOut{stdout: out.String(), stderr: errw.String(), both: both.String()}
}

// errorLine is an error the chat shows, coloured or not.
var errorLine = regexp.MustCompile(`(?m)^(?:\x1b\[[0-9;]*m)*error: `)

// lines is script with a newline after each line.
func lines(l ...string) string { return strings.Join(l, "\n") + "\n" }

// Outputs of the real server change from run to run in their times,
// snapshot ids, the sizes of gzip'd files and the uptime; stable replaces them.
var (
	snapID    = regexp.MustCompile(`\b\d{8}-\d{6}-[0-9a-f]{6}\b`)
	shownTime = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\b`)
	jsonTime  = regexp.MustCompile(`"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})"`)
	uptime    = regexp.MustCompile(`("uptime_seconds":)[0-9.e+-]+|(, up )[0-9hms.µ]+`)
	// A snapshot's stored size (gzip'd JSON with its times) is the last
	// column of a listing.
	fileSize  = regexp.MustCompile(`(?m)  \d+(?:\.\d+)? (B|KiB|MiB)$`)
	jsonBytes = regexp.MustCompile(`"bytes":\d+`)
)

// stable normalizes out: snapshot ids become YYYYMMDD-hhmmss-snap01,
// …snap02… in the order they first appear (ids remembers them across
// calls; the width stays, so tables keep their columns), times become
// fixed text of their width, and each pair of repl is replaced.
func stable(out string, ids map[string]string, repl ...string) string {
	if ids == nil {
		ids = map[string]string{}
	}
	out = snapID.ReplaceAllStringFunc(out, func(id string) string {
		if _, ok := ids[id]; !ok {
			ids[id] = fmt.Sprintf("YYYYMMDD-hhmmss-snap%02d", len(ids)+1)
		}
		return ids[id]
	})
	out = shownTime.ReplaceAllString(out, "YYYY-MM-DD hh:mm:ss")
	out = jsonTime.ReplaceAllString(out, `"TIME"`)
	out = uptime.ReplaceAllString(out, "${1}${2}UPTIME")
	out = fileSize.ReplaceAllString(out, "  N $1")
	out = jsonBytes.ReplaceAllString(out, `"bytes":N`)
	return strings.NewReplacer(repl...).Replace(out)
}

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

// backendChats are the chat requests the backend got, as the proxy
// forwarded them.
func backendChats(p *proxytest.Proxy) []fakebackend.Request {
	var out []fakebackend.Request
	for _, r := range p.Backend.Requests() {
		if r.Path == "/api/chat" || r.Path == "/v1/chat/completions" {
			out = append(out, r)
		}
	}
	return out
}

// roles lists a chat body's messages as "role: content".
func roles(body []byte) []string {
	var req struct {
		Messages []struct{ Role, Content string }
	}
	_ = json.Unmarshal(body, &req)
	var out []string
	for _, m := range req.Messages {
		out = append(out, m.Role+": "+m.Content)
	}
	return out
}

// recorded is a request the proxy got from the chat.
type recorded struct {
	path   string
	header http.Header
	body   []byte
}

// recorder stands between the chat and the proxy and keeps what the chat
// sent.
type recorder struct {
	url string
	mu  sync.Mutex
	got []recorded
}

// record starts a recorder in front of target.
func record(t *testing.T, target string) *recorder {
	t.Helper()
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rec := &recorder{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.got = append(rec.got, recorded{path: r.URL.Path, header: r.Header.Clone(), body: body})
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	rec.url = ts.URL
	return rec
}

// chats are the chat requests the chat sent.
func (rec *recorder) chats() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []recorded
	for _, r := range rec.got {
		if r.path == "/api/chat" || r.path == "/v1/chat/completions" {
			out = append(out, r)
		}
	}
	return out
}

// turns is n messages of size characters, user and assistant in turn,
// numbered.
func turns(n, size int) []snapshots.Message {
	var out []snapshots.Message
	for i := range n {
		prefix := fmt.Sprintf("message %d ", i)
		out = append(out, snapshots.Message{Role: []string{"user", "assistant"}[i%2],
			Content: prefix + strings.Repeat("x", max(size-len(prefix), 0))})
	}
	return out
}

// converse has the client send n messages of size characters (see
// turns) in one turn of session id, as a client that keeps its own
// history would: the proxy counts and stores them with the reply.
func converse(t *testing.T, p *proxytest.Proxy, id string, n, size int) {
	t.Helper()
	var msgs []client.Message
	for _, m := range turns(n, size) {
		msgs = append(msgs, client.Message{Role: m.Role, Content: m.Content})
	}
	say(t, newClient(t, p, ""), id, "llama3.1", msgs...)
	p.Flush(t)
}
