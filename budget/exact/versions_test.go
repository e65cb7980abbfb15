package exact

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

func TestVersionRules(t *testing.T) {
	for v, want := range map[string]bool{"0.17.4": false, "0.24.0": false, "0.30.0": true, "0.34.3": true, "v0.35.0": true, "": true, "0.0.0": false, "dev": true} {
		if got := rulesOf(v).llamaServer; got != want {
			t.Errorf("rulesOf(%q).llamaServer = %v, want %v", v, got, want)
		}
	}
	for v, want := range map[string]bool{"0.34.3": false, "0.34.4": true, "0.40.0": true, "0.17.4": false, "": false, "dev": false} {
		if got := NewerThanChecked(v); got != want {
			t.Errorf("NewerThanChecked(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestLlamaServerRunsEveryArchitecture: from Ollama 0.30 a model of an
// architecture 0.17.4 ran on its own engine (qwen3) is counted as
// llama.cpp runs it.
func TestLlamaServerRunsEveryArchitecture(t *testing.T) {
	kv := ollamaEngine(vocabgen.BPE(2000, "qwen2", 1).KV())
	for version, want := range map[string]string{"0.17.4": "ollama:", "0.34.3": "llama.cpp:"} {
		m, err := New(Show{Version: version, ModelInfo: kv, Template: templates["chatml"]})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.Name(), want) {
			t.Errorf("%s: counted as %q, want %s…", version, m.Name(), want)
		}
	}
}

// TestToolsPrintedAsJSON: a template printing a tool with {{ . }} prints
// the Go struct on 0.17.4 and JSON from 0.30, as each server does; with
// the range's variable too, and inside an if; a field of the tool prints
// alike on both.
func TestToolsPrintedAsJSON(t *testing.T) {
	kv := vocabgen.BPE(2000, "llama-bpe", 1).KV()
	tools := tools()
	want, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
		"name": tools[0].Function.Name, "description": tools[0].Function.Description,
		"parameters": json.RawMessage(mustJSON(t, tools[0].Function.Parameters))}})
	for _, tmpl := range []string{
		"{{ range .Tools }}{{ . }}\n{{ end }}{{ range .Messages }}{{ .Content }}{{ end }}",
		"{{ range $i, $t := $.Tools }}{{ if $t }}{{ $t }}{{ end }}\n{{ end }}{{ range .Messages }}{{ .Content }}{{ end }}",
	} {
		for _, version := range []string{"0.17.4", "0.34.3"} {
			m, err := New(Show{Version: version, ModelInfo: kv, Template: tmpl})
			if err != nil {
				t.Fatal(err)
			}
			text, err := m.Render(Prompt{Messages: []api.Message{{Role: "user", Content: "hi"}}, Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(text, "\n")
			isJSON := json.Valid([]byte(first))
			if isJSON != (version == "0.34.3") {
				t.Errorf("%s, %q: the tool printed as %.120q", version, tmpl, first)
			}
			if !isJSON && !strings.HasPrefix(first, "{function ") {
				t.Errorf("%s: the tool printed as %q, want Go's struct", version, first)
			}
			if isJSON && !jsonEqual(first, string(want)) {
				t.Errorf("%s: tool JSON %s, want %s", version, first, want)
			}
		}
	}
	m, err := New(Show{Version: "0.34.3", ModelInfo: kv, Template: "{{ range .Tools }}{{ .Function.Name }} {{ end }}"})
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := m.Render(Prompt{Tools: tools}); strings.Contains(text, "{") {
		t.Errorf("a field of a tool printed as JSON: %q", text)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

// TestLeadingBOSTakenOff: from 0.30 the BOS text a renderer writes first
// is taken off before llama-server adds its own, when the file says it
// adds one; 0.17.4 evaluated both.
func TestLeadingBOSTakenOff(t *testing.T) {
	bos := "<｜begin▁of▁sentence｜>"
	v := vocabgen.BPE(2000, "deepseek-v3", 1).WithSpecials(bos, "<｜User｜>", "<｜Assistant｜>")
	kv := v.KV()
	kv["general.architecture"] = "deepseek2"
	kv["tokenizer.ggml.bos_token_id"] = float64(len(v.Tokens) - 3)
	kv["tokenizer.ggml.add_bos_token"] = true
	p := Prompt{Messages: []api.Message{{Role: "user", Content: "hello there"}}}
	count := func(version string) int {
		m, err := New(Show{Version: version, ModelInfo: kv, Renderer: "deepseek3.1"})
		if err != nil {
			t.Fatal(err)
		}
		text, err := m.Render(p)
		if err != nil || !strings.HasPrefix(text, bos) {
			t.Fatalf("%s: the renderer wrote %q (%v)", version, text, err)
		}
		n, _, err := m.Count(p)
		if err != nil {
			t.Fatal(err)
		}
		llamaCpp := m.OtherEngine()
		if version == "0.17.4" && llamaCpp != nil && strings.HasPrefix(llamaCpp.Name(), "llama.cpp") {
			n, _, _ = llamaCpp.Count(p) // the same runner as 0.34.3, for the comparison
		}
		return n
	}
	if old, now := count("0.17.4"), count("0.34.3"); now != old-1 {
		t.Errorf("0.34.3 counts %d, 0.17.4 on llama.cpp %d: want one BOS fewer", now, old)
	}
}

// TestCompatPre: from 0.30 Ollama's compatibility layer gives the files
// its converter wrote the pre-tokenizer llama.cpp expects, and ctxproxy
// counts with that one; 0.17.4 reads the file's.
func TestCompatPre(t *testing.T) {
	kv := func(arch, pre string, extra map[string]any) map[string]any {
		kv := vocabgen.BPE(600, pre, 1).KV()
		kv["general.architecture"] = arch
		for k, v := range extra {
			kv[k] = v
		}
		return kv
	}
	llama3 := make([]any, 128010)
	for i := range llama3 {
		llama3[i] = fmt.Sprintf("t%d", i)
	}
	llama3[128006], llama3[128009] = "<|start_header_id|>", "<|eot_id|>"
	for _, c := range []struct {
		name   string
		kv     map[string]any
		vision bool
		want   string // on 0.34.3
	}{
		{"gpt-oss", kv("gptoss", "default", nil), false, "gpt-4o"},
		{"glm-4.7-flash", kv("glm4moelite", "llama-bpe", nil), false, "glm4"},
		{"glm-ocr", kv("glmocr", "llama-bpe", nil), false, "chatglm-bpe"},
		{"mistral 3, vision inside", kv("mistral3", "default", nil), true, "tekken"},
		{"mistral 3, Ollama's rope keys", kv("mistral3", "default", map[string]any{"mistral3.rope.scaling_beta": 0.1}), false, "tekken"},
		{"mistral 3, llama.cpp's file", kv("mistral3", "default", nil), false, "default"},
		{"mistral 3, its own pre", kv("mistral3", "gpt-4o", nil), true, "gpt-4o"},
		{"llama 3 without pre", kv("llama", "default", map[string]any{"tokenizer.ggml.tokens": llama3}), false, "llama-bpe"},
		{"llama, not 3", kv("llama", "default", nil), false, "default"},
		{"qwen3", kv("qwen3", "qwen2", nil), false, "qwen2"},
	} {
		for _, version := range []string{"0.17.4", "0.34.3"} {
			want := c.want
			if version == "0.17.4" {
				want, _ = c.kv["tokenizer.ggml.pre"].(string)
			}
			if got := rulesOf(version).tokenizerPre(c.kv, c.vision); got != want {
				t.Errorf("%s on %s: pre %q, want %q", c.name, version, got, want)
			}
		}
	}
	m, err := New(Show{Version: "0.34.3", ModelInfo: kv("gptoss", "default", nil), Template: "{{ .Prompt }}"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "llama.cpp:gpt2/gpt-4o" {
		t.Errorf("gpt-oss on 0.34.3 counted as %s", m.Name())
	}
}

// TestLeadingBOSOfNewerRenderers: the renderers Ollama added after 0.17.4
// have their own LeadingBOS on 0.34.3, which the server takes off whatever
// the model's BOS token is called; those that write none leave the
// prompt as it is, even where it starts with the model's BOS text. Only
// a renderer of a newer Ollama than ctxproxy knows is taken to write the
// model's own.
func TestLeadingBOSOfNewerRenderers(t *testing.T) {
	adds := true
	e := engine{kind: "gpt2", bosKey: &adds, bosText: "<s>"}
	rules := rulesOf("0.34.3")
	for renderer, bos := range map[string]string{
		"gemma4": "<bos>", "gemma4-small": "<bos>", "gemma4-large": "<bos>", "laguna": "〈|EOS|〉",
		"poolside-v1": "〈|EOS|〉", "cohere": "<BOS_TOKEN>", "glimmer": "<|begin_of_text|>",
	} {
		if got := rules.sent(bos+"<s>hi", renderer, e); got != "<s>hi" {
			t.Errorf("%s: sent %q, want %q taken off", renderer, got, bos)
		}
	}
	for _, renderer := range []string{"qwen3.8", "ornith", "nemotron-3.5-nano"} {
		if got := rules.sent("<s>hi", renderer, e); got != "<s>hi" {
			t.Errorf("%s writes no BOS, yet %q was sent", renderer, got)
		}
	}
	if got := rules.sent("<s>hi", "a-renderer-of-a-newer-ollama", e); got != "hi" {
		t.Errorf("a renderer ctxproxy does not know: sent %q, want the model's BOS text taken off", got)
	}
	if got := rulesOf("0.17.4").sent("<BOS_TOKEN>hi", "cohere", e); got != "<BOS_TOKEN>hi" {
		t.Errorf("0.17.4 takes nothing off, yet %q was sent", got)
	}
}
