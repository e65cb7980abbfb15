//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// TestRealOllama_FiveModels measures what a model new to ctxproxy costs,
// as a person switching models in a chat UI meets it: five models of
// 128,000–201,088-token vocabularies (four distinct, the fifth the
// first's vocabulary under another template; num_ctx 32,768 in their
// Modelfiles) are created directly on Ollama while one ctxproxy runs,
// once each sent 30 s after it was created and once right after (the
// second five of vocabularies of their own). Each model's first request
// (a conversation of about 7 KB: 3,700–3,900 tokens of these generated
// vocabularies) is sent straight to Ollama (which loads the model), twice
// more straight to Ollama (the faster kept), then twice through ctxproxy;
// what ctxproxy added is its first less the direct one, and "beyond" is
// that less the difference of Ollama's own total_duration for the two. ctxproxy's VmRSS
// is read before the first model is created and after each model. The
// figures are logged (docs/benchmarks.md), not asserted; every count
// through ctxproxy must equal prompt_eval_count.
//
// It takes about four minutes and is not in CI: FIVE_MODELS=1 runs it,
// FIVE_MODELS_TOKENS sets ctxproxy's tokens.prepare keys in place of the
// defaults.
func TestRealOllama_FiveModels(t *testing.T) {
	if os.Getenv("FIVE_MODELS") == "" {
		t.Skip("FIVE_MODELS=1 runs it (about six minutes)")
	}
	o := need(t)
	// ctxproxy's defaults but calibration: num_ctx from the memory free,
	// the Modelfile's 32,768 its ceiling, as Ollama loaded the model;
	// every model prepared (named, so that the harness leaves it).
	// Ollama's model directory watched, as ctxproxy's auto finds it
	// beside a server on loopback.
	tokens := cmp.Or(os.Getenv("FIVE_MODELS_TOKENS"), "prepare: all, models_dir: "+strconv.Quote(o.models)) // e.g. "prepare: loaded, prepare_interval: 30s, models_dir: none"
	yaml := "backend: {kind: ollama}\ntokens: {calibrate: false, " + tokens + "}\n"
	p := startCtxproxy(t, o.url, yaml)
	time.Sleep(2 * time.Second) // the first listing of the backend's models
	idle := vmRSS(t, p.cmd.Process.Pid)

	// Each round has vocabularies of its own: nothing of the first
	// round's tables serves the second.
	type vocab struct {
		name  string
		size  int
		pre   string
		file  string
		share bool
	}
	dir := t.TempDir()
	round := func(r int) []vocab {
		vs := []vocab{{"llama3", 128256, "llama-bpe", "", false}, {"qwen3", 151936, "qwen2", "", false},
			{"deepseek3", 129280, "deepseek-v3", "", false}, {"gptoss", 201088, "gpt-4o", "", false}}
		for i := range vs {
			vs[i].file = filepath.Join(dir, fmt.Sprintf("%s-%d.gguf", vs[i].name, r))
			v := vocabgen.BPE(vs[i].size, vs[i].pre, uint64(41+10*r+i))
			if err := ggufgen.Write(vs[i].file, v, ggufgen.Shape{Seed: 5, Context: 32768}); err != nil {
				t.Fatal(err)
			}
		}
		// The fifth model: the first's file under another template.
		first := vs[0]
		first.name, first.share = first.name+" (shared)", true
		return append(vs, first)
	}
	params := map[string]any{"num_ctx": 32768, "num_predict": 4, "stop": []string{"<|im_end|>"}}
	other := strings.Replace(chatMLTemplate, "<|im_start|>", "<|im_start|> ", 1)
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }

	var b strings.Builder
	var loads []string
	created := map[string]time.Time{}
	fmt.Fprintf(&b, "idle VmRSS %.1f MiB\n", idle)
	fmt.Fprintf(&b, "%-11s %-17s %9s %9s %9s %9s %9s %7s %7s %11s\n", "when", "model", "direct", "ctxproxy", "added", "beyond", "second", "tokens", "num_ctx", "VmRSS")
	for r, when := range []string{"30s after", "right after"} {
		for i, v := range round(r) {
			tmpl := chatMLTemplate
			if v.share {
				tmpl = other
			}
			name := fmt.Sprintf("five-%d-%d", r, i)
			if err := createFromFile(o, name, v.file, &api.CreateRequest{Template: tmpl, Parameters: params}); err != nil {
				t.Fatalf("creating %s: %v", name, err)
			}
			created[name+":latest"] = time.Now()
			if r == 0 {
				time.Sleep(30 * time.Second)
			}
			req := chatRequest{Model: name, Messages: sevenKB(uint64(100 + i))}
			chat(t, o.url, req) // loads the model in Ollama
			timed := func(base string) (chatResult, time.Duration) {
				start := time.Now()
				res := chat(t, base, req)
				return res, time.Since(start)
			}
			dres, direct := timed(o.url)
			if r2, d2 := timed(o.url); d2 < direct {
				dres, direct = r2, d2
			}
			res, through := timed(p.url)
			// What ctxproxy added outside Ollama's own time for the
			// request (its total_duration, which varies by tens of ms
			// from one request to the next on this machine).
			beyond := (through - res.final.TotalDuration) - (direct - dres.final.TotalDuration)
			// Ollama's own load and prompt times, direct and through.
			loads = append(loads, fmt.Sprintf("%s: load %s / %s, prompt eval %s / %s", name,
				ms(dres.final.LoadDuration), ms(res.final.LoadDuration), ms(dres.final.PromptEvalDuration), ms(res.final.PromptEvalDuration)))
			_, second := timed(p.url)
			sent, _ := strconv.Atoi(res.header.Get("X-Ctxproxy-Tokens"))
			if sent != res.final.PromptEvalCount {
				t.Errorf("%s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", name, sent, res.final.PromptEvalCount)
			}
			rss := vmRSS(t, p.cmd.Process.Pid)
			fmt.Fprintf(&b, "%-11s %-17s %9s %9s %9s %9s %9s %7d %7s %7.1f MiB\n", when, v.name, ms(direct), ms(through), ms(through-direct), ms(beyond), ms(second), sent,
				res.header.Get("X-Ctxproxy-Num-Ctx"), rss)
		}
	}
	fmt.Fprintf(&b, "Ollama's times, direct / through ctxproxy:\n  %s\n", strings.Join(loads, "\n  "))
	// What Ollama itself takes to answer /api/show for a model of each
	// vocabulary it has not been asked about: plain (what a first
	// request forwarded uncounted waits for) and verbose (the vocabulary).
	for i, v := range round(2)[:4] {
		name := fmt.Sprintf("five-show-%d", i)
		if err := createFromFile(o, name, v.file, &api.CreateRequest{Template: chatMLTemplate, Parameters: params}); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		show := func(verbose bool) time.Duration {
			body, _ := json.Marshal(map[string]any{"model": name, "verbose": verbose})
			start := time.Now()
			resp, err := http.Post(o.url+"/api/show", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return time.Since(start)
		}
		plain := show(false)
		verbose := show(true)
		fmt.Fprintf(&b, "Ollama's /api/show for %s: plain %s, verbose %s\n", v.name, ms(plain), ms(verbose))
	}
	// Where ctxproxy built each tokenizer, and how long the build took.
	for _, rec := range p.logMessages(t, "exact token counts from the model's own tokenizer") {
		took, _ := rec["took"].(float64)
		fmt.Fprintf(&b, "built %v: %s (from disk %v)\n", rec["model"], ms(time.Duration(took)), rec["cached"])
	}
	mib := func(v any) float64 { f, _ := v.(float64); return f / (1 << 20) }
	// When each model was ready, counted from its creation's answer.
	for _, rec := range p.logMessages(t, "tokenizer prepared") {
		at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["time"]))
		if c, ok := created[fmt.Sprint(rec["model"])]; ok {
			fmt.Fprintf(&b, "prepared %v %s after it was created, its vocabulary's tables %.1f MiB\n", rec["model"], ms(at.Sub(c)), mib(rec["vocabulary_bytes"]))
		} else {
			fmt.Fprintf(&b, "prepared %v, its vocabulary's tables %.1f MiB\n", rec["model"], mib(rec["vocabulary_bytes"]))
		}
	}
	t.Log("first requests, direct and through ctxproxy:\n" + b.String())
}

// sevenKB is a conversation of about 7 KB: about 2,000 tokens of a
// generated vocabulary.
func sevenKB(seed uint64) []api.Message {
	r := rand.New(rand.NewPCG(seed, 7))
	msgs := []api.Message{{Role: "system", Content: "You answer briefly."}}
	size := 0
	for i := 0; size < 7000; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		content := prose(r, 400+r.IntN(200))
		size += len(content)
		msgs = append(msgs, api.Message{Role: role, Content: content})
	}
	if msgs[len(msgs)-1].Role != "user" {
		msgs = append(msgs, api.Message{Role: "user", Content: "And so?"})
	}
	return msgs
}

// vmRSS is process pid's resident set, in MiB.
func vmRSS(t *testing.T, pid int) float64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		if kb, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(string(kb)), " kB"))
			return float64(n) / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
