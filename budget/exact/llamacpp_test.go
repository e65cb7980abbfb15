package exact

import (
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/tokenizer"
)

// TestLlamaCppSentencePiece: on llama.cpp's runner a SentencePiece
// prompt is tokenized fragment by fragment, with a space written before
// the text at the start and after each special token (llama.cpp's
// add_space_prefix). The count equals that procedure run with Ollama's
// SentencePiece on each fragment; the real server agrees (e2e gen-spm).
func TestLlamaCppSentencePiece(t *testing.T) {
	v := vocabgen.SentencePiece(4000, 4)
	m := newModelKV(t, v.KV(), templates["chatml"]) // architecture llama: llama.cpp's runner
	if !m.spmPrefix || !strings.HasPrefix(m.Name(), "llama.cpp:") {
		t.Fatalf("model %s: space prefix %v", m.Name(), m.spmPrefix)
	}
	ref := reference(t, v)
	for n := 1; n <= 20; n += 4 {
		text, err := m.Render(Prompt{Messages: conversation(n, 3)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.CountPrompt(text)
		if err != nil {
			t.Fatal(err)
		}
		want := 1 // BOS
		rest, prevSpecial := text, true
		for rest != "" {
			i := strings.Index(rest, "<|im_")
			if i == 0 {
				j := strings.Index(rest, "|>") + 2
				want++
				rest, prevSpecial = rest[j:], true
				continue
			}
			if i < 0 {
				i = len(rest)
			}
			frag := rest[:i]
			if prevSpecial {
				frag = " " + frag
			}
			ids, _ := ref.Encode(frag, false)
			want += len(ids)
			rest, prevSpecial = rest[i:], false
		}
		if got != want {
			t.Fatalf("%d turns: count %d, llama.cpp's procedure %d", n, got, want)
		}
	}
	// add_space_prefix off: no space.
	kv := v.KV()
	kv["tokenizer.ggml.add_space_prefix"] = false
	if m := newModelKV(t, kv, templates["chatml"]); m.spmPrefix {
		t.Error("add_space_prefix false is not honoured")
	}
}

// TestLlamaCppMerges: for pre-tokenizers without llama.cpp's
// ignore_merges (all but the Llama 3 family) words are encoded by their
// merges alone. Where a vocabulary's merges rebuild each of its words
// (as trained vocabularies' do) that equals Ollama's whole-word lookup;
// where they do not, the counts differ, and the real server goes with
// the merges (e2e gen-qwen2).
func TestLlamaCppMerges(t *testing.T) {
	// A vocabulary whose words are built by left-to-right merges only:
	// "ab", "abc" from "a b", "ab c".
	b2u := vocabgen.BytesToUnicode()
	var tokens []string
	var types []int32
	for _, r := range b2u {
		tokens, types = append(tokens, string(r)), append(types, 1)
	}
	tokens = append(tokens, "ab", "abc", "bc")
	types = append(types, 1, 1, 1)
	voc := &tokenizer.Vocabulary{Values: tokens, Types: types, Merges: []string{"b c", "a b", "ab c"}}
	mb := newBPE(newBPEVocab(voc.Values, voc.Merges), Pretokenizer("qwen2"), true, false)
	ollama := tokenizer.NewBytePairEncoding(voc, Pretokenizer("qwen2")...)
	// "abc" is in the vocabulary, but "b c" ranks first: the merges give
	// "a" + "bc" (2 tokens), Ollama's lookup "abc" (1).
	ids, _ := ollama.Encode("abc", false)
	if got := mb.count("abc"); got != 2 || len(ids) != 1 {
		t.Errorf("abc: merges %d tokens (want 2), Ollama's lookup %d (want 1)", got, len(ids))
	}
	// Where the merges rebuild the word, both agree.
	for _, s := range []string{"ab", "ab ab", "cab", "abab abc?"} {
		ids, _ := ollama.Encode(s, false)
		if s == "abab abc?" {
			continue // holds "abc", as above
		}
		if got := mb.count(s); got != len(ids) {
			t.Errorf("%q: merges %d, Ollama %d", s, got, len(ids))
		}
	}
	// Which pre-tokenizers merge on llama.cpp: not the Llama 3 family,
	// not Tekken; "default" does (with llama.cpp's own expressions).
	for pre, merging := range map[string]bool{"qwen2": true, "llama-bpe": false, "llama3": false, "tekken": false, "default": true} {
		kv := vocabgen.BPE(600, pre, 1).KV()
		m := newModelKV(t, kv, templates["chatml"])
		if got := m.bpe != nil && !m.bpe.whole; got != merging {
			t.Errorf("pre %s: merging %v, want %v", pre, got, merging)
		}
	}
}

// checkRuleTable: no tokenizer.ggml.pre value of rules selects two rules
// (seen holds those already taken), and splitting text with each loses
// and adds nothing.
func checkRuleTable(t *testing.T, rules []llamaCppRule, seen map[string]bool, text string) {
	t.Helper()
	for _, r := range rules {
		for _, pre := range r.pres {
			if seen[pre] {
				t.Errorf("%s selects two rules", pre)
			}
			seen[pre] = true
		}
		parts := newBPE(nil, r.exprs, true, false).split(text)
		if got := strings.Join(parts, ""); got != text {
			t.Errorf("%s: split %q, lost text", r.pres[0], parts)
		}
	}
}

// TestLlamaCppRules: every rule of llama.cpp's table compiles, no
// tokenizer.ggml.pre value selects two rules, splitting loses and adds no
// text, and a few splits that tell rules apart come out as llama.cpp's.
func TestLlamaCppRules(t *testing.T) {
	text := "Totals: 1234567 and 3.14159.\n\n```go\nfunc main() {}\n```\n\n東京の天気 42度\n\t\t  x   y <|im_start|> don't IMGIMGABZ"
	checkRuleTable(t, llamaCppRules, map[string]bool{}, text)
	for _, c := range []struct {
		pre, text string
		want      []string
	}{
		{"deepseek-coder", "ab 123", []string{"ab", " ", "1", "2", "3"}},
		{"deepseek-llm", "ab 123", []string{"ab", " ", "123"}},
		{"falcon", "x=1234567", []string{"x", "=", "123", "456", "7"}},
		{"starcoder", "a 12", []string{"a", " ", "1", "2"}},
		{"gpt-2", "a 1234", []string{"a", " 1234"}},
		{"bloom", "Hi, there!", []string{"Hi", ",", " there", "!"}},
		{"superbpe", "1234567", []string{"1", "", "234", "", "567"}},
		{"chameleon", "a\tb", []string{"a", "\t", "b"}},
		// The hand-written splitters, then AFMoE's expressions on what its
		// digit grouping left.
		{"kimi-k2", "Kimi中文 12345", []string{"Kimi", "中文", " ", "123", "45"}},
		{"afmoe", "abc 12345 中文x", []string{"abc", " ", "12", "345", " ", "中文", "x"}},
	} {
		rule, ok := llamaCppRuleOf(c.pre, false)
		exprs := rule.exprs
		if !ok {
			t.Fatalf("%s: no rule", c.pre)
		}
		if got := newBPE(nil, exprs, true, false).split(c.text); !slices.Equal(got, c.want) {
			t.Errorf("%s splits %q into %q, want %q", c.pre, c.text, got, c.want)
		}
	}
	for _, pre := range []string{"no-such-rule"} {
		if _, ok := llamaCppRuleOf(pre, false); ok {
			t.Errorf("%s has expressions in the table", pre)
		}
	}
}

// The server falls back to llama.cpp's runner for an architecture its
// engine requires when that engine cannot load the model.
func TestOnLlamaCpp(t *testing.T) {
	kv := func(arch, model, pre string) map[string]any {
		return map[string]any{"general.architecture": arch, "tokenizer.ggml.model": model, "tokenizer.ggml.pre": pre}
	}
	for _, c := range []struct {
		name  string
		kv    map[string]any
		split bool
		want  bool
	}{
		{"llama", kv("llama", "gpt2", "llama-bpe"), false, true},
		{"qwen3", kv("qwen3", "gpt2", "qwen2"), false, false},
		{"deepseek-v3", kv("deepseek2", "gpt2", "deepseek-v3"), false, false},
		{"kimi-k2 on deepseek2", kv("deepseek2", "gpt2", "kimi-k2"), false, true},
		{"glm-4.7-flash", kv("glm4moelite", "gpt2", "glm4"), false, false},
		{"glm4moelite, another pre", kv("glm4moelite", "gpt2", "llama-bpe"), false, true},
		{"lfm2 bpe", kv("lfm2", "gpt2", "lfm2"), false, false},
		{"lfm2 sentencepiece", kv("lfm2", "llama", ""), false, true},
		{"qwen2.5-vl, projector apart", kv("qwen25vl", "gpt2", "qwen2"), true, true},
		{"gemma3, projector inside", kv("gemma3", "llama", ""), false, false},
	} {
		if got := onLlamaCpp(c.kv, c.split); got != c.want {
			t.Errorf("%s: on llama.cpp %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLlamaServerRules: the llama.cpp of Ollama 0.30 and later has rules
// 0.17.4's lacks, and of 0.17.4's only DeepSeek V3's and AFMoE's change
// ("~" became a symbol). Its table compiles, no value selects two of its
// rules, an alias names a value of the older table, splitting loses no
// text, and its splits are llama.cpp's where the two versions part: Qwen
// 3.5 keeps combining marks in words (Hindi vowel signs), GPT-4o cuts
// words at them in both, "~" leads a DeepSeek V3 word on 0.17.4 and
// joins punctuation on 0.34.3, and each new rule splits as its
// expressions say.
func TestLlamaServerRules(t *testing.T) {
	text := "Totals: 1234567 and 3.14159.\n\n```go\nfunc main() {}\n```\n\nनमस्ते दुनिया 東京の天気 42度 한국어\n\t\t  x   y ~/src ~~ don't CamelCase İstanbul'da"
	changed := []string{"deepseek-v3", "hunyuan-dense", "afmoe"}
	seen := map[string]bool{}
	for _, r := range llamaCppRules {
		for _, pre := range r.pres {
			seen[pre] = !slices.Contains(changed, pre)
		}
	}
	checkRuleTable(t, llamaServerRules, seen, text)
	for alias, pre := range llamaServerAliases {
		if seen[alias] {
			t.Errorf("alias %s is also in a table", alias)
		}
		if _, ok := llamaCppRuleOf(pre, false); !ok {
			t.Errorf("alias %s names %s, which 0.17.4's table lacks", alias, pre)
		}
		if _, ok := llamaCppRuleOf(alias, false); ok {
			t.Errorf("%s is in 0.17.4's table", alias)
		}
	}
	// Every other value of 0.17.4's table is the same rule on llama-server.
	for _, r := range llamaCppRules {
		for _, pre := range r.pres {
			got, _ := llamaCppRuleOf(pre, true)
			same := slices.Equal(got.exprs, r.exprs) && got.wholeWords == r.wholeWords && got.addsBOS == r.addsBOS
			if same == slices.Contains(changed, pre) {
				t.Errorf("%s: the same rule on llama-server %v", pre, same)
			}
		}
	}

	hindi := "नमस्ते दुनिया"
	for _, c := range []struct {
		pre, text   string
		old, server []string // nil: no rule of its own
	}{
		{"qwen35", hindi + " 123", nil, []string{"नमस्ते", " दुनिया", " ", "1", "2", "3"}},
		{"gpt-4o", hindi, []string{"नमस", "्त", "े", " द", "ुन", "िय", "ा"}, []string{"नमस", "्त", "े", " द", "ुन", "िय", "ा"}},
		{"deepseek-v3", " ~/src ~~ ~ü", []string{" ", "~", "/src", " ", "~~", " ", "~ü"}, []string{" ~/", "src", " ~~", " ~", "ü"}},
		{"afmoe", "ls ~~", []string{"ls", " ", "~~"}, []string{"ls", " ~~"}},
		{"granite-embed-multi-97m", hindi + " CamelCase", nil, []string{"नमस्ते", " दुनिया", " Camel", "Case"}},
		{"tiny_aya", "CamelCase 1234567", nil, []string{"CamelCase", " ", "1", "234", "567"}},
		{"youtu", "한국어CamelCase 12", nil, []string{"한국어", "CamelCase", " ", "1", "2"}},
		{"spark2_5", "a~b 12345\n\n", nil, []string{"a", "~b", " ", "1", "2", "3", "4", "5", "\n", "\n"}},
		{"jais-2", "a" + strings.Repeat(" ", 7) + "b", nil, []string{"a", "    ", "  ", " b"}},
		{"exaone-moe", "two words 12", nil, []string{"two words", " ", "1", "2"}},
		{"laguna", "ab 12\n\ncd", nil, []string{"ab", " ", "1", "2", "\n\n", "cd"}},
		{"minicpm5", "x 1234567", nil, []string{"x", " ", "123", "456", "7"}},
		{"ufakzeka", "İstanbul'da", nil, []string{"İstanbul", "'da"}},
		// Values the newer llama.cpp adds to a rule 0.17.4 has.
		{"kanana2", "CamelCase", nil, []string{"Camel", "Case"}},
		{"hy_v4", "東京 12345", nil, []string{"東京", " ", "123", "45"}},
	} {
		for _, server := range []bool{false, true} {
			want := c.old
			if server {
				want = c.server
			}
			rule, ok := llamaCppRuleOf(c.pre, server)
			if ok != (want != nil) {
				t.Errorf("%s (llama-server %v): a rule %v, want %v", c.pre, server, ok, want != nil)
				continue
			}
			if !ok {
				continue
			}
			if got := newBPE(nil, rule.exprs, true, false).split(c.text); !slices.Equal(got, want) {
				t.Errorf("%s (llama-server %v) splits %q into %q, want %q", c.pre, server, c.text, got, want)
			}
		}
	}
	for pre, whole := range map[string]bool{"qwen35": false, "granite-embed-multi-97m": true, "youtu": true, "minicpm5": true, "jina-v5-nano": true, "f2llmv2": false} {
		if rule, _ := llamaCppRuleOf(pre, true); rule.wholeWords != whole {
			t.Errorf("%s: ignore_merges %v, want %v", pre, rule.wholeWords, whole)
		}
	}
}

// TestLlamaServerQwen35: a model with Qwen 3.5's pre-tokenizer is counted
// with llama.cpp's Qwen 3.5 rule on Ollama 0.30 and later (digits one by
// one, marks kept in words), and as 0.17.4 counted it before.
func TestLlamaServerQwen35(t *testing.T) {
	kv := vocabgen.BPE(2000, "qwen35", 1).WithWords("नमस्ते", "दुनिया").KV()
	text := "नमस्ते दुनिया 1234567"
	count := func(version string) int {
		m, err := New(Show{Version: version, ModelInfo: kv, Template: "{{ .Prompt }}"})
		if err != nil {
			t.Fatal(err)
		}
		n, err := m.CountText(text)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	old, server := count(ollama017), count("0.34.3")
	// 0.34.3: two words, seven digits; 0.17.4's llama.cpp has no rule
	// of its own for qwen35.
	want := 2 + 1 + 7
	if server != want || old == server {
		t.Errorf("qwen35: %d tokens on 0.34.3 (want %d), %d on 0.17.4 (want another count)", server, want, old)
	}
}

// TestLlamaCppUnknownPre: llama.cpp splits a tokenizer.ggml.pre value it
// does not know with its default rule (0.17.4's: qwen35 among them), not
// with Ollama's default expression.
func TestLlamaCppUnknownPre(t *testing.T) {
	text := "CamelCase 1234567 don't +=+ x"
	split := func(pre, version string) []string {
		m, err := New(Show{Version: version, ModelInfo: vocabgen.BPE(600, pre, 1).KV(), Template: "{{ .Prompt }}"})
		if err != nil {
			t.Fatal(err)
		}
		return m.bpe.split(text)
	}
	want := split("default", ollama017)
	for _, pre := range []string{"no-such-rule", "qwen35", "youtu"} {
		if got := split(pre, ollama017); !slices.Equal(got, want) {
			t.Errorf("%s on 0.17.4: split %q, want the default rule's %q", pre, got, want)
		}
	}
	if got := split("qwen35", "0.34.3"); slices.Equal(got, want) {
		t.Errorf("qwen35 on 0.34.3: split with the default rule, %q", got)
	}
}
