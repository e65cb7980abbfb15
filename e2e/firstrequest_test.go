//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// TestRealOllama_FirstRequestPrepared measures what ctxproxy spends on the
// first request to a model with a 128,000-token vocabulary over its
// second: with the
// model loaded in Ollama before ctxproxy starts, ctxproxy prepares its
// tokenizer in the background and the first request finds it ready; with
// a model ctxproxy has not prepared, the first request waits for the
// verbose /api/show. It logs the figures (docs/benchmarks.md) and checks
// only that the prepared path was taken: timings are not asserted.
func TestRealOllama_FirstRequestPrepared(t *testing.T) {
	o := need(t)
	const model = "gen-128k"
	ensureModel(t, o, model, vocabgen.BPE(128000, "llama-bpe", 31))
	// Load it in Ollama, so that /api/ps lists it.
	resp, err := http.Post(o.url+"/api/generate", "application/json", strings.NewReader(`{"model":"`+model+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// What ctxproxy itself spends on a request to the model: counting it
	// (/ctxproxy/tokenize counts as the chat path does), without the
	// backend's inference, whose first run after a load is slower too.
	timed := func(p *ctxproxy, seed uint64) time.Duration {
		body, _ := json.Marshal(map[string]any{"model": model, "messages": conversation(seed, 4)})
		start := time.Now()
		resp, err := http.Post(p.url+"/ctxproxy/tokenize", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ Exact bool }
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil || !v.Exact {
			t.Fatalf("tokenize: %v, exact %v", err, v.Exact)
		}
		return took
	}

	prepared := startCtxproxy(t, o.url, exactConfig)
	deadline := time.Now().Add(time.Minute)
	for !logHas(prepared.logPath, "tokenizer prepared before the model's first request") {
		if time.Now().After(deadline) {
			t.Fatal("ctxproxy did not prepare the loaded model's tokenizer within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	first, second := timed(prepared, 960), timed(prepared, 961)
	prepared.stop()

	// Cold: the first request arrives as ctxproxy starts, before any
	// memory sample could prepare the model, and nothing is cached on
	// disk yet. Then a restart on the same tokenizer directory.
	dir := t.TempDir()
	withCache := strings.Replace(exactConfig, "tokens: {calibrate: false}",
		fmt.Sprintf("tokens: {calibrate: false, tokenizer_dir: %q}", dir), 1)
	cold := startCtxproxy(t, o.url, withCache)
	coldFirst, coldSecond := timed(cold, 962), timed(cold, 963)
	// The build prepared from /api/ps (the model is loaded) may still be
	// writing the tokenizer's file when the requests are answered.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if files, _ := filepath.Glob(filepath.Join(dir, "*.vocab")); len(files) > 0 {
			break
		}
	}
	cold.stop()
	restarted := startCtxproxy(t, o.url, withCache)
	cachedFirst, cachedSecond := timed(restarted, 964), timed(restarted, 965)
	restarted.stop()
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("128k vocabulary, first request over the second: prepared %+v (%v, %v), cold %+v (%v, %v), "+
		"restarted with the tokenizer on disk %+v (%v, %v)",
		ms(first-second), ms(first), ms(second), ms(coldFirst-coldSecond), ms(coldFirst), ms(coldSecond),
		ms(cachedFirst-cachedSecond), ms(cachedFirst), ms(cachedSecond))
	if line := logLine(restarted.logPath, `"cached":true`); line == "" {
		t.Error("the restarted ctxproxy did not build the tokenizer from its directory")
	} else {
		t.Logf("the restarted ctxproxy's build from its directory: %s", line)
	}
}

// logLine is the first line of the log at path that holds s, "" if none.
func logLine(path, s string) string {
	data, _ := os.ReadFile(path)
	for line := range bytes.Lines(data) {
		if bytes.Contains(line, []byte(s)) {
			return string(bytes.TrimSpace(line))
		}
	}
	return ""
}

func logHas(path, s string) bool {
	data, _ := os.ReadFile(path)
	return bytes.Contains(data, []byte(s))
}

// TestRealOllama_ModelCreatedIsPrepared: a model created straight on
// Ollama while ctxproxy runs is prepared as soon as Ollama writes its
// manifest, ctxproxy watching Ollama's model directory
// (tokens.models_dir): the listing's interval is an hour here, so only
// the watch can have found it. Its first request through ctxproxy is
// then counted exactly.
func TestRealOllama_ModelCreatedIsPrepared(t *testing.T) {
	o := need(t)
	if o.models == "" {
		t.Skip("start.sh did not say where Ollama keeps its models (OLLAMA_MODELS)")
	}
	// No ceiling: the suite's server holds dozens of models, all
	// prepared at start before the one created here.
	p := startCtxproxy(t, o.url, fmt.Sprintf("backend: {kind: ollama}\ntokens: {calibrate: false, prepare: all, prepare_interval: 1h, "+
		"prepare_max_models: 100000, prepare_max_memory: 1TiB, models_dir: %q}\n", o.models))
	if !logHas(p.logPath, "watching Ollama's models") {
		t.Fatalf("ctxproxy does not watch %s:\n%s", o.models, tail(p.logPath, 20))
	}
	const model = "gen-created-watched"
	if err := createModel(o, model, vocabgen.BPE(32000, "llama-bpe", 77)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, o.url+"/api/delete", strings.NewReader(`{"model":"`+model+`"}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	deadline := time.Now().Add(2 * time.Minute) // a bound for a loaded machine, not a time asserted
	prepared := func() bool {
		for _, rec := range p.logMessages(t, "tokenizer prepared before the model's first request") {
			if rec["model"] == model+":latest" {
				return true
			}
		}
		return false
	}
	for !prepared() {
		if time.Now().After(deadline) {
			t.Fatalf("the model created was not prepared within two minutes of its creation:\n%s", tail(p.logPath, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	res := chat(t, p.url, chatRequest{Model: model, Messages: sevenKB(978)})
	sent, _ := strconv.Atoi(res.header.Get("X-Ctxproxy-Tokens"))
	if sent != res.final.PromptEvalCount {
		t.Errorf("X-Ctxproxy-Tokens %d, prompt_eval_count %d", sent, res.final.PromptEvalCount)
	}
}
