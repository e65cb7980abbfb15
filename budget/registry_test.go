package budget

import (
	"bytes"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/google/go-cmp/cmp"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func captureLog() (*slog.Logger, *lockedBuffer) {
	var b lockedBuffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// A model's counter is a caching counter over its tiktoken encoding,
// shared by the models of one encoding.
func TestRegistryCounterForModel(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	c, ok := r.CounterFor("claude-3-opus").(*Caching)
	if !ok {
		t.Fatalf("CounterFor(claude-3-opus) is %T, want *Caching", r.CounterFor("claude-3-opus"))
	}
	if _, ok := c.Inner().(*tokenizer.Tiktoken); !ok {
		t.Errorf("inner counter is %T, want *tokenizer.Tiktoken", c.Inner())
	}
	if got, want := c.Name(), tokenizer.EncodingCL100K; got != want {
		t.Errorf("encoding = %q, want %q", got, want)
	}
	if got, want := r.CounterFor("gpt-4o").Name(), tokenizer.EncodingO200K; got != want {
		t.Errorf("gpt-4o encoding = %q, want %q", got, want)
	}
	if r.CounterFor("llama3") != r.CounterFor("mistral") {
		t.Errorf("two models of one encoding got different counters")
	}
}

func TestRegistryEncodingConfig(t *testing.T) {
	tests := []struct {
		encoding, model, want string
	}{
		{"", "gpt-4o", tokenizer.EncodingO200K},
		{EncodingAuto, "llama3", tokenizer.EncodingCL100K},
		{tokenizer.EncodingO200K, "llama3", tokenizer.EncodingO200K},
		{tokenizer.EncodingCL100K, "gpt-4o", tokenizer.EncodingCL100K},
		{tokenizer.EncodingApproximate, "gpt-4o", tokenizer.EncodingApproximate},
	}
	for _, tt := range tests {
		r := NewRegistry(Config{Encoding: tt.encoding}, nil)
		if got := r.CounterFor(tt.model).Name(); got != tt.want {
			t.Errorf("encoding %q, model %q: counter %q, want %q", tt.encoding, tt.model, got, tt.want)
		}
	}
	r := NewRegistry(Config{Encoding: tokenizer.EncodingApproximate, ApproxCharsPerToken: 3.5}, nil)
	if got, want := r.CounterFor("x").Count(strings.Repeat("a", 35)), 10; got != want {
		t.Errorf("approximate 3.5: Count = %d, want %d", got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	bad := Config{
		Encoding:            "p50k",
		ApproxCharsPerToken: -1,
		ImageTokens:         -1,
		CacheEntries:        -5,
		ReserveOutput:       -1,
		Reserved:            -1,
		Models: map[string]Model{
			"x":  {MaxTokens: 100, MaxOutputTokens: 100},
			"y":  {MaxTokens: -1},
			"z":  {Multiplier: 9},
			" ":  {},
			"ok": {MaxTokens: 4096, MaxOutputTokens: 512, Multiplier: 1.2},
		},
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{
		"tokens.encoding", "approx_chars_per_token", "image_tokens", "cache_entries",
		"reserve_output", "reserved", "models.x", "models.y", "models.z.multiplier", `" "`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "models.ok") {
		t.Errorf("error mentions a valid model:\n%v", err)
	}
}

// Model names are client data: the registry keeps a bounded number, and a
// model in use keeps its calibration through a flood of other names.
func TestRegistryBoundsModels(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	r.Observe("hot", Estimate{Raw: 100, Tokens: 100}, 120, 0)
	learned := r.Calibration("hot")
	if learned.Observations == 0 {
		t.Fatal("nothing learned from the first report")
	}
	for i := range maxModels + 10 {
		r.Observe("model-"+strconv.Itoa(i), Estimate{Raw: 100, Tokens: 100}, 100, 0)
		r.Calibration("hot")
	}
	if n := r.models.Len(); n > maxModels {
		t.Errorf("registry holds %d models, bound is %d", n, maxModels)
	}
	if got := r.Calibration("hot"); got != learned {
		t.Errorf("calibration of the model in use = %+v, want %+v (kept)", got, learned)
	}
}

func TestRegistryCacheStats(t *testing.T) {
	r := NewRegistry(Config{CacheEntries: 500}, nil)
	c := r.CounterFor("gpt-4")
	c.Count("hello there")
	c.Count("hello there")
	r.CounterFor("gpt-4o").Count("hello there") // another encoding, same store
	st := r.CacheStats()
	if st.Hits != 1 || st.Misses != 2 || st.Entries != 2 || st.Capacity < 500 {
		t.Errorf("CacheStats() = %+v, want 1 hit, 2 misses, 2 entries, capacity ≥ 500", st)
	}
}

// TestFrozenCounterIgnoresLaterCalibration: a request counts and cuts
// with one correction; a response of another request that moves the
// calibration in between does not change what the request's counter
// says (it used to, and a strategy then found the conversation longer
// than it had been told and answered "could not cut it down").
func TestFrozenCounterIgnoresLaterCalibration(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	text := strings.Repeat("word ", 400)
	frozen := r.MessageCounter("m").Frozen()
	before := frozen.CountText(text)
	live := r.MessageCounter("m")
	for range 5 {
		est := live.Prompt([]chat.Message{{Role: "user", Content: text}}, nil)
		r.Observe("m", est, est.Raw*3, 0)
	}
	if live.CountText(text) == before {
		t.Fatal("the calibration did not move; the test proves nothing")
	}
	if got := frozen.CountText(text); got != before {
		t.Errorf("frozen counter changed from %d to %d after calibration moved", before, got)
	}
}

// Without tiktoken the counter falls
// back to the approximate one and still counts, with one warning.
func TestRegistryFallsBackWithoutTiktoken(t *testing.T) {
	log, logs := captureLog()
	r := NewRegistry(Config{}, log)
	r.newTiktoken = func(enc string) (tokenizer.Counter, error) { return nil, os.ErrNotExist }
	c := r.CounterFor("gpt-4")
	if got, want := c.Name(), tokenizer.EncodingApproximate; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	if got, want := c.Count("Hello, world!"), 4; got != want { // 13 bytes / 4, rounded up
		t.Errorf("Count = %d, want %d", got, want)
	}
	r.CounterFor("gpt-4")
	r.CounterFor("llama3")
	if got := strings.Count(logs.String(), "tokenizer unavailable"); got != 1 {
		t.Errorf("logged %d warnings, want 1:\n%s", got, logs)
	}
}

func TestEncodingFor(t *testing.T) {
	got := map[string]string{}
	for _, m := range []string{
		"gpt-4o", "gpt-4o-mini-2024-07-18", "openai/gpt-4.1-nano", "o1", "o3-mini", "o4-mini",
		"gpt-5", "gpt-oss:20b", "chatgpt-4o-latest",
		"gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "claude-3-opus", "llama3.1:8b", "",
	} {
		got[m] = EncodingFor(m)
	}
	want := map[string]string{
		"gpt-4o": tokenizer.EncodingO200K, "gpt-4o-mini-2024-07-18": tokenizer.EncodingO200K, "openai/gpt-4.1-nano": tokenizer.EncodingO200K,
		"o1": tokenizer.EncodingO200K, "o3-mini": tokenizer.EncodingO200K, "o4-mini": tokenizer.EncodingO200K, "gpt-5": tokenizer.EncodingO200K,
		"gpt-oss:20b": tokenizer.EncodingO200K, "chatgpt-4o-latest": tokenizer.EncodingO200K,
		"gpt-4": tokenizer.EncodingCL100K, "gpt-4-turbo": tokenizer.EncodingCL100K, "gpt-3.5-turbo": tokenizer.EncodingCL100K,
		"claude-3-opus": tokenizer.EncodingCL100K, "llama3.1:8b": tokenizer.EncodingCL100K, "": tokenizer.EncodingCL100K,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EncodingFor (-want +got):\n%s", diff)
	}
}

// A local model is counted with cl100k_base, or at about 4 characters a
// token when the tokenizer is unavailable.
func TestLocalModelsCountWithCL100KOrApprox(t *testing.T) {
	if got := NewRegistry(Config{}, nil).CounterFor("llama3").Name(); got != tokenizer.EncodingCL100K {
		t.Errorf("local model counter = %q, want %q", got, tokenizer.EncodingCL100K)
	}
	r := NewRegistry(Config{}, nil)
	r.newTiktoken = func(string) (tokenizer.Counter, error) { return nil, os.ErrNotExist }
	if got, want := r.CounterFor("llama3").Count(strings.Repeat("x", 400)), 100; got != want {
		t.Errorf("fallback Count(400 chars) = %d, want %d", got, want)
	}
}
