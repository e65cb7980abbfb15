package backend

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// ollamaModels is an Ollama with models added, changed and loaded while
// it runs: /api/tags, /api/ps and /api/show (verbose or not, the whole
// vocabulary).
type ollamaModels struct {
	vocab vocabgen.Vocab
	// vocabs, when set, gives a model a vocabulary of its own.
	vocabs map[string]vocabgen.Vocab
	// hold, when set, keeps each /api/show waiting until it is closed.
	hold chan struct{}

	mu      sync.Mutex
	names   []string          // as /api/tags lists them
	digests map[string]string // by name
	loaded  []string          // /api/ps
	shows   []string          // the models /api/show was asked for
}

func newOllamaModels(names ...string) *ollamaModels {
	o := &ollamaModels{vocab: vocabgen.BPE(500, "default", 1), digests: map[string]string{}}
	for _, n := range names {
		o.set(n, "sha256:"+n)
	}
	return o
}

// set lists name with digest.
func (o *ollamaModels) set(name, digest string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.digests[name]; !ok {
		o.names = append(o.names, name)
	}
	o.digests[name] = digest
}

func (o *ollamaModels) load(names ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.loaded = append(o.loaded, names...)
}

func (o *ollamaModels) shown() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.shows)
}

func (o *ollamaModels) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var models []any
	switch r.URL.Path {
	case "/api/version":
		_, _ = w.Write([]byte(`{"version":"0.17.4"}`))
	case "/api/tags":
		for _, n := range o.names {
			models = append(models, map[string]any{"name": n, "model": n, "size": 1000, "digest": o.digests[n]})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"models": models})
	case "/api/ps":
		for _, n := range o.loaded {
			models = append(models, map[string]any{"name": n, "size": 1000})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"models": models})
	case "/api/show":
		var req struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		o.shows = append(o.shows, req.Model)
		if o.hold != nil {
			o.mu.Unlock()
			<-o.hold
			o.mu.Lock()
		}
		if _, ok := o.digests[req.Model]; !ok {
			http.Error(w, `{"error":"model not found"}`, http.StatusNotFound)
			return
		}
		v, ok := o.vocabs[req.Model]
		if !ok {
			v = o.vocab
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"template": "{{ .Prompt }}", "model_info": v.KV()})
	default:
		http.NotFound(w, r)
	}
}

// startPoller runs a Poller on a fake Ollama with p, ticked by the
// returned channel (each send is taken by the poller only after the poll
// before it ended); done closes when Run returns.
func startPoller(t *testing.T, o *ollamaModels, p Preparation) (b *Backend, tick chan time.Time, done chan struct{}) {
	t.Helper()
	b = preparingBackend(t, o, p)
	ctx, cancel := context.WithCancel(context.Background())
	tick, done = make(chan time.Time), make(chan struct{})
	pl := NewPoller(b)
	pl.tick = tick
	go func() { defer close(done); pl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return b, tick, done
}

// preparingBackend is a Backend on o with p, whose preparation has ended
// when the test does.
func preparingBackend(t *testing.T, o *ollamaModels, p Preparation) *Backend {
	t.Helper()
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	b := New(Config{URL: u, Client: srv.Client(), Prepare: p})
	t.Cleanup(func() { waitFor(t, "preparation to end", func() bool { return !preparing(b) }) })
	return b
}

// settle waits until the poll under way has ended (two ticks taken) and
// whatever it queued is prepared.
func settle(t *testing.T, b *Backend, tick chan time.Time) {
	t.Helper()
	tick <- time.Time{}
	tick <- time.Time{}
	waitFor(t, "preparation to end", func() bool { return !preparing(b) })
}

func preparing(b *Backend) bool {
	b.prep.mu.Lock()
	defer b.prep.mu.Unlock()
	return b.prep.busy
}

// waitFor fails the test when cond is not true within ten seconds (a
// bound for a machine under load, not a duration asserted).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited in vain for %s", what)
		}
	}
}

func wantShown(t *testing.T, o *ollamaModels, want ...string) {
	t.Helper()
	if got := o.shown(); !slices.Equal(got, want) {
		t.Errorf("/api/show asked for %q, want %q", got, want)
	}
}

// TestPollerLoaded: with loaded, the models /api/ps lists are prepared,
// and one loaded while ctxproxy runs at the next poll; the others are not.
func TestPollerLoaded(t *testing.T) {
	o := newOllamaModels("a:latest", "b:latest", "c:latest")
	o.load("b:latest")
	b, tick, _ := startPoller(t, o, Preparation{})
	settle(t, b, tick)
	wantShown(t, o, "b:latest")
	o.load("c:latest")
	settle(t, b, tick)
	wantShown(t, o, "b:latest", "c:latest")
	if m := b.Model(context.Background(), "c:latest"); m.Tokenizer == nil || len(o.shown()) != 2 {
		t.Errorf("a prepared model read again (%q), or without a tokenizer: %v", o.shown(), m.TokenizerErr)
	}
}

// TestPollerAll: with all, every model /api/tags lists is prepared, the
// loaded first; one created while ctxproxy runs at the next poll, and one
// pulled again (a new digest) anew.
func TestPollerAll(t *testing.T) {
	o := newOllamaModels("a:latest", "b:latest", "c:latest")
	o.load("c:latest")
	b, tick, _ := startPoller(t, o, Preparation{Mode: PrepareAll})
	settle(t, b, tick)
	wantShown(t, o, "c:latest", "a:latest", "b:latest")
	o.set("new:latest", "sha256:new")
	settle(t, b, tick)
	wantShown(t, o, "c:latest", "a:latest", "b:latest", "new:latest")
	o.set("a:latest", "sha256:a2")
	settle(t, b, tick)
	wantShown(t, o, "c:latest", "a:latest", "b:latest", "new:latest", "a:latest")
	if m := b.Model(context.Background(), "a:latest"); m.Digest != "sha256:a2" {
		t.Errorf("a model pulled again still has digest %q", m.Digest)
	}
}

// TestPollerNone: with none, nothing is prepared, neither the server's
// models nor one a request names, and Run returns at once.
func TestPollerNone(t *testing.T) {
	o := newOllamaModels("a:latest")
	o.load("a:latest")
	b, _, done := startPoller(t, o, Preparation{Mode: PrepareNone})
	<-done
	b.Prepare([]string{"a:latest"})
	if preparing(b) {
		t.Error("Prepare prepares with none")
	}
	wantShown(t, o)
}

// TestPollerMax: no more than MaxModels models are prepared in the
// background, however many the server lists or requests name; others
// are still read on their first request.
func TestPollerMax(t *testing.T) {
	o := newOllamaModels("a", "b", "c", "d", "e")
	o.load("d")
	b, tick, _ := startPoller(t, o, Preparation{Mode: PrepareAll, MaxModels: 2})
	settle(t, b, tick)
	wantShown(t, o, "d", "a")
	o.set("f", "sha256:f")
	b.Prepare([]string{"e"})
	settle(t, b, tick)
	wantShown(t, o, "d", "a")
	if m := b.Model(context.Background(), "e"); m.Tokenizer == nil {
		t.Errorf("a model past the ceiling has no tokenizer on its first request: %v %v", m.Err, m.TokenizerErr)
	}
}

// TestPollerMaxMemory: once the vocabularies prepared hold MaxMemory
// bytes, other models are left to their first request; models that
// share a vocabulary count it once.
func TestPollerMaxMemory(t *testing.T) {
	// Room for a little more than one vocabulary: the first two are
	// prepared (the second takes them past it), the third is not.
	o := newOllamaModels("a", "b", "c")
	o.vocabs = map[string]vocabgen.Vocab{"b": vocabgen.BPE(600, "default", 2), "c": vocabgen.BPE(700, "default", 3)}
	probe := newOllamaModels("a")
	_, one := preparingBackend(t, probe, Preparation{}).Model(context.Background(), "a").Tokenizer.Footprint()
	b, tick, _ := startPoller(t, o, Preparation{Mode: PrepareAll, MaxMemory: one + 1})
	settle(t, b, tick)
	wantShown(t, o, "a", "b")
	if m := b.Model(context.Background(), "c"); m.Tokenizer == nil {
		t.Errorf("a model past the ceiling has no tokenizer on its first request: %v %v", m.Err, m.TokenizerErr)
	}

	o = newOllamaModels("a", "b", "c")
	b, tick, _ = startPoller(t, o, Preparation{Mode: PrepareAll})
	settle(t, b, tick)
	wantShown(t, o, "a", "b", "c")
	_, one = b.Model(context.Background(), "a").Tokenizer.Footprint()
	if b.prep.bytes != one || one <= 0 {
		t.Errorf("three models of one vocabulary hold %d bytes, the vocabulary %d", b.prep.bytes, one)
	}
}

// TestPrepareUnknownForgotten: a name no model has (a request's typo)
// takes no place under the ceiling.
func TestPrepareUnknownForgotten(t *testing.T) {
	o := newOllamaModels("a")
	b, tick, _ := startPoller(t, o, Preparation{MaxModels: 1})
	b.Prepare([]string{"typo"})
	settle(t, b, tick)
	b.Prepare([]string{"a"})
	settle(t, b, tick)
	wantShown(t, o, "typo", "a")
}

// TestPrepareFirstRequestWaits: a first request for a model whose
// preparation is under way, by its name or another name of it, waits for
// that build: one /api/show in all.
func TestPrepareFirstRequestWaits(t *testing.T) {
	o := newOllamaModels("m:latest")
	o.hold = make(chan struct{})
	b := preparingBackend(t, o, Preparation{})
	b.Prepare([]string{"m:latest"})
	waitFor(t, "the preparation's /api/show", func() bool { return len(o.shown()) == 1 })
	got := make(chan Details, 2)
	for _, name := range []string{"m:latest", "m"} {
		go func() { got <- b.Model(context.Background(), name) }()
	}
	time.Sleep(20 * time.Millisecond) // let both reach their wait
	close(o.hold)
	for range 2 {
		if m := <-got; m.Tokenizer == nil {
			t.Errorf("%s: no tokenizer: %v %v", m.Name, m.Err, m.TokenizerErr)
		}
	}
	wantShown(t, o, "m:latest")
}

// TestPollerStops: Run returns when its context ends, with a real
// ticker too; a server that is not Ollama is not polled.
func TestPollerStops(t *testing.T) {
	var asked sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Store(r.URL.Path, true)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	b := New(Config{URL: u, Client: srv.Client(), Kind: KindOpenAI, Prepare: Preparation{Interval: time.Hour}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); NewPoller(b).Run(ctx) }()
	cancel()
	<-done
	b.Prepare([]string{"a"})
	asked.Range(func(path, _ any) bool {
		if strings.HasPrefix(path.(string), "/api/") {
			t.Errorf("a server that is not Ollama was asked %s", path)
		}
		return true
	})
}
