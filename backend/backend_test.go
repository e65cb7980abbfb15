package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// clock is a settable clock for backoff tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newBackend(t *testing.T, h http.Handler) (*Backend, *clock) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	c := &clock{t: time.Unix(1e9, 0)}
	return New(Config{URL: u, Client: srv.Client(), Now: c.now}), c
}

// TestKindRecovers: answers that say nothing of the kind (5xx, 429, the
// backend down) are asked again after a backoff instead of pinning the
// kind, and an Ollama that comes up later is found.
func TestKindRecovers(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusServiceUnavailable)
	var calls atomic.Int32
	b, clk := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if s := int(status.Load()); s != http.StatusOK {
			w.WriteHeader(s)
			return
		}
		_, _ = w.Write([]byte(`{"version":"0.17.4"}`))
	}))
	ctx := context.Background()
	if k := b.Kind(ctx); k != KindUnknown {
		t.Fatalf("kind after a 503 = %q, want unknown", k)
	}
	b.Kind(ctx) // within the backoff: no new probe
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d probes within the backoff, want 1", n)
	}
	status.Store(http.StatusTooManyRequests)
	clk.add(1100 * time.Millisecond)
	if k := b.Kind(ctx); k != KindUnknown || calls.Load() != 2 {
		t.Fatalf("after 429: kind %q, %d probes", k, calls.Load())
	}
	status.Store(http.StatusOK)
	clk.add(1500 * time.Millisecond) // backoff doubled to 2 s: not yet
	b.Kind(ctx)
	if calls.Load() != 2 {
		t.Fatal("asked again before the doubled backoff")
	}
	clk.add(time.Second)
	if k := b.Kind(ctx); k != KindOllama {
		t.Fatalf("kind once Ollama answers = %q", k)
	}
}

// TestKindOpenAIRechecked: a server without Ollama's API (404) is taken
// for OpenAI-compatible, but asked again after a while, so an Ollama that
// replaced it is found.
func TestKindOpenAIRechecked(t *testing.T) {
	var ollama atomic.Bool
	b, clk := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ollama.Load() {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"version":"0.17.4"}`))
	}))
	ctx := context.Background()
	if k := b.Kind(ctx); k != KindOpenAI {
		t.Fatalf("kind after 404 = %q", k)
	}
	ollama.Store(true)
	if k := b.Kind(ctx); k != KindOpenAI {
		t.Fatalf("rechecked too soon: %q", k)
	}
	clk.add(kindRecheck + time.Second)
	if k := b.Kind(ctx); k != KindOllama {
		t.Fatalf("kind after recheck = %q", k)
	}
	b.Forget()
	ollama.Store(false)
	if k := b.Kind(ctx); k != KindOpenAI {
		t.Fatalf("kind after Forget = %q", k)
	}
}

func TestKindConfigured(t *testing.T) {
	b := New(Config{URL: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, Kind: KindOllama, Client: http.DefaultClient})
	if k := b.Kind(context.Background()); k != KindOllama {
		t.Fatalf("configured kind = %q", k)
	}
}

// ollamaShow serves /api/tags and /api/show like Ollama: the vocabulary
// only with verbose.
type ollamaShow struct {
	digest  atomic.Value // string
	shows   atomic.Int32
	verbose atomic.Int32
	vocab   vocabgen.Vocab
	// hold, when set, keeps each /api/show waiting until it is closed.
	hold chan struct{}
	tags atomic.Int32 // /api/tags calls
}

func (o *ollamaShow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/version":
		_, _ = w.Write([]byte(`{"version":"0.17.4"}`))
	case "/api/tags":
		o.tags.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"models": []any{map[string]any{
			"name": "tiny:latest", "model": "tiny:latest", "size": 444000, "digest": o.digest.Load()}}})
	case "/api/show":
		o.shows.Add(1)
		if o.hold != nil {
			<-o.hold
		}
		var req struct {
			Model   string `json:"model"`
			Verbose bool   `json:"verbose"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Model != "tiny" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"model 'x' not found"}`))
			return
		}
		kv := o.vocab.KV()
		if req.Verbose {
			o.verbose.Add(1)
		} else {
			for k := range kv {
				if strings.HasPrefix(k, "tokenizer.ggml.") && k != "tokenizer.ggml.model" && k != "tokenizer.ggml.pre" {
					kv[k] = nil // Ollama leaves the arrays out without verbose
				}
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"template": "{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n", "model_info": kv})
	default:
		http.NotFound(w, r)
	}
}

// TestModelTokenizerPerDigest: the vocabulary and facts are read
// (verbose) once per digest; a refetch of an unchanged model, or another
// name of it, asks only /api/tags, and a new digest loads the tokenizer
// again.
func TestModelTokenizerPerDigest(t *testing.T) {
	o := &ollamaShow{vocab: vocabgen.BPE(2000, "llama-bpe", 1)}
	o.digest.Store("sha256:aaa")
	b, clk := newBackend(t, o)
	ctx := context.Background()
	m := b.Model(ctx, "tiny")
	if m.Err != nil || m.Tokenizer == nil {
		t.Fatalf("model: err %v, tokenizer err %v", m.Err, m.TokenizerErr)
	}
	if m.Facts.ContextLength != 8192 || m.Digest != "sha256:aaa" || m.Weights != 444000 {
		t.Errorf("facts %+v digest %q weights %d", m.Facts, m.Digest, m.Weights)
	}
	first := m.Tokenizer
	b.Model(ctx, "tiny")
	if o.shows.Load() != 1 {
		t.Fatalf("%d show calls for a cached model", o.shows.Load())
	}
	clk.add(modelTTL + time.Second)
	if m := b.Model(ctx, "tiny"); m.Tokenizer != first || m.Facts.ContextLength != 8192 || o.shows.Load() != 1 {
		t.Fatalf("unchanged digest: same tokenizer %v, facts %+v, shows %d", m.Tokenizer == first, m.Facts, o.shows.Load())
	}
	if m := b.Model(ctx, "tiny:latest"); m.Tokenizer != first || m.Facts.ContextLength != 8192 || o.shows.Load() != 1 {
		t.Fatalf("another name of the digest: same tokenizer %v, facts %+v, shows %d", m.Tokenizer == first, m.Facts, o.shows.Load())
	}
	o.digest.Store("sha256:bbb")
	clk.add(modelTTL + time.Second)
	if m := b.Model(ctx, "tiny"); m.Tokenizer == first || o.verbose.Load() != 2 {
		t.Fatalf("new digest: new tokenizer %v, verbose calls %d", m.Tokenizer != first, o.verbose.Load())
	}
}

// TestModelOneBuildPerDigest: two names of one model asked at once (a
// client's "tiny" while "tiny:latest" is being read) make one /api/show
// and one tokenizer, which both get.
func TestModelOneBuildPerDigest(t *testing.T) {
	o := &ollamaShow{vocab: vocabgen.BPE(2000, "llama-bpe", 1), hold: make(chan struct{})}
	o.digest.Store("sha256:aaa")
	b, _ := newBackend(t, o)
	ctx := context.Background()
	first := make(chan Details)
	go func() { first <- b.Model(ctx, "tiny") }()
	for o.shows.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan Details)
	go func() { second <- b.Model(ctx, "tiny:latest") }()
	// The second has found the digest in /api/tags: it is at its wait,
	// or a few steps from it.
	for o.tags.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(o.hold)
	m1, m2 := <-first, <-second
	if m1.Err != nil || m2.Err != nil || m1.Tokenizer == nil || m1.Tokenizer != m2.Tokenizer {
		t.Fatalf("errors %v, %v; one tokenizer %v", m1.Err, m2.Err, m1.Tokenizer != nil && m1.Tokenizer == m2.Tokenizer)
	}
	if n := o.shows.Load(); n != 1 {
		t.Errorf("%d /api/show calls for two names of one model at once, want 1", n)
	}
}

// TestModelErrorRetried: a model the backend does not know is asked
// again after a short while, not remembered as unknown.
func TestModelErrorRetried(t *testing.T) {
	o := &ollamaShow{vocab: vocabgen.BPE(500, "default", 1)}
	o.digest.Store("d")
	b, clk := newBackend(t, o)
	ctx := context.Background()
	if m := b.Model(ctx, "nope"); m.Err == nil {
		t.Fatal("no error for an unknown model")
	}
	b.Model(ctx, "nope")
	if o.shows.Load() != 1 {
		t.Fatal("asked again at once")
	}
	clk.add(modelErrorTTL + time.Second)
	b.Model(ctx, "nope")
	if o.shows.Load() != 2 {
		t.Fatal("not asked again after the error TTL")
	}
}

// TestModelHotSurvivesFlood: model names are client data, so the cache is
// bounded, but a model in use is not fetched again because a client sent
// many other names: the least recently used names go, not everything.
func TestModelHotSurvivesFlood(t *testing.T) {
	o := &ollamaShow{vocab: vocabgen.BPE(500, "default", 1)}
	o.digest.Store("d")
	b, _ := newBackend(t, o)
	ctx := context.Background()
	if m := b.Model(ctx, "tiny"); m.Err != nil {
		t.Fatal(m.Err)
	}
	flood := 3 * maxModels
	for i := range flood {
		b.Model(ctx, fmt.Sprintf("flood-%d", i))
		if m := b.Model(ctx, "tiny"); m.Err != nil || m.Tokenizer == nil {
			t.Fatalf("after %d names: err %v, tokenizer err %v", i+1, m.Err, m.TokenizerErr)
		}
	}
	if n := int(o.shows.Load()); n != 1+flood {
		t.Errorf("%d show calls, want %d: the model in use was fetched again", n, 1+flood)
	}
	if n := b.models.entries.Len(); n != maxModels {
		t.Errorf("%d names cached, want %d", n, maxModels)
	}
}

type logs struct{ n atomic.Int32 }

func (l *logs) Warn(string, ...any) { l.n.Add(1) }

// TestObserveDrift: counts within 1% keep exact counting; the first
// disagreement of a request shape beyond it turns exact counting off for
// that shape of the digest's requests only, says so once per shape, and
// shows in Agreement.
func TestObserveDrift(t *testing.T) {
	o := &ollamaShow{vocab: vocabgen.BPE(500, "default", 1)}
	o.digest.Store("d")
	b, _ := newBackend(t, o)
	ctx := context.Background()
	m := b.Model(ctx, "tiny")
	var l logs
	if m.Observe(&l, "plain", 1000, 1005) || m.Observe(&l, "plain", 50, 52) {
		t.Fatal("within tolerance turned it off")
	}
	if !m.Observe(&l, "tools", 1000, 1100) {
		t.Fatal("a 9% disagreement did not turn it off")
	}
	m.Observe(&l, "tools", 1000, 1200)
	if l.n.Load() != 1 {
		t.Errorf("%d warnings, want 1", l.n.Load())
	}
	again := b.Model(ctx, "tiny")
	a := again.Agreement()
	if !a.Off || a.Checked != 4 || a.WorstError < 0.16 || len(a.Misses) != 1 || a.Misses[0].Shape != "tools" {
		t.Errorf("agreement %+v", a)
	}
	if again.Tokenizer == nil {
		t.Error("one shape's miss took the tokenizer away from every request")
	}
	miss, off := again.Missed("tools")
	if _, plainOff := again.Missed("plain"); !off || plainOff {
		t.Errorf("missed: tools %v, plain %v; want only tools", off, plainOff)
	}
	if got := miss.String(); !strings.Contains(got, "tools requests") || !strings.Contains(got, "1000") || !strings.Contains(got, "-9.1%") {
		t.Errorf("the miss says %q", got)
	}
}

func TestJSONLimit(t *testing.T) {
	b, _ := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"x":"` + strings.Repeat("a", 5000) + `"}`))
	}))
	var out map[string]any
	if _, err := b.JSON(context.Background(), http.MethodGet, "/", nil, &out, 1000); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("err = %v", err)
	}
}

// TestRemoteProbe: vLLM's /tokenize answers count and max_model_len,
// llama.cpp's only tokens, others 404; a 503 is asked again later.
func TestRemoteProbe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		want   Remote
	}{
		{"vllm", func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"count":1,"max_model_len":32768,"tokens":[9]}`)) }, Remote{API: RemoteVLLM, Window: 32768}},
		{"llama.cpp", func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"tokens":[9]}`)) }, Remote{API: RemoteLlamaCpp}},
		{"none", func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) }, Remote{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/tokenize" {
					tc.answer(w)
					return
				}
				http.NotFound(w, r)
			}))
			if got := b.Remote(context.Background(), "m"); got != tc.want {
				t.Errorf("Remote = %+v, want %+v", got, tc.want)
			}
		})
	}
	var calls atomic.Int32
	b, clk := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			calls.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		http.NotFound(w, r)
	}))
	b.Remote(context.Background(), "m")
	b.Remote(context.Background(), "m")
	clk.add(remoteErrorTTL + time.Second)
	b.Remote(context.Background(), "m")
	if calls.Load() != 2 {
		t.Errorf("%d probes, want 2 (once, and again after the error TTL)", calls.Load())
	}
}

// TestPrepare: the models Prepare is given are fetched in the background,
// tokenizer and all, once per name; the first request then finds them
// ready and asks for nothing verbose again.
func TestPrepare(t *testing.T) {
	o := &ollamaShow{vocab: vocabgen.BPE(500, "default", 1)}
	o.digest.Store("d")
	b, _ := newBackend(t, o)
	b.Prepare([]string{"tiny"})
	b.Prepare([]string{"tiny"})
	deadline := time.Now().Add(5 * time.Second)
	for o.verbose.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Prepare fetched nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m := b.Model(context.Background(), "tiny")
	if m.Tokenizer == nil {
		t.Fatalf("no tokenizer after Prepare: %v", m.TokenizerErr)
	}
	if n := o.verbose.Load(); n != 1 {
		t.Errorf("%d verbose /api/show, want 1", n)
	}
}

// TestTokenizerDiskCache: a Backend with a tokenizer directory keeps what
// builds a digest's tokenizer; a restarted one (a new Backend on the same
// directory) builds it from there without asking /api/show, and a new
// digest is asked for again. A damaged file is read past.
func TestTokenizerDiskCache(t *testing.T) {
	dir := t.TempDir()
	o, start := diskBackends(t, dir)
	ctx := context.Background()
	first := start().Model(ctx, "tiny")
	if first.Tokenizer == nil || o.verbose.Load() != 1 {
		t.Fatalf("first start: tokenizer %v, %d verbose", first.Tokenizer != nil, o.verbose.Load())
	}
	again := start().Model(ctx, "tiny")
	if again.Tokenizer == nil || o.shows.Load() != 1 || again.Facts.ContextLength != first.Facts.ContextLength {
		t.Fatalf("after a restart: tokenizer %v, %d shows (want 1), facts %+v", again.Tokenizer != nil, o.shows.Load(), again.Facts)
	}
	text := "hello there, 12345 times"
	a, _ := first.Tokenizer.CountText(text)
	b, _ := again.Tokenizer.CountText(text)
	if a != b {
		t.Errorf("the cached tokenizer counts %d, the fetched one %d", b, a)
	}
	o.digest.Store("sha256:bbb")
	if m := start().Model(ctx, "tiny"); m.Tokenizer == nil || o.verbose.Load() != 2 {
		t.Errorf("a new digest: %d verbose, want 2", o.verbose.Load())
	}
	if err := os.WriteFile(filepath.Join(dir, "sha256-bbb.vocab"), []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := start().Model(ctx, "tiny"); m.Tokenizer == nil || o.verbose.Load() != 3 {
		t.Errorf("a damaged file: tokenizer %v, %d verbose, want 3", m.Tokenizer != nil, o.verbose.Load())
	}
}

// TestTokenizerDiskCachePrune: past diskCacheFiles digests, the least
// recently written files go, those of the old kind among them.
func TestTokenizerDiskCachePrune(t *testing.T) {
	d := diskCache{dir: t.TempDir(), log: slog.New(slog.DiscardHandler)}
	base := time.Now().Add(-time.Hour)
	ext := func(i int) string {
		if i < 2 {
			return oldExt
		}
		return vocabExt
	}
	for i := range diskCacheFiles + 5 {
		p := d.path(fmt.Sprintf("sha256:%03d", i), ext(i))
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Second)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	d.prune()
	entries, _ := os.ReadDir(d.dir)
	if len(entries) != diskCacheFiles {
		t.Fatalf("%d files kept, want %d", len(entries), diskCacheFiles)
	}
	for i := range 5 {
		if _, err := os.Stat(d.path(fmt.Sprintf("sha256:%03d", i), ext(i))); !os.IsNotExist(err) {
			t.Errorf("the %d-th oldest file is still there", i+1)
		}
	}
}

// TestVersionAskedWhateverTheKind: the server's version is asked and kept
// whether the kind is detected or configured; an OpenAI-compatible
// backend is never asked; a backend that went away is asked again.
func TestVersionAskedWhateverTheKind(t *testing.T) {
	var version atomic.Value
	version.Store("0.17.4")
	var calls atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fmt.Fprintf(w, `{"version":%q}`, version.Load())
	})
	ctx := context.Background()
	for _, kind := range []string{KindAuto, KindOllama} {
		b, _ := newBackend(t, h)
		b.configured = kind
		if v := b.Version(ctx); v != "0.17.4" {
			t.Errorf("%s: version %q", kind, v)
		}
		if k := b.Kind(ctx); k != KindOllama {
			t.Errorf("%s: kind %q", kind, k)
		}
		version.Store("0.34.3")
		if v := b.Version(ctx); v != "0.17.4" {
			t.Errorf("%s: version asked again without a reason: %q", kind, v)
		}
		b.Forget() // the backend could not be reached: maybe upgraded
		if v := b.Version(ctx); v != "0.34.3" {
			t.Errorf("%s: version after Forget %q", kind, v)
		}
		version.Store("0.17.4")
	}
	calls.Store(0)
	b, _ := newBackend(t, h)
	b.configured = KindOpenAI
	if v := b.Version(ctx); v != "" || calls.Load() != 0 {
		t.Errorf("openai: version %q after %d calls", v, calls.Load())
	}
}

// TestModelfileNumCtx: the model's own num_ctx is the last PARAMETER
// num_ctx line of its Modelfile, as Ollama keeps the last.
func TestModelfileNumCtx(t *testing.T) {
	for text, want := range map[string]int{
		"FROM x\nPARAMETER num_ctx 32768\n":                         32768,
		"FROM x\nparameter NUM_CTX 8192\nPARAMETER num_ctx 4096":    4096,
		"FROM x\nPARAMETER num_predict 128\nPARAMETER stop \"<x>\"": 0,
		"PARAMETER num_ctx lots":                                    0,
		"":                                                          0,
	} {
		if got := modelfileNumCtx(text); got != want {
			t.Errorf("%q: %d, want %d", text, got, want)
		}
	}
}
