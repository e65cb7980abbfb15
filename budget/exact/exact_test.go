package exact

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/template"
	"github.com/ollama/ollama/tokenizer"
)

// Templates of the shapes real models have: ChatML, ChatML with tools
// (the realollama "tiny-tools" model's), and a Llama 3 style template
// that writes tools as JSON and tool results under their own role.
var templates = map[string]string{
	"chatml": `{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
`,
	"chatml-tools": `{{- if .Tools }}<|im_start|>system
tools:{{ range .Tools }} {{ .Function.Name }}{{ end }}<|im_end|>
{{ end }}{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}{{ range .ToolCalls }} call:{{ .Function.Name }}{{ end }}<|im_end|>
{{ end }}<|im_start|>assistant
`,
	"json-tools": `{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{- if .Tools }}<|im_start|>system
Tools: {{ range .Tools }}{{ json . }}
{{ end }}<|im_end|>
{{ end }}{{- range $i, $m := .Messages }}{{- if ne .Role "system" }}<|im_start|>{{ if eq .Role "tool" }}ipython{{ else }}{{ .Role }}{{ end }}
{{ .Content }}{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "parameters": {{ json .Function.Arguments }}}{{ end }}<|im_end|>
{{ end }}{{ end }}<|im_start|>assistant
`,
}

type vocabCase struct {
	name  string
	vocab vocabgen.Vocab
}

// withSpecials adds control tokens to v: many, and some that contain
// others, so the order specials are split in matters.
func withSpecials(v vocabgen.Vocab, n int) vocabgen.Vocab {
	for i := range n {
		v.Tokens = append(v.Tokens, fmt.Sprintf("<|reserved_special_token_%d|>", i))
		v.Types = append(v.Types, vocabgen.TypeControl)
		if v.Scores != nil {
			v.Scores = append(v.Scores, 0)
		}
	}
	for _, sp := range []string{"<|im_start|>user", "<|im", "|>\n<", "ser"} {
		v.Tokens = append(v.Tokens, sp)
		v.Types = append(v.Types, vocabgen.TypeUserDefined)
		if v.Scores != nil {
			v.Scores = append(v.Scores, 0)
		}
	}
	return v
}

func vocabs() []vocabCase {
	return []vocabCase{
		{"bpe-many-specials", withSpecials(vocabgen.BPE(3000, "llama-bpe", 5), 300)},
		{"bpe-default", vocabgen.BPE(3000, "default", 1)},
		{"bpe-llama-bpe", vocabgen.BPE(8000, "llama-bpe", 2)},
		{"bpe-qwen2", vocabgen.BPE(5000, "qwen2", 3)},
		{"spm", vocabgen.SentencePiece(4000, 4)},
	}
}

// reference builds Ollama's tokenizer for v the way its llama model
// package does, independently of New.
func reference(t *testing.T, v vocabgen.Vocab) tokenizer.Tokenizer {
	t.Helper()
	voc := &tokenizer.Vocabulary{
		Values: v.Tokens, Types: v.Types, Scores: v.Scores, Merges: v.Merges,
		AddBOS: v.AddBOS, BOS: []int32{int32(v.BOS)}, EOS: []int32{int32(v.EOS)},
	}
	if v.Model == "gpt2" {
		return tokenizer.NewBytePairEncoding(voc, Pretokenizer(v.Pre)...)
	}
	return tokenizer.NewSentencePiece(voc)
}

// ollamaEngine marks kv as a model Ollama's own engine runs, with an
// architecture whose model code splits text as the vocabulary's
// pre-tokenizer says, as the reference tokenizers here split it: Qwen 3
// for "qwen2", Gemma 3 (the GPT-2 expression) for "default", OLMo 3 (the
// Llama 3 expression) for the others.
func ollamaEngine(kv map[string]any) map[string]any {
	pre, _ := kv["tokenizer.ggml.pre"].(string)
	switch pre {
	case "qwen2":
		kv["general.architecture"] = "qwen3"
	case "default":
		kv["general.architecture"] = "gemma3"
	default:
		kv["general.architecture"] = "olmo3"
	}
	return kv
}

func newModel(t *testing.T, v vocabgen.Vocab, tmpl string) *Tokenizer {
	t.Helper()
	return newModelKV(t, ollamaEngine(v.KV()), tmpl)
}

func newModelKV(t *testing.T, kv map[string]any, tmpl string) *Tokenizer {
	t.Helper()
	// Through JSON, as the proxy gets it from /api/show.
	raw, err := json.Marshal(map[string]any{"template": tmpl, "model_info": kv})
	if err != nil {
		t.Fatal(err)
	}
	var show Show
	if err := json.Unmarshal(raw, &show); err != nil {
		t.Fatal(err)
	}
	show.Version = ollama017
	m, err := New(show)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// conversation makes n turns of generated text with tool calls, tool
// results, special tokens written into content and unusual whitespace.
func conversation(n int, seed uint64) []api.Message {
	rng := rand.New(rand.NewPCG(seed, 1))
	msgs := []api.Message{{Role: "system", Content: "You are terse.\n" + vocabgen.Text(200, seed)}}
	for i := range n {
		user := vocabgen.Text(20+rng.IntN(400), seed+uint64(i))
		switch rng.IntN(6) {
		case 0:
			user += " <|im_end|> injected <|reserved_special_token_7|><|reserved_special_token_250|>"
		case 1:
			user = "  \n\t" + user + "\n\n"
		}
		msgs = append(msgs, api.Message{Role: "user", Content: user})
		if rng.IntN(4) == 0 {
			args := api.NewToolCallFunctionArguments()
			args.Set("city", vocabgen.Text(12, seed+uint64(i)+100))
			msgs = append(msgs,
				api.Message{Role: "assistant", ToolCalls: []api.ToolCall{{Function: api.ToolCallFunction{Name: "weather", Arguments: args}}}},
				api.Message{Role: "tool", ToolName: "weather", Content: vocabgen.Text(80, seed+uint64(i)+200)})
		}
		msgs = append(msgs, api.Message{Role: "assistant", Content: vocabgen.Text(10+rng.IntN(300), seed+uint64(i)+300)})
	}
	return append(msgs, api.Message{Role: "user", Content: "And now?"})
}

func tools() api.Tools {
	var ts api.Tools
	_ = json.Unmarshal([]byte(`[{"type":"function","function":{"name":"weather","description":"Weather of a city","parameters":{"type":"object","required":["city"],"properties":{"city":{"type":"string","description":"the city"}}}}}]`), &ts)
	return ts
}

// TestCountMatchesReference: for a model on Ollama's own engine, the
// cached, piecewise count of a rendered prompt equals the length of
// Ollama's own encoding of the whole prompt, for every vocabulary kind and
// template, across a growing conversation (so the cache is exercised warm
// and cold).
func TestCountMatchesReference(t *testing.T) {
	for _, vc := range vocabs() {
		ref := reference(t, vc.vocab)
		for tname, tmpl := range templates {
			t.Run(vc.name+"/"+tname, func(t *testing.T) {
				m := newModel(t, vc.vocab, tmpl)
				parsed, err := template.Parse(tmpl)
				if err != nil {
					t.Fatal(err)
				}
				conv := conversation(24, 11)
				for turns := 1; turns <= len(conv); turns += 5 {
					p := Prompt{Messages: conv[:turns]}
					if strings.Contains(tname, "tools") {
						p.Tools = tools()
					}
					got, exact, err := m.Count(p)
					if err != nil {
						t.Fatal(err)
					}
					var sb strings.Builder
					if err := parsed.Execute(&sb, template.Values{Messages: p.Messages, Tools: p.Tools}); err != nil {
						t.Fatal(err)
					}
					ids, err := ref.Encode(sb.String(), true)
					if err != nil {
						t.Fatal(err)
					}
					if !exact || got != len(ids) {
						t.Fatalf("%d messages: Count = %d (exact %v), reference encodes %d tokens", turns, got, exact, len(ids))
					}
				}
			})
		}
	}
}

// TestSharesAddUp: for templates that render each message on its own,
// the cached per-message shares plus the overhead equal the whole count,
// so a strategy cutting by shares cuts the real prompt. Checked on every
// prefix of a conversation, warm and cold.
func TestSharesAddUp(t *testing.T) {
	for _, vc := range vocabs() {
		for _, tname := range []string{"chatml", "chatml-tools"} {
			t.Run(vc.name+"/"+tname, func(t *testing.T) {
				m := newModel(t, vc.vocab, templates[tname])
				conv := conversation(12, 5)
				// No two neighbours of one role: the template would join them.
				overhead := -1
				for n := 1; n <= len(conv); n++ {
					p := Prompt{Messages: conv[:n]}
					total, _, err := m.Count(p)
					if err != nil {
						t.Fatal(err)
					}
					sum := 0
					for _, msg := range p.Messages {
						s, err := m.Share(msg, nil)
						if err != nil {
							t.Fatal(err)
						}
						sum += s
					}
					// What belongs to no message must not depend on the
					// messages: then shares plus it are the whole count.
					oh := total - sum
					if oh < 0 {
						t.Fatalf("%d messages: shares %d exceed the count %d", n, sum, total)
					}
					if overhead >= 0 && oh != overhead {
						t.Fatalf("%d messages: overhead moved from %d to %d", n, overhead, oh)
					}
					overhead = oh
				}
			})
		}
	}
}

// TestTokenizerIsNotAByteCount: the generated vocabularies are large
// enough that a tokenizer and a byte or cl100k-like guess disagree, so
// the e2e suite's ±1% check can tell them apart.
func TestTokenizerIsNotAByteCount(t *testing.T) {
	for _, vc := range vocabs() {
		m := newModel(t, vc.vocab, templates["chatml"])
		text := vocabgen.Text(20000, 5)
		n, err := m.CountText(text)
		if err != nil {
			t.Fatal(err)
		}
		perToken := float64(len(text)) / float64(n)
		if perToken < 1.8 {
			t.Errorf("%s: %.2f bytes per token; the vocabulary barely merges", vc.name, perToken)
		}
		approx := (len(text) + 3) / 4
		if d := float64(approx-n) / float64(n); d > -0.05 && d < 0.05 {
			t.Errorf("%s: bytes/4 (%d) is within 5%% of the tokenizer (%d): the test could not tell them apart", vc.name, approx, n)
		}
	}
}

// TestRenderAsTheServer: the Modelfile's SYSTEM is added only when the
// request has no system message of its own, its MESSAGE lines come
// before the request's, and a thinking model gets think=true unless the
// request says otherwise.
func TestRenderAsTheServer(t *testing.T) {
	v := vocabgen.BPE(1000, "default", 1)
	tmpl := `{{ if .System }}S:{{ .System }}|{{ end }}{{ range .Messages }}{{ .Role }}:{{ .Content }}|{{ end }}{{ if .Think }}T{{ end }}`
	raw, _ := json.Marshal(map[string]any{"template": tmpl, "model_info": ollamaEngine(v.KV()), "system": "be brief",
		"messages":     []api.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo"}},
		"capabilities": []string{"completion", "thinking"}})
	var show Show
	if err := json.Unmarshal(raw, &show); err != nil {
		t.Fatal(err)
	}
	show.Version = ollama017
	m, err := New(show)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    Prompt
		want string
	}{
		{"no system", Prompt{Messages: []api.Message{{Role: "user", Content: "q"}}},
			"S:be brief|system:be brief|user:hi|assistant:yo|user:q|T"},
		{"own system", Prompt{Messages: []api.Message{{Role: "system", Content: "mine"}, {Role: "user", Content: "q"}}},
			"S:mine|user:hi|assistant:yo|system:mine|user:q|T"},
		{"think off", Prompt{Messages: []api.Message{{Role: "user", Content: "q"}}, Think: &api.ThinkValue{Value: false}},
			"S:be brief|system:be brief|user:hi|assistant:yo|user:q|"},
		{"images", Prompt{Messages: []api.Message{{Role: "user", Content: "see [img] and", Images: []api.ImageData{{1}, {2}}}}},
			"S:be brief|system:be brief|user:hi|assistant:yo|user:[img-1]see [img-0] and|T"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := m.Render(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Render =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	// The caller's messages are not written into.
	msgs := []api.Message{{Role: "user", Content: "x", Images: []api.ImageData{{1}}}}
	if _, err := m.Render(Prompt{Messages: msgs}); err != nil || msgs[0].Content != "x" {
		t.Errorf("Render changed the caller's message: %q, %v", msgs[0].Content, err)
	}
}

func TestNewRefuses(t *testing.T) {
	bpe := vocabgen.BPE(500, "default", 1).KV()
	for _, tc := range []struct {
		name string
		kv   func(map[string]any)
	}{
		{"no vocabulary", func(kv map[string]any) { delete(kv, "tokenizer.ggml.tokens") }},
		{"unknown model", func(kv map[string]any) { kv["tokenizer.ggml.model"] = "tiktoken" }},
		{"no merges", func(kv map[string]any) { delete(kv, "tokenizer.ggml.merges") }},
		{"types short", func(kv map[string]any) { kv["tokenizer.ggml.token_type"] = []any{1.0} }},
		{"bos outside", func(kv map[string]any) { kv["tokenizer.ggml.bos_token_id"] = 1e6 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := map[string]any{}
			for k, v := range bpe {
				kv[k] = v
			}
			tc.kv(kv)
			if _, err := New(Show{Version: ollama017, ModelInfo: kv}); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
	if _, err := New(Show{Version: ollama017, ModelInfo: bpe, Template: "{{ .Broken"}); err == nil {
		t.Fatal("New accepted a broken template")
	}
}

func TestDetokenizeRoundTrip(t *testing.T) {
	for _, vc := range vocabs()[:1] {
		m := newModel(t, vc.vocab, templates["chatml"])
		text := vocabgen.Text(500, 3)
		ids, err := m.Tokenize(text, false)
		if err != nil {
			t.Fatal(err)
		}
		back, err := m.Detokenize(ids)
		if err != nil || back != text {
			t.Fatalf("round trip: %v\n%q\n%q", err, back, text)
		}
		if _, err := m.Detokenize([]int32{-1}); err == nil {
			t.Fatal("Detokenize accepted -1")
		}
	}
}

func FuzzCountText(f *testing.F) {
	v := vocabgen.BPE(3000, "llama-bpe", 9)
	for _, s := range []string{"", "hello world", "<|im_start|>user\nhi<|im_end|>", "  \n\n\t x", "\xff\xfe", "的一是 123456"} {
		f.Add(s)
	}
	m, err := New(Show{Version: ollama017, ModelInfo: ollamaEngine(v.KV()), Template: templates["chatml"]})
	if err != nil {
		f.Fatal(err)
	}
	ref := tokenizer.NewBytePairEncoding(&tokenizer.Vocabulary{Values: v.Tokens, Types: v.Types, Merges: v.Merges,
		BOS: []int32{int32(v.BOS)}, EOS: []int32{int32(v.EOS)}}, Pretokenizer(v.Pre)...)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := m.CountText(s)
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := ref.Encode(s, false)
		if got != len(ids) {
			t.Fatalf("CountText(%q) = %d, reference %d", s, got, len(ids))
		}
	})
}

func BenchmarkCount(b *testing.B) {
	v := vocabgen.BPE(8000, "llama-bpe", 2)
	m, err := New(Show{Version: ollama017, ModelInfo: ollamaEngine(v.KV()), Template: templates["chatml"]})
	if err != nil {
		b.Fatal(err)
	}
	conv := conversation(100, 3)
	size := 0
	for _, c := range conv {
		size += len(c.Content)
	}
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := 0; b.Loop(); i++ {
			msgs := make([]api.Message, len(conv))
			copy(msgs, conv)
			msgs[0].Content = fmt.Sprint(i) + msgs[0].Content
			for j := range msgs {
				msgs[j].Content += fmt.Sprint(i) // every piece new
			}
			if _, _, err := m.Count(Prompt{Messages: msgs}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("resent", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			if _, _, err := m.Count(Prompt{Messages: conv}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCountText measures cold counting (every text new, nothing
// cached) for each way a model is tokenized: Ollama's Go BPE (the
// Llama 3 family, and models on Ollama's engine), llama.cpp's merging
// BPE (qwen2 and others on its runner) and SentencePiece with llama.cpp's
// space prefix; and, for comparison, Ollama's Go tokenizer called
// directly (the reference, without ctxproxy's piece cache).
func BenchmarkCountText(b *testing.B) {
	text := vocabgen.Text(16<<10, 42)
	for _, tc := range []struct {
		name string
		kv   map[string]any
	}{
		{"ollama-bpe-llama-bpe", vocabgen.BPE(8000, "llama-bpe", 2).KV()},
		{"llama.cpp-bpe-qwen2", vocabgen.BPE(8000, "qwen2", 3).KV()},
		{"llama.cpp-spm", vocabgen.SentencePiece(8000, 4).KV()},
	} {
		m, err := New(Show{Version: ollama017, ModelInfo: tc.kv, Template: templates["chatml"]})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for i := 0; b.Loop(); i++ {
				if _, err := m.CountText(strconv.Itoa(i) + text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	v := vocabgen.BPE(8000, "llama-bpe", 2)
	ref := tokenizer.NewBytePairEncoding(&tokenizer.Vocabulary{Values: v.Tokens, Types: v.Types, Merges: v.Merges,
		BOS: []int32{int32(v.BOS)}, EOS: []int32{int32(v.EOS)}}, Pretokenizer(v.Pre)...)
	b.Run("reference-ollama-tokenizer", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for i := 0; b.Loop(); i++ {
			if _, err := ref.Encode(strconv.Itoa(i)+text, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestRenderer: a model with a built-in renderer (no template) is
// rendered by Ollama's renderer of that name, and counted.
func TestRenderer(t *testing.T) {
	v := vocabgen.BPE(2000, "qwen2", 1)
	kv := ollamaEngine(v.KV())
	m, err := New(Show{Version: ollama017, ModelInfo: kv, Renderer: "qwen3-coder"})
	if err != nil {
		t.Fatal(err)
	}
	p := Prompt{Messages: conversation(3, 1), Tools: tools()}
	text, err := m.Render(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "weather") || !strings.Contains(text, p.Messages[1].Content) {
		t.Errorf("rendered prompt lacks the tools or a message:\n%.400s", text)
	}
	n, exact, err := m.Count(p)
	if err != nil || !exact || n == 0 {
		t.Errorf("Count = %d, %v, %v", n, exact, err)
	}

	// Ollama v0.17.4 names the renderer only in the Modelfile text, and
	// its template is then not what the server renders.
	show := Show{Version: ollama017, ModelInfo: kv, Template: "{{ range .Messages }}{{ .Content }}{{ end }}",
		Modelfile: "# Modelfile generated by \"ollama show\"\nFROM /models/blobs/sha256-0\n" +
			"TEMPLATE \"\"\"{{ range .Messages }}{{ .Content }}\nRENDERER not-this-one\n{{ end }}\"\"\"\n" +
			"RENDERER qwen3-coder\nPARSER qwen3-coder\nPARAMETER stop <|im_end|>\n"}
	fromText, err := New(show)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := fromText.Render(p); got != text {
		t.Errorf("the renderer named in the Modelfile text was not used:\n%.400s", got)
	}

	// A renderer ctxproxy lacks is never counted with the template: on
	// 0.17.4 the model is unsupported, and the error names it; from 0.30
	// the server renders its prompts (ServerRenders), and ctxproxy's own
	// count of one is not exact.
	for _, s := range []Show{{ModelInfo: kv, Renderer: "no-such-renderer"},
		{ModelInfo: kv, Template: show.Template, Modelfile: "FROM x\nRENDERER no-such-renderer\n"}} {
		s.Version = ollama017
		_, err := New(s)
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `"no-such-renderer"`) {
			t.Errorf("an unknown renderer: %v", err)
		}
		s.Version = "0.34.3"
		m, err := New(s)
		if err != nil || !m.ServerRenders() || m.Renderer() != "no-such-renderer" {
			t.Fatalf("an unknown renderer on 0.34.3: %v", err)
		}
		if _, exact, err := m.Count(p); err != nil || exact {
			t.Errorf("counted without the server as exact (%v)", err)
		}
		if n, err := m.Share(p.Messages[0], nil); err != nil || n == 0 {
			t.Errorf("no share for a message of a renderer ctxproxy lacks: %d, %v", n, err)
		}
	}
}

// TestThinkingDroppedFromEarlierReplies: for the qwen3 family and
// deepseek-r1, the server drops the <think> part of the replies before
// the last user message (and only those); other models keep it.
func TestThinkingDroppedFromEarlierReplies(t *testing.T) {
	v := vocabgen.BPE(2000, "qwen2", 1)
	kv := ollamaEngine(v.KV())
	tmpl := "{{ range .Messages }}[{{ .Role }}]{{ .Content }}{{ end }}"
	msgs := []api.Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "<think>hmm</think>b"},
		{Role: "user", Content: "c"}, {Role: "assistant", Content: "<think>later</think>d"}}
	for _, c := range []struct {
		family, name, want string
	}{
		{"qwen3", "qwen3:8b", "[user]a[assistant]b[user]c[assistant]<think>later</think>d"},
		{"llama", "deepseek-r1:8b", "[user]a[assistant]b[user]c[assistant]<think>later</think>d"},
		{"llama", "llama3.1:8b", "[user]a[assistant]<think>hmm</think>b[user]c[assistant]<think>later</think>d"},
	} {
		show := Show{Version: ollama017, ModelInfo: kv, Template: tmpl, Name: c.name}
		show.Details.Family = c.family
		m, err := New(show)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Render(Prompt{Messages: msgs})
		if err != nil || got != c.want {
			t.Errorf("%s (%s): %q, %v; want %q", c.name, c.family, got, err, c.want)
		}
		if msgs[1].Content != "<think>hmm</think>b" {
			t.Fatal("the caller's messages changed")
		}
	}
}

// TestWordPiece: a WordPiece (BERT) vocabulary is counted as Ollama's
// WordPiece encodes it.
func TestWordPiece(t *testing.T) {
	words := vocabgen.Words(3000, 8)
	tokens := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]"}
	types := []int32{3, 2, 3, 3}
	for _, w := range words {
		if strings.ContainsAny(w, " ") {
			continue
		}
		tokens = append(tokens, "▁"+strings.ToLower(w), "##"+strings.ToLower(w))
		types = append(types, 1, 1)
	}
	for c := 'a'; c <= 'z'; c++ {
		tokens = append(tokens, "▁"+string(c), "##"+string(c))
		types = append(types, 1, 1)
	}
	kv := map[string]any{"general.architecture": "bert", "tokenizer.ggml.model": "bert",
		"tokenizer.ggml.tokens": vocabgen.AnySlice(tokens), "tokenizer.ggml.token_type": vocabgen.AnySlice(types),
		"tokenizer.ggml.bos_token_id": 2.0, "tokenizer.ggml.eos_token_id": 3.0}
	m, err := New(Show{Version: ollama017, ModelInfo: kv})
	if err != nil {
		t.Fatal(err)
	}
	ref := tokenizer.NewWordPiece(&tokenizer.Vocabulary{Values: tokens, Types: types}, true)
	for i := range 20 {
		text := vocabgen.Text(300, uint64(i))
		got, err := m.CountText(text)
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := ref.Encode(text, false)
		if got != len(ids) || got == 0 {
			t.Fatalf("CountText = %d, reference %d", got, len(ids))
		}
	}
}

// TestImages: a model without vision gets only an image's tag in the
// text, counted exactly; a vision model is charged 768 per image, an
// estimate of the projector's embeddings.
func TestImages(t *testing.T) {
	v := vocabgen.BPE(2000, "qwen2", 1)
	kv := ollamaEngine(v.KV())
	tmpl := "{{ range .Messages }}[{{ .Role }}]{{ .Content }}{{ end }}"
	msgs := []api.Message{{Role: "user", Content: "look", Images: []api.ImageData{{1}, {2}}}}
	text, err := New(Show{Version: ollama017, ModelInfo: kv, Template: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	n, whole, err := text.Count(Prompt{Messages: msgs})
	want, _ := text.CountPrompt("[user][img-0][img-1]look")
	if err != nil || !whole || n != want {
		t.Errorf("without vision: %d, exact %v, %v; want %d, exact", n, whole, err, want)
	}
	vision, err := New(Show{Version: ollama017, ModelInfo: kv, Template: tmpl, Capabilities: []string{"completion", "vision"}})
	if err != nil {
		t.Fatal(err)
	}
	// With vision, the runner cuts the text at the tags: they cost
	// nothing, each image its projector's tokens.
	n, whole, err = vision.Count(Prompt{Messages: msgs})
	head, _ := vision.CountPrompt("[user]")
	tail, _ := vision.CountText("look")
	if want := head + tail + 2*imageTokens; err != nil || whole || n != want {
		t.Errorf("with vision: %d, exact %v, %v; want %d, an estimate", n, whole, err, want)
	}
	// Gemma 3 on Ollama's engine: mm_tokens_per_image and the four
	// tokens around them.
	gemma := maps.Clone(kv)
	gemma["general.architecture"] = "gemma3"
	gemma["gemma3.mm_tokens_per_image"] = float64(64)
	g, err := New(Show{Version: ollama017, ModelInfo: gemma, Template: tmpl, Capabilities: []string{"completion", "vision"}})
	if err != nil {
		t.Fatal(err)
	}
	head, _ = g.CountPrompt("[user]")
	tail, _ = g.CountText("look")
	// Checked against the real server (e2e TestRealOllama_GemmaVision):
	// an exact count, held against its reports.
	if n, whole, err := g.Count(Prompt{Messages: msgs}); err != nil || !whole || n != head+tail+2*(64+4) {
		t.Errorf("gemma3 with two images: %d, exact %v, %v; want %d, exact", n, whole, err, head+tail+2*(64+4))
	}
	if !g.Vision() || text.Vision() {
		t.Errorf("Vision: %v with the capability, %v without", g.Vision(), text.Vision())
	}
	// Without the key, Ollama's default of 256.
	delete(gemma, "gemma3.mm_tokens_per_image")
	g256, err := New(Show{Version: ollama017, ModelInfo: gemma, Template: tmpl, Capabilities: []string{"completion", "vision"}})
	if err != nil {
		t.Fatal(err)
	}
	if n, whole, _ := g256.Count(Prompt{Messages: msgs}); !whole || n != head+tail+2*(256+4) {
		t.Errorf("gemma3 without mm_tokens_per_image: %d, exact %v; want %d", n, whole, head+tail+2*(256+4))
	}
	// Counted as llama.cpp's runner would run it, Gemma 3's images are
	// the projector's again: an estimate.
	if o := g.OtherEngine(); o == nil {
		t.Error("gemma3 with a qwen2 vocabulary: no other runner")
	} else {
		oh, _ := o.CountPrompt("[user]")
		ot, _ := o.CountText("look")
		if n, whole, _ := o.Count(Prompt{Messages: msgs}); whole || n != oh+ot+2*imageTokens {
			t.Errorf("gemma3 on the other runner: %d, exact %v; want %d, an estimate", n, whole, oh+ot+2*imageTokens)
		}
	}
	// A share charges the image only where the model sees it.
	if s, _ := text.Share(msgs[0], nil); s >= imageTokens {
		t.Errorf("without vision, a message with two images has a share of %d", s)
	}
}

// TestImageSizes: each image is charged its family's cost for its own
// size, in the order the messages hold them; an image of unknown size
// makes the count an estimate; a message's share is keyed by its
// images' sizes.
func TestImageSizes(t *testing.T) {
	// A rule for qwen3 (a text family on Ollama's engine), for the test.
	was, had := visionFamilies["qwen3"]
	visionFamilies["qwen3"] = func(map[string]any) imageCoster {
		return func(img chat.Image) (int, bool) {
			if !img.Known() {
				return imageTokens, false
			}
			return img.Width * img.Height / 100, true
		}
	}
	t.Cleanup(func() {
		delete(visionFamilies, "qwen3")
		if had {
			visionFamilies["qwen3"] = was
		}
	})
	kv := ollamaEngine(vocabgen.BPE(2000, "qwen2", 1).KV())
	m, err := New(Show{Version: ollama017, ModelInfo: kv, Template: "{{ range .Messages }}[{{ .Role }}]{{ .Content }}{{ end }}", Capabilities: []string{"vision"}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []api.Message{
		{Role: "user", Content: "look", Images: make([]api.ImageData, 1)},
		{Role: "assistant", Content: "ok"},
		{Role: "user", Content: "and", Images: make([]api.ImageData, 2)},
	}
	text, _, _ := m.Count(Prompt{Messages: msgs})
	sizes := []chat.Image{{Width: 100, Height: 100}, {Width: 200, Height: 50}, {Width: 10, Height: 30}}
	n, whole, err := m.Count(Prompt{Messages: msgs, Images: sizes})
	if want := text - 3*imageTokens + 100 + 100 + 3; err != nil || !whole || n != want {
		t.Errorf("three sized images: %d, exact %v, %v; want %d, exact", n, whole, err, want)
	}
	if n, whole, _ := m.Count(Prompt{Messages: msgs, Images: sizes[:2]}); whole || n != text-2*imageTokens+200 {
		t.Errorf("the last image's size unknown: %d, exact %v; want %d, an estimate", n, whole, text-2*imageTokens+200)
	}
	small, _ := m.Share(msgs[2], sizes[1:])
	large, _ := m.Share(msgs[2], []chat.Image{{Width: 1000, Height: 1000}, {Width: 10, Height: 30}})
	if large-small != 10000-100 {
		t.Errorf("shares %d and %d: the images' sizes do not tell them apart", small, large)
	}
}

// TestProjectorEstimate: a model whose projector is a file of its own
// runs on llama.cpp, whose images are estimated from the projector's
// facts: LLaVA 1.5's 336-pixel images in 14-pixel patches are 576
// embeddings, MobileVLM's pooled four to one; other types, 768.
func TestProjectorEstimate(t *testing.T) {
	clip := func(typ string) map[string]any {
		return map[string]any{"clip.projector_type": typ, "clip.vision.image_size": float64(336), "clip.vision.patch_size": float64(14)}
	}
	for _, c := range []struct {
		info map[string]any
		want int
	}{
		{clip("mlp"), 576},
		{clip("ldpv2"), 144},
		{clip("resampler"), imageTokens},
		{map[string]any{"clip.projector_type": "mlp"}, imageTokens},
		{nil, imageTokens},
	} {
		if got := projectorEstimate(c.info); got != c.want {
			t.Errorf("%v: %d, want %d", c.info, got, c.want)
		}
	}
	// A Qwen 2.5 VL with its projector apart runs on llama.cpp: its
	// images are the projector's estimate, not the family's rule.
	kv := vocabgen.BPE(2000, "qwen2", 1).KV()
	kv["general.architecture"] = "qwen25vl"
	m, err := New(Show{Version: ollama017, ModelInfo: kv, ProjectorInfo: clip("mlp"), Template: "{{ .Prompt }}", Capabilities: []string{"vision"}})
	if err != nil {
		t.Fatal(err)
	}
	if n, exact := m.imageCost(chat.Image{Width: 640, Height: 480}); n != 576 || exact {
		t.Errorf("qwen25vl with its projector apart: %d, exact %v; want 576, an estimate", n, exact)
	}
}

// TestOtherEngine: a model counted as llama.cpp runs it can be counted as
// Ollama's own engine runs it, and back, where the two differ (a
// SentencePiece space prefix, merges for BPE outside the Llama 3 family);
// where they do not, there is no other engine to try.
func TestOtherEngine(t *testing.T) {
	tmpl := "{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
	spm := vocabgen.SentencePiece(2000, 4)
	m, err := New(Show{Version: ollama017, ModelInfo: spm.KV(), Template: tmpl}) // llama: llama.cpp's runner
	if err != nil {
		t.Fatal(err)
	}
	o := m.OtherEngine()
	if o == nil || o.Name() != "ollama:spm" || m.Name() != "llama.cpp:spm" {
		t.Fatalf("other engine of %s: %v", m.Name(), o)
	}
	p := Prompt{Messages: []api.Message{{Role: "user", Content: "hello there"}, {Role: "assistant", Content: "general kenobi"}}}
	a, _, _ := m.Count(p)
	b, _, _ := o.Count(p)
	if a == b {
		t.Errorf("both engines counted %d: the space prefix made no difference", a)
	}
	if back := o.OtherEngine(); back == nil || back.Name() != m.Name() {
		t.Errorf("the other engine's other engine: %v", back)
	} else if n, _, _ := back.Count(p); n != a {
		t.Errorf("back on llama.cpp: %d, want %d", n, a)
	}
	// Byte-level BPE: the runners merge in other orders, so there is
	// always an other engine; WordPiece has none.
	bpe, err := New(Show{Version: ollama017, ModelInfo: vocabgen.BPE(2000, "llama-bpe", 1).KV(), Template: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	if o := bpe.OtherEngine(); o == nil || o.Name() != "ollama:gpt2/llama-bpe" {
		t.Errorf("llama-bpe on llama.cpp: other engine %v", o)
	}
}

// TestMergeOrder: where equal ranks meet (a run of one character),
// llama.cpp's order (lowest rank, leftmost first) and Ollama's (its heap)
// end in different tokens: a vocabulary of runs of "}" and "`" whose
// merges build them two ways tells them apart.
func TestMergeOrder(t *testing.T) {
	v := vocabgen.BPE(600, "llama-bpe", 3)
	tokens := append([]string(nil), v.Tokens...)
	merges := append([]string(nil), v.Merges...)
	for _, c := range []string{"}", "`", "Ċ"} {
		for n := 2; n <= 6; n++ {
			run := strings.Repeat(c, n)
			tokens = append(tokens, run)
			for i := 1; i < n; i++ {
				merges = append(merges, strings.Repeat(c, i)+" "+strings.Repeat(c, n-i))
			}
		}
	}
	c := newBPEVocab(tokens, merges)
	leftmost, heap := newBPE(c, nil, true, false), newBPE(c, nil, false, false)
	differ := 0
	for n := 2; n <= 40; n++ {
		for _, ch := range []string{"}", "`", "\n"} {
			text := strings.Repeat(ch, n)
			if leftmost.count(text) != heap.count(text) {
				differ++
			}
		}
	}
	if differ == 0 {
		t.Error("the two merge orders agree on every run: the test tells nothing apart")
	}
	// And Ollama's order is Ollama's tokenizer's.
	ref := tokenizer.NewBytePairEncoding(&tokenizer.Vocabulary{Values: tokens, Types: slices.Repeat([]int32{1}, len(tokens)),
		Merges: merges})
	for n := 2; n <= 40; n++ {
		text := strings.Repeat("}", n)
		ids, _ := ref.Encode(text, false)
		heapWhole := newBPE(c, nil, false, true)
		if got := heapWhole.count(text); got != len(ids) {
			t.Errorf("%q: %d, Ollama's tokenizer %d", text, got, len(ids))
		}
	}
}

// TestBOSDefaults: without add_bos_token in the file, each runner adds
// BOS as its own code says: llama.cpp for SentencePiece and the Llama 3
// family of BPE pre-tokenizers, not for the other BPE ones, never for
// GLM-4's; Ollama's engine except for the architectures that say no.
func TestBOSDefaults(t *testing.T) {
	tmpl := "{{ range .Messages }}{{ .Content }}{{ end }}"
	p := Prompt{Messages: []api.Message{{Role: "user", Content: "hello"}}}
	count := func(v vocabgen.Vocab, arch string) int {
		v.NoAddBOSKey = true
		kv := v.KV()
		if arch != "" {
			kv["general.architecture"] = arch
		}
		m, err := New(Show{Version: ollama017, ModelInfo: kv, Template: tmpl})
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := m.Count(p)
		text, _ := m.CountText("hello")
		return n - text
	}
	for _, c := range []struct {
		name string
		v    vocabgen.Vocab
		arch string
		bos  int
	}{
		{"llama.cpp spm", vocabgen.SentencePiece(1000, 1), "", 1},
		{"llama.cpp llama-bpe", vocabgen.BPE(1000, "llama-bpe", 1), "", 1},
		{"llama.cpp qwen2", vocabgen.BPE(1000, "qwen2", 1), "", 0},
		{"llama.cpp glm4", vocabgen.BPE(1000, "chatglm-bpe", 1), "", 0},
		{"ollama qwen3", vocabgen.BPE(1000, "qwen2", 1), "qwen3", 1},
		{"ollama olmo3", vocabgen.BPE(1000, "default", 1), "olmo3", 0},
	} {
		if got := count(c.v, c.arch); got != c.bos {
			t.Errorf("%s: %d BOS, want %d", c.name, got, c.bos)
		}
	}
}

// TestOllamaEnginePretokenizers: on Ollama's engine the expressions come
// from the architecture's model code: deepseek2 splits with DeepSeek V3's
// three rules, a llama file saying "deepseek-r1-qwen" as Llama 3; on
// llama.cpp the same llama file is split as Qwen 2.
func TestOllamaEnginePretokenizers(t *testing.T) {
	text := "Totals: 1234567 and 3.14159 東京の天気は晴れ 42度, (x)+y=z!"
	for _, c := range []struct {
		arch, pre string
		exprs     []string
	}{
		{"deepseek2", "deepseek-v3", deepseekV3},
		{"llama", "deepseek-r1-qwen", nil}, // llama.cpp: Pretokenizer
	} {
		v := vocabgen.BPE(3000, c.pre, 9)
		kv := v.KV()
		kv["general.architecture"] = c.arch
		m, err := New(Show{Version: ollama017, ModelInfo: kv, Template: "{{ .Prompt }}"})
		if err != nil {
			t.Fatal(err)
		}
		exprs := c.exprs
		if exprs == nil {
			exprs = Pretokenizer(c.pre)
		}
		voc := &tokenizer.Vocabulary{Values: v.Tokens, Types: v.Types, Merges: v.Merges}
		ref, _ := tokenizer.NewBytePairEncoding(voc, exprs...).Encode(text, false)
		got, err := m.CountText(text)
		if err != nil || got != len(ref) {
			t.Errorf("%s/%s (%s): %d, reference %d (%v)", c.arch, c.pre, m.Name(), got, len(ref), err)
		}
	}
	// The llama file on Ollama's engine: Llama 3's digits in threes.
	v := vocabgen.BPE(3000, "deepseek-r1-qwen", 9)
	m, _ := New(Show{Version: ollama017, ModelInfo: v.KV(), Template: "{{ .Prompt }}"})
	o := m.OtherEngine()
	voc := &tokenizer.Vocabulary{Values: v.Tokens, Types: v.Types, Merges: v.Merges}
	ref, _ := tokenizer.NewBytePairEncoding(voc, regexLlama3).Encode(text, false)
	if got, _ := o.CountText(text); o == nil || got != len(ref) {
		t.Errorf("llama/deepseek-r1-qwen on Ollama's engine: %d, reference %d", got, len(ref))
	}
}

// ollama017 is the version whose rules most tests here hold: the counts
// of Ollama 0.17.4 (versions_test.go holds the newer ones).
const ollama017 = "0.17.4"
