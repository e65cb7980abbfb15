//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// codingAgent is one coding-agent CLI from npm, run non-interactively
// with a one-line task as a user runs it, with only its base URL moved.
type codingAgent struct {
	name  string // as docs/agents.md names it
	route string // the API it speaks
	bin   string // its command in e2e/agents/node_modules/.bin
	// setup returns the arguments and environment of one run; it may
	// write the agent's own configuration into r.home.
	setup func(r agentRun) (args, env []string, err error)
}

// agentRun is one run of an agent: against base, with model, in a home
// and a working directory of its own.
type agentRun struct {
	base, model, home, work, prompt string
	// output is the reply limit the agent is told, where it can be.
	output int
}

// deadProxy sends what an agent fetches besides its API (updates,
// telemetry) to a port that refuses at once; Qwen Code and Continue
// would send their API requests there too, and get the agents' own
// switches only.
var deadProxy = []string{"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9"}

// codingAgents are the five agents of docs/agents.md, set up as that page
// says.
var codingAgents = []codingAgent{
	{
		name: "Claude Code", route: "/v1/messages", bin: "claude",
		setup: func(r agentRun) ([]string, []string, error) {
			env := []string{"ANTHROPIC_BASE_URL=" + r.base, "ANTHROPIC_API_KEY=sk-ant-e2e",
				"ANTHROPIC_MODEL=" + r.model, "ANTHROPIC_SMALL_FAST_MODEL=" + r.model, "ANTHROPIC_DEFAULT_HAIKU_MODEL=" + r.model,
				"ANTHROPIC_DEFAULT_SONNET_MODEL=" + r.model, "ANTHROPIC_DEFAULT_OPUS_MODEL=" + r.model,
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1",
				"DISABLE_ERROR_REPORTING=1", "DISABLE_BUG_COMMAND=1", "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1",
				"CLAUDE_CODE_MAX_OUTPUT_TOKENS=" + strconv.Itoa(r.output)}
			env = append(env, deadProxy...)
			return []string{"-p", r.prompt, "--model", r.model}, env, nil
		},
	},
	{
		name: "Codex", route: "/v1/responses", bin: "codex",
		setup: func(r agentRun) ([]string, []string, error) {
			dir := filepath.Join(r.home, ".codex")
			cfg := "check_for_update_on_startup = false\n" +
				"[analytics]\nenabled = false\n[feedback]\nenabled = false\n[otel]\nexporter = \"none\"\n" +
				"[features]\nplugins = false\nremote_plugin = false\napps = false\n"
			if err := writeFile(filepath.Join(dir, "config.toml"), cfg); err != nil {
				return nil, nil, err
			}
			env := append([]string{"CODEX_HOME=" + dir, "CODEX_OSS_BASE_URL=" + r.base + "/v1", "OPENAI_API_KEY=sk-e2e"}, deadProxy...)
			return []string{"exec", "--oss", "--local-provider", "ollama", "-m", r.model + ":latest", "--skip-git-repo-check", r.prompt}, env, nil
		},
	},
	{
		name: "opencode", route: "/v1/chat/completions", bin: "opencode",
		setup: func(r agentRun) ([]string, []string, error) {
			cfg, err := json.Marshal(map[string]any{
				"$schema": "https://opencode.ai/config.json", "autoupdate": false, "share": "disabled",
				"model": "ollama/" + r.model, "small_model": "ollama/" + r.model,
				"provider": map[string]any{"ollama": map[string]any{
					"npm": "@ai-sdk/openai-compatible", "name": "Ollama",
					"options": map[string]any{"baseURL": r.base + "/v1", "apiKey": "sk-e2e"},
					"models":  map[string]any{r.model: map[string]any{"name": r.model, "limit": map[string]any{"context": 131072, "output": r.output}}},
				}},
			})
			if err != nil {
				return nil, nil, err
			}
			// The configuration in the environment: a file under
			// ~/.config/opencode makes it install a plugin from npm.
			env := []string{"OPENCODE_CONFIG_CONTENT=" + string(cfg), "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1",
				"OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
				"OPENCODE_DISABLE_CLAUDE_CODE=1", "OPENCODE_DISABLE_EXTERNAL_SKILLS=1", "npm_config_registry=http://127.0.0.1:9/"}
			env = append(env, deadProxy...)
			return []string{"run", "--print-logs", "--log-level", "WARN", "-m", "ollama/" + r.model, r.prompt}, env, nil
		},
	},
	{
		name: "Qwen Code", route: "/v1/chat/completions", bin: "qwen",
		setup: func(r agentRun) ([]string, []string, error) {
			settings := `{"security":{"auth":{"selectedType":"openai"}},"general":{"enableAutoUpdate":false},` +
				`"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},"ide":{"enabled":false}}`
			if err := writeFile(filepath.Join(r.home, ".qwen", "settings.json"), settings); err != nil {
				return nil, nil, err
			}
			env := []string{"OPENAI_BASE_URL=" + r.base + "/v1", "OPENAI_API_KEY=sk-e2e", "OPENAI_MODEL=" + r.model,
				"QWEN_CODE_MAX_OUTPUT_TOKENS=" + strconv.Itoa(r.output), "QWEN_CODE_DISABLE_PRECONNECT=1"}
			return []string{"-p", r.prompt, "--auth-type", "openai", "-m", r.model}, env, nil
		},
	},
	{
		name: "Continue", route: "/v1/chat/completions", bin: "cn",
		setup: func(r agentRun) ([]string, []string, error) {
			path := filepath.Join(r.home, ".continue", "config.yaml")
			cfg := fmt.Sprintf("name: ctxproxy-e2e\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: %[1]s\n    provider: ollama\n"+
				"    model: %[1]s\n    apiBase: %[2]s\n    roles: [chat, edit, apply]\n"+
				"    defaultCompletionOptions:\n      contextLength: 131072\n      maxTokens: %[3]d\n", r.model, r.base, r.output)
			if err := writeFile(path, cfg); err != nil {
				return nil, nil, err
			}
			env := []string{"CONTINUE_CLI_ENABLE_TELEMETRY=0", "CONTINUE_METRICS_ENABLED=0"}
			return []string{"-p", r.prompt, "--config", path}, env, nil
		},
	},
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// agentResult is what one run of an agent did.
type agentResult struct {
	exit   int
	output string // the end of its stdout and stderr
	took   time.Duration
	chats  []recorded // its chat requests, as the recorder in front saw them
}

// installAgents installs the pinned agents of e2e/agents (npm install
// from the lockfile: npm ci refuses a lockfile without the other
// platforms' optional packages, which hold these agents' binaries) and
// returns their .bin directory; without npm it skips, or fails when CI
// is set.
func installAgents(t *testing.T) string {
	t.Helper()
	missing := t.Skip
	if os.Getenv(envCI) != "" {
		missing = t.Fatal
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing("npm is not installed: the coding agents come from npm (e2e/README.md)")
	}
	dir := filepath.Join(suite.repo, "e2e", "agents")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		ci := exec.CommandContext(ctx, npm, "install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
		ci.Dir = dir
		if out, err := ci.CombinedOutput(); err != nil {
			t.Fatalf("npm install in %s: %v\n%s", dir, err, out)
		}
		t.Logf("npm install of the agents took %s", time.Since(start).Round(time.Second))
	}
	return filepath.Join(dir, "node_modules", ".bin")
}

// runAgent runs a once against base, in a fresh home and working
// directory (a git repository, as agents expect), and returns what it did
// as rec, the recorder base points at, saw.
func runAgent(t *testing.T, bin string, a codingAgent, rec *recorder, model string, output int) agentResult {
	t.Helper()
	root := t.TempDir()
	r := agentRun{base: rec.url, model: model, home: filepath.Join(root, "home"), work: filepath.Join(root, "work"),
		prompt: "Say hi", output: output}
	for _, d := range []string{r.home, r.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git := exec.Command("git", "-c", "user.email=e2e@ctxproxy", "-c", "user.name=e2e", "init", "-q", ".")
	git.Dir = r.work
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	args, env, err := a.setup(r)
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := len(rec.chats())
	cmd := exec.CommandContext(ctx, filepath.Join(bin, a.bin), args...)
	cmd.Dir = r.work
	cmd.Env = append([]string{"PATH=" + filepath.Dir(node) + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + r.home,
		"TERM=dumb", "NO_PROXY=127.0.0.1,localhost"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run()
	res := agentResult{took: time.Since(start), output: tailString(out.String(), 1500)}
	if cmd.ProcessState != nil {
		res.exit = cmd.ProcessState.ExitCode()
	} else if runErr != nil {
		t.Fatalf("%s did not start: %v", a.name, runErr)
	}
	// Requests the agent left in flight as it exited end with it.
	deadline := time.Now().Add(10 * time.Second)
	for rec.busy() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	res.chats = rec.chats()[before:]
	return res
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// agentTemplate is the agents' model's template: ChatML, the tools as
// JSON (the same text on every Ollama version), tool calls as Qwen
// writes them.
const agentTemplate = `{{- if .Tools }}<|im_start|>system
# Tools
{{ range .Tools }}{{ json . }}
{{ end }}<|im_end|>
{{ end }}{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}{{ range .ToolCalls }}
<tool_call>{{ json .Function }}</tool_call>{{ end }}<|im_end|>
{{ end }}<|im_start|>assistant
`

// agentModelNumCtx is the num_ctx of the agents' model's Modelfile: the
// window Ollama runs it with directly, and ctxproxy's ceiling for it.
const agentModelNumCtx = 32768

// agentAnswer is what the agents' model answers to every prompt, before
// it ends its reply on its own: an agent takes a reply cut by its output
// limit for an error (Claude Code exits 1), or asks again.
const agentAnswer = "Hi"

// createAgentModel creates the agents' model: a 131,072-token llama of
// vocabulary v with agentTemplate and PARAMETER num_ctx numCtx, which
// answers agentAnswer and stops (at 16 tokens, should it not).
func createAgentModel(t *testing.T, o *ollamaServer, name string, v vocabgen.Vocab, numCtx int) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, name+".gguf")
	shape := ggufgen.Shape{Seed: 7, Context: 131072, Answer: agentAnswer}
	if err := ggufgen.Write(path, v.WithNormal(agentAnswer), shape); err != nil {
		t.Fatal(err)
	}
	if err := createFromFile(o, name, path, &api.CreateRequest{Template: agentTemplate,
		Parameters: map[string]any{"num_predict": 16, "num_ctx": numCtx, "stop": []string{"<|im_end|>"}}}); err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
}

// corpusOf returns the texts of recorded requests that a vocabulary is
// trained on: each body as sent (the JSON of tools and schemas) and its
// strings unescaped (prompts as the template prints them).
func corpusOf(chats []recorded) []string {
	var out []string
	for _, x := range chats {
		out = append(out, string(x.Req))
		var v any
		if json.Unmarshal(x.Req, &v) == nil {
			var s []string
			jsonStrings(v, &s)
			out = append(out, strings.Join(s, "\n"))
		}
	}
	return out
}

func jsonStrings(v any, out *[]string) {
	switch x := v.(type) {
	case string:
		*out = append(*out, x)
	case []any:
		for _, e := range x {
			jsonStrings(e, out)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			jsonStrings(x[k], out)
		}
	}
}

// agentVocabSize is the size of the vocabulary trained on the agents'
// requests: large enough that their 5–80 KB prompts take a few thousand
// tokens, which this CPU evaluates in seconds.
const agentVocabSize = 32000

// agentsConfig: ctxproxy as a user runs it, with exact counts only.
const agentsConfig = `
backend: {kind: ollama}
tokens: {calibrate: false}
`

// TestRealOllama_CodingAgents runs the five coding agents of
// docs/agents.md (e2e/agents, pinned versions from npm), each with a
// one-line task, directly against the real Ollama and through ctxproxy,
// on a model whose Modelfile sets num_ctx:
//
//  1. each agent's requests are captured on a placeholder model, and a
//     vocabulary is trained on them, so that the same prompts take a few
//     thousand tokens of the real test model (vocabgen.Trained);
//  2. through ctxproxy each agent exits as it does directly, with as many
//     chat requests, every one answered 200 with X-Ctxproxy-Tokens equal
//     to the prompt_eval_count Ollama reports for what ctxproxy
//     forwarded, at the model's own num_ctx, in a session named after
//     the agent's own id where it sends one;
//  3. at a window smaller than the agent's prompt, what ctxproxy forwards
//     is evaluated whole, the tools and the last message are whole, and
//     the system prompt is what was cut, as the notice says.
func TestRealOllama_CodingAgents(t *testing.T) {
	o := need(t)
	bin := installAgents(t)
	const model = "agent"

	// 1. The agents' prompts, on a placeholder with the tiny suite's
	// vocabulary: Ollama cuts them to its num_ctx of 4096, so this is
	// quick.
	createAgentModel(t, o, model, vocabgen.BPE(256+16+len(vocabgen.Specials), "default", 1), 4096)
	capture := startRecorder(t, o.url)
	var corpus []string
	for _, a := range codingAgents {
		res := runAgent(t, bin, a, capture, model, 16)
		if len(res.chats) == 0 {
			t.Fatalf("%s sent no chat request to capture (exit %d, %s):\n%s", a.name, res.exit, res.took.Round(time.Second), res.output)
		}
		corpus = append(corpus, corpusOf(res.chats)...)
	}
	start := time.Now()
	v := vocabgen.Trained(corpus, agentVocabSize)
	t.Logf("vocabulary of %d tokens trained on %d texts in %s", len(v.Tokens), len(corpus), time.Since(start).Round(time.Millisecond))
	createAgentModel(t, o, model, v, agentModelNumCtx)

	// 2. Directly, then through ctxproxy.
	direct := startRecorder(t, o.url)
	back := startRecorder(t, o.url)
	p := startCtxproxy(t, back.url, agentsConfig)
	front := startRecorder(t, p.url)
	var rows []string
	for _, a := range codingAgents {
		t.Run(a.name, func(t *testing.T) {
			d := runAgent(t, bin, a, direct, model, 16)
			n := len(back.chats())
			th := runAgent(t, bin, a, front, model, 16)
			forwarded := back.chats()[n:]
			checkAgentRun(t, a, d, th, forwarded, agentModelNumCtx)
			rows = append(rows, agentRow(a, "full", d, th, forwarded))
			if t.Failed() || len(th.chats) == 0 {
				return
			}

			// 3. Windows smaller than the prompt: the same model with a
			// Modelfile num_ctx that holds, of the agent's largest
			// request, the tools, the template, the reply's reserve, the
			// last message and what the case leaves room for.
			main := largest(th.chats)
			b := budgetOf(main)
			sys, middle, savable, last := promptParts(t, p, model, forwardedFor(main, forwarded))
			fixed := b["tools"] + b["template"] + b["reserve"] + last
			cases := []struct {
				name     string
				window   int
				sysWhole bool
			}{
				// The system prompt gives way: half of it fits.
				{"the system prompt is cut", fixed + middle + sys/2, false},
			}
			if savable >= 64 {
				// It fits with the last message: the messages between
				// go first (half of what Shrink can take of them), and
				// it stays whole.
				cases = append(cases, struct {
					name     string
					window   int
					sysWhole bool
				}{"the system prompt stays whole", fixed + sys + middle - savable/2, true})
			}
			for _, c := range cases {
				small := fmt.Sprintf("%s-w%d", model, c.window)
				createAgentModel(t, o, small, v, c.window)
				ds := runAgent(t, bin, a, direct, small, 16)
				n := len(back.chats())
				ts := runAgent(t, bin, a, front, small, 16)
				forwarded := back.chats()[n:]
				checkAgentRun(t, a, ds, ts, forwarded, c.window)
				checkSmallWindow(t, c.name, main, ts, forwarded, c.window, c.sysWhole)
				rows = append(rows, agentRow(a, fmt.Sprintf("%d (%s)", c.window, c.name), ds, ts, forwarded))
			}
		})
	}
	t.Logf("agent | window | exit direct / through | chat requests | prompt tokens: direct (Ollama's /v1 route) · through ctxproxy = Ollama's count | took direct / through\n%s",
		strings.Join(rows, "\n"))
}

// checkAgentRun holds a run through ctxproxy against the same run direct:
// the same exit code and number of chat requests, every request answered
// 200 with X-Ctxproxy-Tokens, those counts Ollama's own for what was
// forwarded, at num_ctx, and the session named as the agent names it.
func checkAgentRun(t *testing.T, a codingAgent, d, th agentResult, forwarded []recorded, numCtx int) {
	t.Helper()
	if th.exit != d.exit || th.exit != 0 {
		t.Errorf("%s exited %d through ctxproxy, %d directly; want 0 both:\n%s", a.name, th.exit, d.exit, th.output)
	}
	if len(th.chats) != len(d.chats) || len(th.chats) == 0 {
		t.Errorf("%s sent %d chat requests through ctxproxy, %d directly", a.name, len(th.chats), len(d.chats))
	}
	var counted, evaluated []int
	for i, x := range th.chats {
		if x.Path != a.route {
			t.Errorf("request %d on %s, want %s", i, x.Path, a.route)
		}
		if x.Status != 200 {
			t.Errorf("request %d answered %d: %.600s", i, x.Status, x.Resp)
			continue
		}
		n, err := strconv.Atoi(x.RespHeader.Get("X-Ctxproxy-Tokens"))
		if err != nil {
			t.Errorf("request %d has no X-Ctxproxy-Tokens (headers %v)", i, x.RespHeader)
			continue
		}
		counted = append(counted, n)
		if got := x.RespHeader.Get("X-Ctxproxy-Num-Ctx"); got != strconv.Itoa(numCtx) {
			t.Errorf("request %d ran at num_ctx %s, want the model's own %d", i, got, numCtx)
		}
		if w := x.RespHeader.Values("X-Ctxproxy-Warning"); slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "disagreed") }) {
			t.Errorf("request %d: %q", i, w)
		}
	}
	for i, x := range forwarded {
		n, ok := x.promptTokens()
		if x.Status != 200 || !ok {
			t.Errorf("forwarded request %d: status %d, no prompt_eval_count: %.600s", i, x.Status, x.Resp)
			continue
		}
		evaluated = append(evaluated, n)
	}
	// Agents may send requests side by side: compare as sets.
	slices.Sort(counted)
	slices.Sort(evaluated)
	if !slices.Equal(counted, evaluated) {
		t.Errorf("X-Ctxproxy-Tokens %v, Ollama's prompt_eval_count %v", counted, evaluated)
	}
	want := map[string]string{"Claude Code": "claude-code-", "Codex": "codex-", "opencode": "ses_", "Qwen Code": "fp-", "Continue": "fp-"}[a.name]
	for i, x := range th.chats {
		if s := x.RespHeader.Get("X-Ctxproxy-Session"); !strings.HasPrefix(s, want) {
			t.Errorf("request %d in session %q, want one named %s…", i, s, want)
		}
	}
}

// checkSmallWindow holds a run at a window smaller than the agent's prompt
// against its largest request at the full window: the forwarded prompt
// fits num_ctx (Ollama evaluated it whole: checkAgentRun), the tools and
// the last message are as they were, and the system prompt was cut, as
// the notice says, or, when sysWhole, was not.
func checkSmallWindow(t *testing.T, name string, full recorded, ts agentResult, forwarded []recorded, window int, sysWhole bool) {
	t.Helper()
	if len(ts.chats) == 0 || len(forwarded) == 0 {
		return
	}
	main := largest(ts.chats)
	if n, _ := strconv.Atoi(main.RespHeader.Get("X-Ctxproxy-Tokens")); n > window || n == 0 {
		t.Errorf("%s: forwarded %d tokens at a window of %d", name, n, window)
	}
	if got, want := budgetOf(main)["tools"], budgetOf(full)["tools"]; got != want {
		t.Errorf("%s: tools took %d tokens at the small window, %d at the full one: cut", name, got, want)
	}
	notice := main.RespHeader.Get("X-Ctxproxy-Notice")
	if cut := strings.Contains(notice, "out of the system prompt"); cut == sysWhole {
		t.Errorf("%s: notice %q", name, notice)
	}
	var fwd struct {
		Messages []api.Message `json:"messages"`
	}
	if err := json.Unmarshal(forwardedFor(main, forwarded).Req, &fwd); err != nil || len(fwd.Messages) == 0 {
		t.Fatalf("%s: forwarded body: %v", name, err)
	}
	for i, m := range fwd.Messages {
		cut := strings.Contains(m.Content, "tokens cut …]")
		switch {
		case cut && i == lastNonSystem(fwd.Messages):
			t.Errorf("%s: the last message was cut: %.200q", name, m.Content)
		case cut && sysWhole && m.Role == "system":
			t.Errorf("%s: the system prompt was cut: %.200q", name, m.Content)
		}
	}
}

func lastNonSystem(msgs []api.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != "system" {
			return i
		}
	}
	return -1
}

// forwardedFor is what ctxproxy forwarded for the client request x: the
// forwarded request it counted as X-Ctxproxy-Tokens says (the largest
// otherwise).
func forwardedFor(x recorded, forwarded []recorded) recorded {
	want, _ := strconv.Atoi(x.RespHeader.Get("X-Ctxproxy-Tokens"))
	best := forwarded[0]
	for _, f := range forwarded {
		if n, ok := f.promptTokens(); ok && n == want {
			return f
		}
		if len(f.Req) > len(best.Req) {
			best = f
		}
	}
	return best
}

// promptParts counts a forwarded /api/chat request's messages with
// ctxproxy's /ctxproxy/tokenize: the system messages, the last other
// message, the messages between, and about what Shrink can take of
// those.
func promptParts(t *testing.T, p *ctxproxy, model string, fwd recorded) (system, middle, savable, last int) {
	t.Helper()
	var req struct {
		Messages []api.Message `json:"messages"`
		Tools    []api.Tool    `json:"tools"`
	}
	if err := json.Unmarshal(fwd.Req, &req); err != nil {
		t.Fatalf("forwarded body: %v", err)
	}
	body, _ := json.Marshal(map[string]any{"model": model, "messages": req.Messages, "tools": req.Tools})
	resp, err := http.Post(p.url+"/ctxproxy/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Messages []struct {
			Role   string `json:"role"`
			Tokens int    `json:"tokens"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Messages) != len(req.Messages) {
		t.Fatalf("tokenize: %v (%d shares for %d messages)", err, len(out.Messages), len(req.Messages))
	}
	l := lastNonSystem(req.Messages)
	for i, m := range out.Messages {
		switch {
		case m.Role == "system":
			system += m.Tokens
		case i == l:
			last = m.Tokens
		default:
			middle += m.Tokens
			// Shrink leaves at least 32 tokens of a content and its
			// note: 64 of each message's share stay, to be safe.
			savable += max(m.Tokens-64, 0)
		}
	}
	return system, middle, savable, last
}

// largest is the request ctxproxy counted the most tokens in: an agent's
// main request, beside the small ones some send (a title, a summary).
func largest(chats []recorded) recorded {
	var best recorded
	most := -1
	for _, x := range chats {
		if n, err := strconv.Atoi(x.RespHeader.Get("X-Ctxproxy-Tokens-Before")); err == nil && n > most {
			best, most = x, n
		}
	}
	return best
}

// budgetOf reads X-Ctxproxy-Budget ("total=… system=… tools=…").
func budgetOf(x recorded) map[string]int {
	out := map[string]int{}
	for _, f := range strings.Fields(x.RespHeader.Get("X-Ctxproxy-Budget")) {
		k, v, _ := strings.Cut(f, "=")
		out[k], _ = strconv.Atoi(v)
	}
	return out
}

// agentRow is one line of the test's table.
func agentRow(a codingAgent, window string, d, th agentResult, forwarded []recorded) string {
	counts := func(xs []recorded, header bool) string {
		var s []string
		for _, x := range xs {
			if header {
				s = append(s, x.RespHeader.Get("X-Ctxproxy-Tokens"))
			} else if n, ok := x.promptTokens(); ok {
				s = append(s, strconv.Itoa(n))
			}
		}
		return strings.Join(s, ",")
	}
	return fmt.Sprintf("%s | %s | %d / %d | %d / %d | %s · %s = %s | %s / %s", a.name, window, d.exit, th.exit, len(d.chats), len(th.chats),
		counts(d.chats, false), counts(th.chats, true), counts(forwarded, false), d.took.Round(100*time.Millisecond), th.took.Round(100*time.Millisecond))
}
