//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// family is one generated model of TestRealOllama_Families: a 32,000-token
// vocabulary with a tokenizer.ggml.pre value, in a GGUF of an
// architecture (testkit/ggufgen's layouts) that decides the runner.
type family struct {
	name string
	arch string // general.architecture; "" is llama, run on llama.cpp
	// pre is the byte-level BPE pre-tokenizer; "spm" makes a
	// SentencePiece vocabulary instead.
	pre string
	// specials are the family's own control tokens, added to the
	// vocabulary and written as text into the prompt.
	specials []string
	// bos, when set, is the vocabulary's BOS token (added as a control
	// token if it lacks it), and the file says its tokenizer adds it
	// (add_bos_token true), as the files of a renderer's family do.
	bos string
	// ci marks the representative rows CI runs; the others run with
	// CTXPROXY_E2E_FAMILIES=all (scripts/families.sh), or by name,
	// architecture or pre-tokenizer (CTXPROXY_E2E_FAMILIES=gemma3,falcon).
	ci bool
}

// families: one row per distinct pre-tokenizer rule of llama.cpp (its
// llama-vocab.cpp table: values that share expressions and merging share
// a row), and one per architecture Ollama's own engine runs.
var families = []family{
	// llama.cpp's rules, on the llama architecture.
	{name: "fam-llama3", pre: "llama-bpe", ci: true, specials: []string{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}},
	{name: "fam-dbrx", pre: "dbrx"}, // Llama 3's expression, merges not ignored
	{name: "fam-deepseek-llm", pre: "deepseek-llm", ci: true},
	{name: "fam-deepseek-v3", pre: "deepseek-v3", specials: []string{"<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"}},
	{name: "fam-deepseek-coder", pre: "deepseek-coder", ci: true},
	{name: "fam-falcon", pre: "falcon"},
	{name: "fam-starcoder", pre: "starcoder"},
	{name: "fam-gpt-2", pre: "gpt-2", ci: true},
	{name: "fam-qwen2", pre: "qwen2"},
	{name: "fam-bloom", pre: "bloom"},
	{name: "fam-glm4", pre: "glm4", specials: []string{"[gMASK]", "<sop>", "<|user|>", "<|assistant|>"}},
	{name: "fam-viking", pre: "viking"},
	{name: "fam-tekken", pre: "tekken", specials: []string{"[INST]", "[/INST]", "[TOOL_CALLS]"}},
	{name: "fam-chameleon", pre: "chameleon"},
	{name: "fam-gpt-4o", pre: "gpt-4o", ci: true, specials: []string{"<|start|>", "<|message|>", "<|end|>", "<|channel|>"}},
	{name: "fam-superbpe", pre: "superbpe"},
	{name: "fam-bailingmoe", pre: "bailingmoe"},
	{name: "fam-seed-coder", pre: "seed-coder"},
	{name: "fam-default", pre: "default"},
	{name: "fam-spm", pre: "spm", specials: []string{"<start_of_turn>", "<end_of_turn>"}},
	// Rules of the llama.cpp Ollama 0.30 and later run (llama-server),
	// which 0.17.4's llama.cpp splits with its default rule.
	{name: "fam-qwen35", pre: "qwen35", ci: true}, // marks kept in words; CI's only cover of llama.cpp's Qwen 3.5 rule
	{name: "fam-granite-embed-multi-97m", pre: "granite-embed-multi-97m"},
	{name: "fam-tiny_aya", pre: "tiny_aya"},
	{name: "fam-youtu", pre: "youtu"},
	{name: "fam-spark2_5", pre: "spark2_5"},
	{name: "fam-jais-2", pre: "jais-2"},
	{name: "fam-exaone-moe", pre: "exaone-moe"},
	{name: "fam-laguna", pre: "laguna"},
	{name: "fam-minicpm5", pre: "minicpm5"},
	{name: "fam-ufakzeka", pre: "ufakzeka"},
	// llama.cpp's hand-written splitters.
	{name: "fam-kimi-k2", pre: "kimi-k2", ci: true, specials: []string{"<|im_user|>", "<|im_assistant|>", "<|im_end|>"}},
	{name: "fam-afmoe", pre: "afmoe"},
	// Ollama's own engine, by architecture.
	{name: "fam-arch-qwen3", arch: "qwen3", pre: "qwen2", ci: true},
	{name: "fam-arch-gemma3", arch: "gemma3", pre: "spm", ci: true, specials: []string{"<start_of_turn>", "<end_of_turn>"}},
	{name: "fam-arch-olmo3", arch: "olmo3", pre: "llama-bpe"}, // as Ollama converts OLMo 3
	{name: "fam-arch-llama4", arch: "llama4", pre: "llama4", specials: []string{"<|header_start|>", "<|header_end|>", "<|eot|>"}},
	{name: "fam-arch-mistral3", arch: "mistral3", pre: "tekken", ci: true, specials: []string{"[INST]", "[/INST]", "[SYSTEM_PROMPT]"}},
	{name: "fam-arch-qwen3moe", arch: "qwen3moe", pre: "qwen2"},
	{name: "fam-arch-lfm2", arch: "lfm2", pre: "lfm2"},
	{name: "fam-arch-lfm2moe", arch: "lfm2moe", pre: "lfm2", specials: []string{"<|tool_call_start|>", "<|tool_call_end|>"}},
	{name: "fam-arch-gptoss", arch: "gptoss", pre: "gpt-4o", ci: true, specials: []string{"<|start|>", "<|message|>", "<|end|>", "<|channel|>"}},
	{name: "fam-arch-deepseek2", arch: "deepseek2", pre: "deepseek-v3", specials: []string{"<｜User｜>", "<｜Assistant｜>"}},
	{name: "fam-arch-glm4moelite", arch: "glm4moelite", pre: "glm4", specials: []string{"[gMASK]", "<sop>", "<|user|>", "<|assistant|>"}},
	{name: "fam-arch-qwen3next", arch: "qwen3next", pre: "qwen2", specials: []string{"<|endoftext|>", "<|vision_start|>", "<|vision_end|>"}},
	{name: "fam-arch-qwen35", arch: "qwen35", pre: "qwen35", specials: []string{"<|endoftext|>", "<|vision_start|>", "<|vision_end|>"}}, // as Ollama converts Qwen 3.5
	{name: "fam-arch-qwen35moe", arch: "qwen35moe", pre: "qwen35", specials: []string{"<|endoftext|>", "<|vision_start|>", "<|vision_end|>"}},
	{name: "fam-arch-nemotron_h", arch: "nemotron_h", pre: "default", specials: []string{"<SPECIAL_10>", "<SPECIAL_11>"}}, // the converter knows no hash of Nemotron's pre-tokenizer
	{name: "fam-arch-nemotron_h_moe", arch: "nemotron_h_moe", pre: "default", specials: []string{"<SPECIAL_10>", "<SPECIAL_11>"}},
	{name: "fam-arch-qwen25vl", arch: "qwen25vl", pre: "qwen2", specials: []string{"<|im_start|>", "<|im_end|>", "<|vision_start|>"}},
	{name: "fam-arch-qwen3vl", arch: "qwen3vl", pre: "qwen2", specials: []string{"<|im_start|>", "<|im_end|>", "<|vision_start|>"}},
	{name: "fam-arch-qwen3vlmoe", arch: "qwen3vlmoe", pre: "qwen2", specials: []string{"<|im_start|>", "<|im_end|>", "<think>"}},
	{name: "fam-arch-gemma3n", arch: "gemma3n", pre: "spm", specials: []string{"<start_of_turn>", "<end_of_turn>"}},
	{name: "fam-arch-glmocr", arch: "glmocr", pre: "glm4", specials: []string{"[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|begin_of_image|>"}},
	{name: "fam-arch-mllama", arch: "mllama", pre: "llama-bpe", specials: []string{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|image|>"}},
	{name: "fam-arch-deepseekocr", arch: "deepseekocr", pre: "deepseek-v3", specials: []string{"<｜User｜>", "<｜Assistant｜>", "<image>"}},
	// An architecture Ollama's engine requires but cannot load with this
	// tokenizer: the server falls back to llama.cpp.
	{name: "fam-arch-deepseek2-kimi-k2", arch: "deepseek2", pre: "kimi-k2", specials: []string{"<|im_user|>", "<|im_assistant|>"}},
}

// createFamily creates name in the real Ollama: a model of f's
// architecture around a generated 32,000-token vocabulary (seeded by
// seed) with f's pre-tokenizer and control tokens.
func createFamily(o *ollamaServer, name string, f family, seed uint64) error {
	var v vocabgen.Vocab
	if f.pre == "spm" {
		v = vocabgen.SentencePiece(32000, seed)
	} else {
		v = vocabgen.BPE(32000, f.pre, seed)
	}
	v = v.WithWords(scriptWords...).WithSpecials(f.specials...)
	// On Ollama's engine, whether BOS is added is the architecture's
	// default when the file does not say: leave the key out, so the row
	// checks ctxproxy's table of those defaults too.
	v.NoAddBOSKey = f.arch != ""
	if f.bos != "" {
		v = v.WithSpecials(f.bos)
		v.BOS, v.AddBOS, v.NoAddBOSKey = slices.Index(v.Tokens, f.bos), true, false
	}
	return createModel(o, name, v, f.arch)
}

// scriptText is where the newer pre-tokenizers part ways: words with
// combining marks (Hindi vowel signs), "~" (a symbol to llama.cpp from
// 0.30, to 0.17.4's nothing), capitals outside ASCII, a Turkish
// apostrophe, Hangul, words a space apart and a long run of spaces.
// scriptWords are made whole tokens of each generated vocabulary, so that
// a cut inside them changes the count.
const scriptText = "नमस्ते दुनिया! cd ~/src && ls ~~ a~b İstanbul'da 한국어 ÀÉÎ Ünïcödé two words" + "       x"

var scriptWords = []string{"नमस्ते", "दुनिया", "~/src", "~~", "İstanbul", "'da", "한국어"}

// familyNamed returns the row of families called name.
func familyNamed(name string) family {
	for _, f := range families {
		if f.name == name {
			return f
		}
	}
	panic("no family " + name)
}

// TestRealOllama_Families: for every generated family, on /api/chat
// whole and streamed, /v1/chat/completions, /v1/responses and
// /v1/messages (the last two carried to /api/chat), X-Ctxproxy-Tokens equals
// the real Ollama's prompt_eval_count on the first request of a fresh
// model, with digits, CJK, code fences, whitespace runs and special-token
// text in the prompt. CI runs the rows marked ci; CTXPROXY_E2E_FAMILIES
// picks others (see family.ci).
func TestRealOllama_Families(t *testing.T) {
	o := need(t)
	pick := os.Getenv("CTXPROXY_E2E_FAMILIES")
	picked := func(f family) bool {
		if pick == "" {
			return f.ci
		}
		for _, w := range strings.Split(pick, ",") {
			if w == "all" || w == f.name || w == cmpOr(f.arch, "llama") || w == f.pre {
				return true
			}
		}
		return false
	}
	p := startCtxproxy(t, o.url, exactConfig)
	defer p.stop()
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %-10s %-16s %-22s %7s %7s\n", "model", "arch", "pre", "route", "sent", "ollama")
	for i, f := range families {
		if !picked(f) {
			continue
		}
		if err := createFamily(o, f.name, f, 300+uint64(i)); err != nil {
			t.Errorf("%s: creating the model: %v", f.name, err)
			continue
		}
		msgs := conversation(1000+uint64(i), 6)
		msgs[len(msgs)-1].Content += "\n" + hardText + " " + strings.Join(f.specials, "x ") + " 12" + strings.Join(f.specials, "") + "\n" + scriptText
		msgs = append(msgs[:len(msgs)-1], api.Message{Role: "assistant", Content: "Noted: 99 red balloons, 東京.\n\n```\n]}}}}}\n```"},
			msgs[len(msgs)-1])
		for _, route := range []string{"/api/chat", "/api/chat stream", "/v1/chat/completions", "/v1/responses", "/v1/messages"} {
			sent, eval, err := countedAndEvaluated(p.url, route, f.name, msgs, nil)
			if why, ok := cannotLoad(err); ok {
				// A layout the server's runner does not read: shown, with
				// its words; a failure unless it is one it is known not to.
				fmt.Fprintf(&b, "%-22s %-10s %-16s cannot load on Ollama %s: %s\n", f.name, cmpOr(f.arch, "llama"), f.pre, suite.version, why)
				if _, known := notLoading[f.name]; !known || !llamaServer() {
					t.Errorf("%s: Ollama %s cannot load it: %s", f.name, suite.version, why)
				}
				break
			}
			if err != nil {
				t.Errorf("%s %s: %v", f.name, route, err)
				continue
			}
			fmt.Fprintf(&b, "%-22s %-10s %-16s %-22s %7d %7d\n", f.name, cmpOr(f.arch, "llama"), f.pre, route, sent, eval)
			if sent != eval {
				t.Errorf("%s (%s, %s) %s: X-Ctxproxy-Tokens %d, prompt_eval_count %d", f.name, cmpOr(f.arch, "llama"), f.pre, route, sent, eval)
			}
		}
	}
	t.Log(b.String())
}

// notLoading are the generated models llama-server (Ollama 0.30 and
// later) does not load, and why. The other layouts are laid out as
// published files are, which Ollama's compatibility layer translates for
// llama.cpp; an architecture llama.cpp does not have at all stays here.
var notLoading = map[string]string{
	"fam-arch-mllama": "llama.cpp has no mllama (Llama 3.2 Vision), and Ollama from 0.30 no engine of its own",
}

// cannotLoad reports whether err is the server's refusal to load a model
// (its runner's words: an architecture or tensor layout it does not
// read), and its first line.
func cannotLoad(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	if !strings.Contains(msg, "error loading model") && !strings.Contains(msg, "process has terminated") {
		return "", false
	}
	if i := strings.Index(msg, "error loading model"); i >= 0 {
		msg = msg[i:]
	}
	line, _, _ := strings.Cut(msg, "\\n")
	line, _, _ = strings.Cut(line, "\n")
	return line, true
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
