package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

var update = flag.Bool("update", false, "rewrite golden files")

// newProxy starts ctxproxy in front of backendURL.
func newProxy(t *testing.T, backendURL string, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	cfg.Backend = backendURL
	s, err := New(cfg, Deps{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, url string, body []byte, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestForwardedBodies sends each testdata request through the proxy and
// compares what the backend received with the golden file: byte-identical
// to the input unless ctxproxy had something to remove.
func TestForwardedBodies(t *testing.T) {
	files, _ := filepath.Glob("testdata/requests/*.json")
	if len(files) == 0 {
		t.Fatal("no testdata")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			kind, path := fakebackend.Ollama, "/api/chat"
			if strings.HasPrefix(name, "openai") {
				kind, path = fakebackend.OpenAI, "/v1/chat/completions"
			}
			// A model that thinks: one request turns thinking on.
			be := fakebackend.New(t, kind, fakebackend.Options{Capabilities: []string{"completion", "tools", "thinking"}})
			_, px := newProxy(t, be.URL, Config{})
			resp := post(t, px.URL+path, in, map[string]string{"X-Session-ID": "golden"})
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			got, ok := be.Last(path)
			if !ok {
				t.Fatal("backend got nothing")
			}
			golden := filepath.Join("testdata", "forwarded", name+".json")
			if *update {
				os.MkdirAll(filepath.Dir(golden), 0o755)
				if err := os.WriteFile(golden, got.Body, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if diff := cmp.Diff(string(want), string(got.Body)); diff != "" {
				t.Errorf("forwarded body differs from %s (-want +got):\n%s", golden, diff)
			}
			if !strings.Contains(name, "annotations") && !bytes.Equal(got.Body, in) {
				t.Errorf("a request without annotations must be forwarded byte for byte")
			}
			if bytes.Contains(got.Body, []byte("_preserve")) || bytes.Contains(got.Body, []byte("_importance")) {
				t.Errorf("annotations reached the backend: %s", got.Body)
			}
		})
	}
}

func TestHeadersAndQuery(t *testing.T) {
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{})
	req, _ := http.NewRequest(http.MethodPost, px.URL+"/v1/chat/completions?api-version=2024-02-01&x=1",
		strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-test-123")
	req.Header.Set("OpenAI-Organization", "org-1")
	req.Header.Set("X-Session-ID", "s1")
	req.Header.Set("X-Ctxproxy-Strategy", "smart")
	req.Header.Set("X-Forwarded-For", "10.1.2.3")
	req.Header.Set("Connection", "keep-alive, X-Hop")
	req.Header.Set("X-Hop", "secret")
	req.Header.Set("Keep-Alive", "timeout=5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if g, w := resp.Header.Get("X-Ctxproxy-Session"), "s1"; g != w {
		t.Errorf("X-Ctxproxy-Session = %q, want %q", g, w)
	}
	got, _ := be.Last("/v1/chat/completions")
	if g, w := got.RawQuery, "api-version=2024-02-01&x=1"; g != w {
		t.Errorf("query = %q, want %q", g, w)
	}
	h := got.Header
	for k, want := range map[string]string{
		"Authorization":       "Bearer sk-test-123",
		"Openai-Organization": "org-1",
		"X-Forwarded-Proto":   "http",
		"X-Session-Id":        "",
		"X-Ctxproxy-Strategy": "",
		"X-Hop":               "",
		"Keep-Alive":          "",
	} {
		if g := h.Get(k); g != want {
			t.Errorf("backend header %s = %q, want %q", k, g, want)
		}
	}
	if g := h.Get("X-Forwarded-For"); !strings.HasPrefix(g, "10.1.2.3, 127.0.0.1") {
		t.Errorf("X-Forwarded-For = %q, want the client's chain plus this hop", g)
	}
	if g := h.Get("X-Forwarded-Host"); g != strings.TrimPrefix(px.URL, "http://") {
		t.Errorf("X-Forwarded-Host = %q", g)
	}
}

func TestPassthroughRoutes(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{})
	for _, path := range []string{"/api/tags", "/api/version", "/"} {
		resp, err := http.Get(px.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, resp.Body)
		resp.Body.Close()
		direct, _ := http.Get(be.URL + path)
		want := readAll(t, direct.Body)
		direct.Body.Close()
		if got != want || resp.StatusCode != direct.StatusCode {
			t.Errorf("%s: got %d %q, want %d %q", path, resp.StatusCode, got, direct.StatusCode, want)
		}
	}
	// A non-chat POST with a body larger than max_body is not limited:
	// model uploads pass through.
	_, px2 := newProxy(t, be.URL, Config{MaxBody: 10})
	resp := post(t, px2.URL+"/api/show", []byte(`{"model":"llama3.1:8b"}`), nil)
	if resp.StatusCode != 200 {
		t.Errorf("/api/show through a small max_body: %d", resp.StatusCode)
	}
}

func TestSessionID(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	body := []byte(`{"model":"m","stream":false,"messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}`)
	other := []byte(`{"model":"m","stream":false,"messages":[{"role":"system","content":"S"},{"role":"user","content":"V"}]}`)
	_, px := newProxy(t, be.URL, Config{})
	a := post(t, px.URL+"/api/chat", body, nil).Header.Get("X-Ctxproxy-Session")
	b := post(t, px.URL+"/api/chat", body, nil).Header.Get("X-Ctxproxy-Session")
	c := post(t, px.URL+"/api/chat", other, nil).Header.Get("X-Ctxproxy-Session")
	if a == "" || a != b || a == c || !strings.HasPrefix(a, "fp-") {
		t.Errorf("fingerprints: %q %q %q: want equal for the same conversation, different otherwise", a, b, c)
	}
	odd := "ünï/../cødé  \"quoted\" ✓"
	if g := post(t, px.URL+"/api/chat", body, map[string]string{"X-Session-ID": odd}).Header.Get("X-Ctxproxy-Session"); g != odd {
		t.Errorf("odd session id came back as %q", g)
	}
	resp := post(t, px.URL+"/api/chat", body, map[string]string{"X-Session-ID": strings.Repeat("x", 300)})
	if resp.StatusCode != 400 || !strings.Contains(readAll(t, resp.Body), "more than 256") {
		t.Errorf("overlong session id: status %d", resp.StatusCode)
	}

	_, nofp := newProxy(t, be.URL, Config{NoFingerprint: true, SessionHeader: "X-Conversation"})
	if g := post(t, nofp.URL+"/api/chat", body, nil).Header.Get("X-Ctxproxy-Session"); g != "" {
		t.Errorf("fingerprint off: session %q", g)
	}
	if g := post(t, nofp.URL+"/api/chat", body, map[string]string{"X-Conversation": "c9"}).Header.Get("X-Ctxproxy-Session"); g != "c9" {
		t.Errorf("custom header: session %q", g)
	}
	if got, _ := be.Last("/api/chat"); got.Header.Get("X-Conversation") != "" {
		t.Errorf("custom session header reached the backend")
	}
}

func TestBypass(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{})
	in := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"x","_preserve":true}]}`)
	resp := post(t, px.URL+"/api/chat", in, map[string]string{"X-Ctxproxy-Bypass": "1"})
	io.Copy(io.Discard, resp.Body)
	got, _ := be.Last("/api/chat")
	if !bytes.Equal(got.Body, in) {
		t.Errorf("bypass changed the body: %s", got.Body)
	}
	if resp.Header.Get("X-Ctxproxy-Session") != "" || got.Header.Get("X-Ctxproxy-Bypass") != "" {
		t.Errorf("bypass: ctxproxy headers leaked")
	}
}

func TestUnparsableForwardedAndCounted(t *testing.T) {
	cases := []struct{ name, path, body string }{
		{"truncated json", "/api/chat", `{"model":"m","messages":[{"role":"user"`},
		{"messages not an array", "/v1/chat/completions", `{"model":"m","messages":"hi"}`},
		{"content a number", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":5}]}`},
		{"no role", "/api/chat", `{"model":"m","messages":[{"content":"x"}]}`},
		{"not json", "/api/chat", `hello`},
		{"empty", "/api/chat", ``},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
			s, px := newProxy(t, be.URL, Config{})
			resp := post(t, px.URL+tc.path, []byte(tc.body), nil)
			io.Copy(io.Discard, resp.Body)
			got, ok := be.Last(tc.path)
			if !ok || string(got.Body) != tc.body {
				t.Fatalf("backend got %q, want the body unchanged", got.Body)
			}
			d := wire.DialectOf(tc.path).String()
			if n := testutil.ToFloat64(s.metrics.unparsable.WithLabelValues(d)); n != 1 {
				t.Errorf("unparsable counter = %v, want 1", n)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{MaxBody: 1024})
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 4096) + `"}]}`
	for _, tc := range []struct {
		name    string
		path    string
		chunked bool
		want    string
	}{
		{"ollama content-length", "/api/chat", false, `{"error":"request body is larger than the 1024 bytes ctxproxy accepts (max_body)"}`},
		{"openai chunked", "/v1/chat/completions", true, `"code":null,"message":"request body is larger`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(big)
			if tc.chunked {
				body = io.MultiReader(strings.NewReader(big)) // unknown length: sent chunked
			}
			req, _ := http.NewRequest(http.MethodPost, px.URL+tc.path, body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(got, tc.want) {
				t.Errorf("got %d %s", resp.StatusCode, got)
			}
		})
	}
	if _, ok := be.Last("/api/chat"); ok {
		t.Errorf("an oversized body reached the backend")
	}
}

func TestDeepJSONRejected(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{})
	deep := `{"model":"m","messages":[{"role":"user","content":"x","x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}]}`
	resp := post(t, px.URL+"/api/chat", []byte(deep), nil)
	got := readAll(t, resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(got, "nests deeper than 256") {
		t.Errorf("got %d %s", resp.StatusCode, got)
	}
}

func TestBackendDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	_, px := newProxy(t, dead, Config{})
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for _, tc := range []struct {
		path string
		want any
	}{
		{"/api/chat", map[string]any{"error": "ctxproxy could not reach the backend at " + dead}},
		{"/v1/chat/completions", map[string]any{"error": map[string]any{"message": "ctxproxy could not reach the backend at " + dead,
			"type": "server_error", "param": nil, "code": nil}}},
		{"/api/tags", map[string]any{"error": "ctxproxy could not reach the backend at " + dead}},
	} {
		resp := post(t, px.URL+tc.path, body, nil)
		var got any
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: status %d, want 502", tc.path, resp.StatusCode)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: error body (-want +got):\n%s", tc.path, diff)
		}
	}
	// readyz says so.
	resp, _ := http.Get(px.URL + "/ctxproxy/readyz")
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("readyz with the backend down: %d", resp.StatusCode)
	}
}

func TestBackendStallsBeforeHeaders(t *testing.T) {
	stall := make(chan struct{})
	defer close(stall)
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{Stall: stall})
	_, px := newProxy(t, be.URL, Config{ResponseHeaderTimeout: 150 * time.Millisecond})
	resp := post(t, px.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
	got := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(got, "response_header_timeout") ||
		!strings.Contains(got, `"type":"server_error"`) {
		t.Errorf("got %d %s", resp.StatusCode, got)
	}
}

// TestStreamNotBuffered proves each chunk reaches the client before the
// backend sends the next: the client reads chunk 1 while the backend still
// holds chunk 2.
func TestStreamNotBuffered(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		kind       fakebackend.Kind
		body       string
	}{
		{"ollama ndjson", "/api/chat", fakebackend.Ollama, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"openai sse", "/v1/chat/completions", fakebackend.OpenAI, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hold := make(chan struct{})
			be := fakebackend.New(t, tc.kind, fakebackend.Options{Hold: hold, Reply: "abcdef", Chunks: 3})
			_, px := newProxy(t, be.URL, Config{})
			resp := post(t, px.URL+tc.path, []byte(tc.body), nil)
			br := bufio.NewReader(resp.Body)
			first := make(chan string, 1)
			go func() {
				line, _ := br.ReadString('\n')
				first <- line
			}()
			select {
			case line := <-first:
				if !strings.Contains(line, "ab") && !strings.Contains(line, `"role":"assistant"`) {
					t.Errorf("first chunk = %q", line)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the first chunk did not arrive while the backend held the second: the proxy buffers")
			}
			close(hold)
			rest := readAll(t, br)
			if tc.kind == fakebackend.OpenAI && !strings.HasSuffix(rest, "data: [DONE]\n\n") {
				t.Errorf("stream did not finish: %q", rest)
			}
			if tc.kind == fakebackend.Ollama && !strings.Contains(rest, `"done":true`) {
				t.Errorf("stream did not finish: %q", rest)
			}
		})
	}
}

// countingListener counts the writes made to the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return countingConn{c, l.writes}, err
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestAnswerInOneWrite: an answer of known length goes to the client in one
// write, its headers with its body, while a stream is still flushed chunk
// by chunk (TestStreamNotBuffered).
func TestAnswerInOneWrite(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "The sea is wide."})
	s, err := New(Config{Backend: be.URL}, Deps{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	ts := httptest.NewUnstartedServer(s)
	ts.Listener = countingListener{ts.Listener, &writes}
	ts.Start()
	t.Cleanup(ts.Close)
	body := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	for range 3 {
		before := writes.Load()
		resp := post(t, ts.URL+"/api/chat", body, nil)
		got := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(got, "The sea is wide.") {
			t.Fatalf("got %d %s", resp.StatusCode, got)
		}
		if n := writes.Load() - before; n != 1 {
			t.Errorf("the answer took %d writes to the client, want 1", n)
		}
	}
}

func TestClientDisconnectCancelsBackend(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Hold: hold})
	_, px := newProxy(t, be.URL, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, px.URL+"/api/chat",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if line == "" {
		t.Fatal("no first chunk")
	}
	cancel()
	resp.Body.Close()
	select {
	case <-be.Cancelled():
	case <-time.After(10 * time.Second):
		t.Fatal("the backend request was not cancelled after the client left")
	}
}

func TestBackendDiesMidStream(t *testing.T) {
	for _, tc := range []struct {
		name, path, body, forbidden string
		kind                        fakebackend.Kind
	}{
		{"ollama", "/api/chat", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `"done":true`, fakebackend.Ollama},
		{"openai", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, `[DONE]`, fakebackend.OpenAI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := fakebackend.New(t, tc.kind, fakebackend.Options{DieAfter: 2, Reply: "abcdef", Chunks: 3})
			_, px := newProxy(t, be.URL, Config{})
			resp := post(t, px.URL+tc.path, []byte(tc.body), nil)
			got, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Errorf("the client saw a clean end of a stream the backend never finished")
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Logf("read error: %v", err)
			}
			if strings.Contains(string(got), tc.forbidden) {
				t.Errorf("ctxproxy invented the end of the stream: %q", got)
			}
			if !strings.Contains(string(got), "ab") {
				t.Errorf("the chunks before the failure were lost: %q", got)
			}
		})
	}
}

func TestHealthAndReady(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{})
	for _, path := range []string{"/ctxproxy/healthz", "/ctxproxy/readyz"} {
		resp, err := http.Get(px.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	if len(be.Requests()) != 1 {
		t.Errorf("readyz should ask the backend once, asked %d times", len(be.Requests()))
	}
	http.Get(px.URL + "/ctxproxy/readyz")
	if len(be.Requests()) != 1 {
		t.Errorf("readyz asked again although the backend answered recently")
	}
}

func TestNewRejectsBadBackend(t *testing.T) {
	for _, u := range []string{"ftp://x", "localhost:11434", "http://"} {
		if _, err := New(Config{Backend: u}, Deps{}, nil); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

// TestKindDetectionOutlivesClient: the request that happens to detect the
// backend's kind may be one whose client has gone; its cancelled context
// must not leave the kind unknown for the requests after it.
func TestKindDetectionOutlivesClient(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	s, _ := newProxy(t, be.URL, Config{})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	s.be.Kind(gone)
	if got := s.be.Kind(context.Background()); got != KindOllama {
		t.Errorf("kind after a detection by a departed client = %q, want %q", got, KindOllama)
	}
}

func TestExpectContinueNotForwarded(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	_, px := newProxy(t, be.URL, Config{})
	resp := post(t, px.URL+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"Expect": "100-continue"})
	io.Copy(io.Discard, resp.Body)
	got, _ := be.Last("/api/chat")
	if got.Header.Get("Expect") != "" {
		t.Errorf("Expect reached the backend: ctxproxy already has the body")
	}
}

func TestUnreadableAnswer(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		io.WriteString(w, "this is not gzip")
	}))
	t.Cleanup(backend.Close)
	_, px := newProxy(t, backend.URL, Config{BackendKind: KindOllama})
	resp := post(t, px.URL+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`), nil)
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "could not read the answer") {
		t.Errorf("got %d %s", resp.StatusCode, body)
	}
}
