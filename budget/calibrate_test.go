package budget

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/chat"
)

var shared struct {
	once     sync.Once
	counters map[string]tokenizer.Counter
}

// sharedCounters gives r the process's cached counters, so that the many
// registries of the simulations do not tokenize the same texts again.
func sharedCounters(t testing.TB, r *Registry) {
	shared.once.Do(func() {
		shared.counters = map[string]tokenizer.Counter{}
		for _, enc := range []string{tokenizer.EncodingCL100K, tokenizer.EncodingO200K} {
			shared.counters[enc] = NewCaching(mustTiktoken(t, enc), 0)
		}
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for enc, c := range shared.counters {
		r.texts[enc] = c
	}
}

// backend is a fake backend's true token count of a prompt.
type backend struct {
	name  string
	count func(msgs []chat.Message) int
}

// memo caches a backend's counts of texts: the simulations resend the
// same messages many times.
func memo(count func(string) int) func(string) int {
	var mu sync.Mutex
	m := map[string]int{}
	return func(s string) int {
		mu.Lock()
		defer mu.Unlock()
		n, ok := m[s]
		if !ok {
			n = count(s)
			m[s] = n
		}
		return n
	}
}

// byteLevel counts like a byte-level tokenizer (one token per 1.3 bytes)
// with a chat template of 6 tokens a message and 5 a prompt: nothing like
// cl100k_base.
func byteLevel(msgs []chat.Message) int {
	n := 5
	for _, m := range msgs {
		n += 6 + int(math.Ceil(float64(len(m.Role)+len(m.Content))/1.3))
	}
	return n
}

// otherBPE counts with o200k_base under a Llama-3-like template (5 tokens
// a message, a 24-token default system preamble).
func otherBPE(t testing.TB) func([]chat.Message) int {
	count := memo(mustTiktoken(t, tokenizer.EncodingO200K).Count)
	return func(msgs []chat.Message) int {
		n := 24
		for _, m := range msgs {
			n += 5 + count(m.Content)
		}
		return n
	}
}

// sentencePiece counts like a small-vocabulary tokenizer: 1.25 cl100k
// tokens a token, 4 a message.
func sentencePiece(t testing.TB) func([]chat.Message) int {
	count := memo(mustTiktoken(t, tokenizer.EncodingCL100K).Count)
	return func(msgs []chat.Message) int {
		n := 1
		for _, m := range msgs {
			n += 4 + int(math.Ceil(1.25*float64(count(m.Content))))
		}
		return n
	}
}

// sessions simulates users chatting through the proxy: several
// conversations interleaved, each resent whole with one more turn each
// time, turns drawn from prose, code and mixed-script text of varied
// length. It returns the prompts in the order they are sent.
func sessions(t testing.TB, seed uint64, users, turns int, multilingual bool) [][]chat.Message {
	rng := rand.New(rand.NewPCG(seed, 1))
	pool := strings.Split(readTestdata(t, "chat_en.txt"), "\n\n")
	if multilingual {
		for _, l := range strings.Split(readTestdata(t, "mixed.txt"), "\n") {
			if l != "" {
				pool = append(pool, l)
			}
		}
	}
	turn := func() string {
		var b strings.Builder
		for n := 1 + rng.IntN(4); n > 0; n-- {
			b.WriteString(pool[rng.IntN(len(pool))])
			b.WriteString("\n")
		}
		return b.String()
	}
	convs := make([][]chat.Message, users)
	for u := range convs {
		convs[u] = []chat.Message{{Role: "system", Content: fmt.Sprintf("You are assistant number %d. Answer briefly.", u)}}
	}
	var prompts [][]chat.Message
	for range turns {
		u := rng.IntN(users)
		c := convs[u]
		if len(c) > 1 {
			c = append(c, chat.Message{Role: "assistant", Content: turn()})
		}
		c = append(c, chat.Message{Role: "user", Content: turn()})
		convs[u] = c
		prompts = append(prompts, fresh(c))
	}
	return prompts
}

// simulate sends the prompts through a fresh registry and returns the
// relative error of each estimate against the backend's count, learning
// from each response as the proxy does. only pins the calibration basis
// (0: choose, 1: tokens, 2: chars).
func simulate(t testing.TB, cfg Config, be backend, prompts [][]chat.Message, only int) []float64 {
	r := NewRegistry(cfg, nil)
	sharedCounters(t, r)
	const model = "local-model"
	r.state(model).cal.only = only
	mc := r.MessageCounter(model)
	errs := make([]float64, len(prompts))
	for i, p := range prompts {
		est := mc.Prompt(fresh(p), nil)
		actual := be.count(p)
		errs[i] = float64(est.Tokens-actual) / float64(actual)
		if r.Observe(model, est, actual, 0) && only == 0 {
			t.Errorf("%s: request %d read as truncated (estimate %d, actual %d)", be.name, i+1, est.Tokens, actual)
		}
	}
	return errs
}

func backends(t testing.TB) []backend {
	return []backend{
		{"byte-level", byteLevel},
		{"o200k + llama template", otherBPE(t)},
		{"sentencepiece-like", sentencePiece(t)},
	}
}

// The calibration goal: after three responses from a model,
// estimates are within ±5% of the backend's count, even when the backend's
// tokenizer is nothing like ours. The traffic: four users chatting in
// English (prose and code) with turns of varied length, interleaved.
func TestCalibrationWithin5PercentAfterThreeResponses(t *testing.T) {
	for _, be := range backends(t) {
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("%s/seed%d", be.name, seed), func(t *testing.T) {
				errs := simulate(t, Config{}, be, sessions(t, seed, 4, 40, false), 0)
				for i, e := range errs[3:] {
					if math.Abs(e) > 0.05 {
						t.Errorf("request %d: estimate off by %+.1f%%", i+4, 100*e)
					}
				}
			})
		}
	}
}

// TestCalibrationBases compares the ratio over tiktoken counts, the ratio
// over characters/4 and the choice between them on the same traffic; its
// log is the measurement behind the design (go test -run Bases -v).
func TestCalibrationBases(t *testing.T) {
	for _, be := range backends(t) {
		for _, ml := range []bool{false, true} {
			var sum, worst [3]float64
			n := 0
			for seed := range uint64(3) {
				prompts := sessions(t, seed, 4, 40, ml)
				for k := range 3 {
					for _, e := range simulate(t, Config{}, be, prompts, k)[3:] {
						sum[k] += math.Abs(e)
						worst[k] = math.Max(worst[k], math.Abs(e))
						if k == 0 {
							n++
						}
					}
				}
			}
			t.Logf("%-22s multilingual=%-5v chosen: mean %.2f%% worst %.2f%% | tokens: mean %.2f%% worst %.2f%% | chars: mean %.2f%% worst %.2f%%",
				be.name, ml, 100*sum[0]/float64(n), 100*worst[0], 100*sum[1]/float64(n), 100*worst[1], 100*sum[2]/float64(n), 100*worst[2])
		}
	}
}

func TestTruncated(t *testing.T) {
	tests := []struct {
		name                       string
		expected, reported, numCtx int
		margin                     float64
		want                       bool
	}{
		{"as expected", 5000, 5000, 0, 0.25, false},
		{"within margin", 5000, 3800, 0, 0.25, false},
		{"far below", 5000, 2048, 0, 0.25, true},
		{"cut to num_ctx", 6000, 4090, 4096, 0.25, true},
		{"far below but could not exceed num_ctx", 1000, 400, 8192, 0.25, false},
		{"report above num_ctx is no truncation", 20000, 9000, 8192, 0.25, false},
		{"no report", 5000, 0, 0, 0.25, false},
		{"no estimate", 0, 100, 0, 0.25, false},
	}
	for _, tt := range tests {
		if got := Truncated(tt.expected, tt.reported, tt.numCtx, tt.margin); got != tt.want {
			t.Errorf("%s: Truncated(%d, %d, %d, %v) = %v, want %v", tt.name, tt.expected, tt.reported, tt.numCtx, tt.margin, got, tt.want)
		}
	}
}

// A truncated report is flagged and not learned from.
func TestObserveIgnoresTruncation(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	mc := r.MessageCounter("llama3")
	msgs := sessions(t, 1, 1, 6, false)
	for _, p := range msgs[:4] {
		est := mc.Prompt(fresh(p), nil)
		if r.Observe("llama3", est, est.Raw*11/10, 8192) {
			t.Fatalf("an honest report read as truncation")
		}
	}
	before := r.Calibration("llama3")
	if before.Observations != 4 || math.Abs(before.Ratio-1.1) > 0.05 {
		t.Fatalf("after four reports at 1.1×: %+v", before)
	}
	big := fresh(msgs[5])
	for range 20 { // a conversation far over num_ctx
		big = append(big, chat.Message{Role: "user", Content: readTestdata(t, "chat_en.txt")})
	}
	est := mc.Prompt(big, nil)
	for range 5 { // persistent truncation, every turn
		if !r.Observe("llama3", est, 4000, 4096) {
			t.Errorf("report of 4000 for an estimate of %d at num_ctx 4096 not read as truncation", est.Tokens)
		}
	}
	if after := r.Calibration("llama3"); after != before {
		t.Errorf("calibration moved on truncated reports: %+v → %+v", before, after)
	}
}

// Without a num_ctx to explain them, reports that keep looking truncated
// mean the calibration is off: the third is learned from.
func TestObserveRecoversFromWrongCalibration(t *testing.T) {
	r := NewRegistry(Config{Models: map[string]Model{"m": {Multiplier: 3}}}, nil)
	est := r.MessageCounter("m").Prompt(sessions(t, 2, 1, 3, false)[2], nil)
	var flags []bool
	for range 4 {
		flags = append(flags, r.Observe("m", est, est.Raw, 0))
	}
	if want := []bool{true, true, false, false}; fmt.Sprint(flags) != fmt.Sprint(want) {
		t.Errorf("flags = %v, want %v", flags, want)
	}
	if c := r.Calibration("m"); c.Ratio > 1.5 {
		t.Errorf("calibration did not recover: %+v", c)
	}
}

func TestCalibrateOff(t *testing.T) {
	off := false
	r := NewRegistry(Config{Calibrate: &off, Models: map[string]Model{"m": {Multiplier: 1.5}}}, nil)
	for range 5 {
		r.Observe("m", Estimate{Tokens: 150, Raw: 100, Chars: 100}, 300, 0)
	}
	if got := r.Calibration("m"); got.Ratio != 1.5 || got.Observations != 0 {
		t.Errorf("calibration with calibrate: false = %+v, want the fixed multiplier 1.5", got)
	}
	if got := len(r.Calibrations()); got != 0 {
		t.Errorf("Calibrations() has %d entries, want 0", got)
	}
}

func TestCalibrationClamped(t *testing.T) {
	c := newCalibrator(0)
	for i := range 10 {
		c.observe(Estimate{Raw: 1000 + 100*i, Chars: 1000 + 100*i}, 100000)
	}
	if got := c.get(); got.Ratio > maxRatio || got.Offset > maxOffset {
		t.Errorf("calibration %+v beyond the clamps", got)
	}
	if got := newCalibrator(100).get().Ratio; got != maxRatio {
		t.Errorf("prior 100 → ratio %v, want %v", got, maxRatio)
	}
}

func TestCalibrationsStatus(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	r.Observe("a", Estimate{Tokens: 100, Raw: 100, Chars: 120}, 110, 0)
	r.Calibration("b") // known, never observed
	got := r.Calibrations()
	if len(got) != 1 || got["a"].Observations != 1 || math.Abs(got["a"].Ratio-1.1) > 1e-9 {
		t.Errorf("Calibrations() = %+v", got)
	}
}

// Observations and counting run concurrently (go test -race).
func TestCalibrationConcurrent(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	prompts := sessions(t, 3, 2, 20, false)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			mc := r.MessageCounter("llama3")
			for i, p := range prompts {
				est := mc.Prompt(fresh(p), nil)
				r.Observe("llama3", est, est.Raw+g+i, 0)
				r.Calibrations()
			}
		})
	}
	wg.Wait()
	if got := r.Calibration("llama3").Observations; got != 4*len(prompts) {
		t.Errorf("Observations = %d, want %d", got, 4*len(prompts))
	}
}

// TestObserveIgnoresCensored: a report at the window (Ollama cut the
// prompt to num_ctx) is a lower bound; calibration does not learn from
// it, whatever the estimate was.
func TestObserveIgnoresCensored(t *testing.T) {
	r := NewRegistry(Config{}, nil)
	est := Estimate{Tokens: 4000, Raw: 4000, Chars: 4000}
	for range 5 {
		r.Observe("m", est, 8190, 8192) // 2× the estimate, but capped at the window
	}
	if c := r.Calibration("m"); c.Observations != 0 {
		t.Errorf("learned from censored reports: %+v", c)
	}
	r.Observe("m", est, 6000, 8192)
	if c := r.Calibration("m"); c.Observations != 1 {
		t.Errorf("did not learn from an uncensored report: %+v", c)
	}
}
