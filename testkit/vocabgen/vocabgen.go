// Package vocabgen makes deterministic tokenizer vocabularies of any size
// for tests: byte-level BPE ("gpt2", with a chosen tokenizer.ggml.pre)
// and SentencePiece ("llama") with byte fallback. A vocabulary comes with
// the model_info keys Ollama's /api/show returns with "verbose": true, so
// tests can feed it to ctxproxy exactly as a real server would, and the
// e2e model generator writes the same keys into a GGUF file.
//
// The pieces are built from generated words (syllables, digits,
// punctuation, accented and CJK text): every merged token is the merge of
// two tokens already in the vocabulary, so the vocabulary is a valid BPE
// whatever its size.
package vocabgen

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
)

// Token types as GGUF's tokenizer.ggml.token_type numbers them.
const (
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeByte        = 6
)

// Specials are the control tokens every generated vocabulary ends with,
// the ChatML markers the test templates use among them.
var Specials = []string{"<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"}

// Vocab is a generated vocabulary.
type Vocab struct {
	Model  string // tokenizer.ggml.model: "gpt2" or "llama"
	Pre    string // tokenizer.ggml.pre (gpt2 only)
	Tokens []string
	Types  []int32
	Scores []float32
	Merges []string // gpt2 only
	BOS    int
	EOS    int
	AddBOS bool
	// NoAddBOSKey leaves tokenizer.ggml.add_bos_token out, as some
	// converted files do: the runner's default decides.
	NoAddBOSKey bool
}

// KV returns the tokenizer keys of model_info as /api/show returns them
// (JSON numbers are float64 there; arrays are []any).
func (v Vocab) KV() map[string]any {
	kv := map[string]any{
		"tokenizer.ggml.model":          v.Model,
		"tokenizer.ggml.tokens":         AnySlice(v.Tokens),
		"tokenizer.ggml.token_type":     AnySlice(v.Types),
		"tokenizer.ggml.bos_token_id":   float64(v.BOS),
		"tokenizer.ggml.eos_token_id":   float64(v.EOS),
		"tokenizer.ggml.add_bos_token":  v.AddBOS,
		"tokenizer.ggml.add_eos_token":  false,
		"general.architecture":          "llama",
		"llama.context_length":          float64(8192),
		"llama.block_count":             float64(2),
		"llama.embedding_length":        float64(64),
		"llama.attention.head_count":    float64(4),
		"llama.attention.head_count_kv": float64(2),
	}
	if v.Model == "gpt2" {
		kv["tokenizer.ggml.pre"] = v.Pre
		kv["tokenizer.ggml.merges"] = AnySlice(v.Merges)
	} else {
		kv["tokenizer.ggml.scores"] = AnySlice(v.Scores)
	}
	if v.NoAddBOSKey {
		delete(kv, "tokenizer.ggml.add_bos_token")
	}
	return kv
}

// AnySlice converts s to what a JSON decoder makes of it: []any of
// float64 for numbers, of string for strings.
func AnySlice[T any](s []T) []any {
	out := make([]any, len(s))
	for i, x := range s {
		switch y := any(x).(type) {
		case int32:
			out[i] = float64(y)
		case float32:
			out[i] = float64(y)
		default:
			out[i] = x
		}
	}
	return out
}

// BytesToUnicode is GPT-2's mapping of bytes to printable runes, the
// alphabet of byte-level BPE tokens.
func BytesToUnicode() [256]rune {
	var m [256]rune
	n := 0
	for b := range 256 {
		switch {
		case b >= '!' && b <= '~', b >= 0xA1 && b <= 0xAC, b >= 0xAE && b <= 0xFF:
			m[b] = rune(b)
		default:
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// byteLevel encodes s in the byte-level alphabet.
func byteLevel(s string) []string {
	b2u := BytesToUnicode()
	out := make([]string, 0, len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, string(b2u[s[i]]))
	}
	return out
}

// Words returns n deterministic pseudo-words for seed: syllable words of
// several lengths, some capitalized, some joined in camel case, some
// with an English contraction ("'s", "'ll", …), numbers, punctuation
// runs, accented and CJK words. The camel-case and contracted words are
// where pre-tokenizers differ most (Llama 3's keeps "getValue" whole and
// cuts "'s" off; o200k's cuts "get" from "Value" and keeps "'s").
func Words(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	onsets := []string{"b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "ch", "th", "pl", "gr", "br", "sh"}
	nuclei := []string{"a", "e", "i", "o", "u", "ou", "ea", "ai", "é", "ü", "ø"}
	codas := []string{"", "", "n", "r", "s", "t", "ng", "ck", "ll", "x"}
	cjk := []rune("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年")
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		var w string
		switch r := rng.IntN(20); {
		case r == 0:
			w = fmt.Sprint(rng.IntN(1000))
		case r == 1:
			w = string([]byte{"!?.,;:()[]{}<>=+-*/"[rng.IntN(19)], "!?.,;:()[]{}<>=+-*/"[rng.IntN(19)]})
		case r == 2:
			var b strings.Builder
			for range 1 + rng.IntN(3) {
				b.WriteRune(cjk[rng.IntN(len(cjk))])
			}
			w = b.String()
		default:
			var b strings.Builder
			for range 1 + rng.IntN(3) {
				b.WriteString(onsets[rng.IntN(len(onsets))])
				b.WriteString(nuclei[rng.IntN(len(nuclei))])
				b.WriteString(codas[rng.IntN(len(codas))])
			}
			w = b.String()
			switch rng.IntN(10) {
			case 0, 1:
				w = strings.ToUpper(w[:1]) + w[1:]
			case 2:
				tail := onsets[rng.IntN(len(onsets))] + nuclei[rng.IntN(len(nuclei))] + codas[rng.IntN(len(codas))]
				w += strings.ToUpper(tail[:1]) + tail[1:]
			case 3:
				w += []string{"'s", "'ll", "'re", "'t", "'ve", "'d"}[rng.IntN(6)]
			}
		}
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// Text returns about n bytes of deterministic text made of Words, spaces,
// newlines and punctuation, for tests and generated conversations.
func Text(n int, seed uint64) string {
	words := Words(2000, 7)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		switch r := rng.IntN(16); {
		case r == 0:
			b.WriteString(".\n")
		case r == 1:
			b.WriteString(", ")
		case r == 2:
			b.WriteString("  ")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// codeRuns are the punctuation and whitespace runs of code and JSON
// every generated BPE vocabulary has tokens for.
var codeRuns = []string{"```", "```\n", "```\n\n", "\n\n", "\n\n\n", "]}}}}}", "]}}}}}\n", "}}\n", "    ", "        ",
	"\t\t", "  ", ");\n", "\":", "\",\"", "{\"", "\"}", " //", " ==", " !=", " =>", "...", "---", "***"}

// BPE returns a byte-level BPE vocabulary of at least size tokens (256
// bytes, merges, then Specials), with tokenizer.ggml.pre set to pre.
func BPE(size int, pre string, seed uint64) Vocab {
	v := Vocab{Model: "gpt2", Pre: pre}
	index := map[string]bool{}
	add := func(tok string, typ int32) {
		index[tok] = true
		v.Tokens = append(v.Tokens, tok)
		v.Types = append(v.Types, typ)
	}
	for _, r := range BytesToUnicode() {
		add(string(r), TypeNormal)
	}
	need := size - len(Specials)
	words := Words(need, seed)
	// Merge each word left to right, with and without its leading space
	// ("Ġ"), shortest merges first so that frequent prefixes rank high.
	// Runs of code punctuation and whitespace come first: where a
	// runner's splitter or merging differs, it is on text like these.
	var chains [][]string
	for _, run := range codeRuns {
		chains = append(chains, byteLevel(run))
	}
	for i, w := range words {
		s := w
		if i%3 != 0 {
			s = " " + w
		}
		chains = append(chains, byteLevel(s))
	}
	for step := 1; len(v.Tokens) < need; step++ {
		grew := false
		for _, c := range chains {
			if step >= len(c) || len(v.Tokens) >= need {
				continue
			}
			left, right := strings.Join(c[:step], ""), c[step]
			tok := left + right
			grew = true
			if index[tok] {
				continue
			}
			v.Merges = append(v.Merges, left+" "+right)
			add(tok, TypeNormal)
		}
		if !grew {
			break
		}
	}
	v.BOS = len(v.Tokens)
	v.EOS = v.BOS + 1
	for _, s := range Specials {
		add(s, TypeControl)
	}
	return v
}

// SentencePiece returns a SentencePiece vocabulary of at least size
// tokens: <unk>, <s>, </s>, 256 byte-fallback tokens, scored pieces
// ("▁" for a space), then the ChatML markers as control tokens. Add-BOS
// is on, as Llama 2 and Mistral models have it.
func SentencePiece(size int, seed uint64) Vocab {
	v := Vocab{Model: "llama", AddBOS: true, BOS: 1, EOS: 2}
	index := map[string]bool{}
	add := func(tok string, typ int32, score float32) {
		index[tok] = true
		v.Tokens = append(v.Tokens, tok)
		v.Types = append(v.Types, typ)
		v.Scores = append(v.Scores, score)
	}
	add("<unk>", TypeUnknown, 0)
	add("<s>", TypeControl, 0)
	add("</s>", TypeControl, 0)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), TypeByte, 0)
	}
	need := size - 2
	var pieces []string
	for i, w := range Words(need, seed) {
		s := strings.ReplaceAll(w, " ", "▁")
		if i%3 != 0 {
			s = "▁" + s
		}
		r := []rune(s)
		for j := 1; j <= len(r); j++ {
			pieces = append(pieces, string(r[:j]))
		}
	}
	slices.SortStableFunc(pieces, func(a, b string) int { return len([]rune(a)) - len([]rune(b)) })
	for i, p := range pieces {
		if len(v.Tokens) >= need {
			break
		}
		if index[p] {
			continue
		}
		add(p, TypeNormal, -float32(i)/100)
	}
	add("<|im_start|>", TypeControl, 0)
	add("<|im_end|>", TypeControl, 0)
	return v
}

// WithSpecials returns v with control tokens added at its end: a model
// family's own markers, which prompts may hold as text and tokenizers
// must then count as one token each.
func (v Vocab) WithSpecials(tokens ...string) Vocab { return v.with(TypeControl, tokens) }

// WithNormal returns v with normal tokens added at its end (those it
// lacks), scored below every other piece.
func (v Vocab) WithNormal(tokens ...string) Vocab { return v.with(TypeNormal, tokens) }

// WithWords returns v with tokens for words added at its end, each word
// with and without a leading space: for byte-level BPE the merges that
// make it one token after the merges before them have acted, ranked
// after every other merge; for SentencePiece its prefixes, "▁" for the
// space. Text in another script (a word with combining marks) then
// merges to whole words, so where a pre-tokenizer cuts it shows in the
// count.
func (v Vocab) WithWords(words ...string) Vocab {
	if v.Model != "gpt2" {
		var pieces []string
		for _, w := range words {
			for _, s := range []string{w, "▁" + w} {
				r := []rune(s)
				for j := 1; j <= len(r); j++ {
					pieces = append(pieces, string(r[:j]))
				}
			}
		}
		return v.WithNormal(pieces...)
	}
	index := map[string]bool{}
	for _, tok := range v.Tokens {
		index[tok] = true
	}
	v.Merges = slices.Clone(v.Merges)
	ranks := map[[2]string]int{}
	for i, m := range v.Merges {
		l, r, _ := strings.Cut(m, " ")
		if _, ok := ranks[[2]string{l, r}]; !ok {
			ranks[[2]string{l, r}] = i
		}
	}
	var added []string
	for _, w := range words {
		for _, s := range []string{w, " " + w} {
			for {
				syms := merged(byteLevel(s), ranks)
				if len(syms) == 1 {
					break
				}
				tok := syms[0] + syms[1]
				ranks[[2]string{syms[0], syms[1]}] = len(v.Merges)
				v.Merges = append(v.Merges, syms[0]+" "+syms[1])
				if !index[tok] {
					index[tok] = true
					added = append(added, tok)
				}
			}
		}
	}
	return v.with(TypeNormal, added)
}

// merged applies ranks to syms, lowest rank first and leftmost among
// equals, until none applies.
func merged(syms []string, ranks map[[2]string]int) []string {
	for {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			return syms
		}
		syms = append(append(syms[:at:at], syms[at]+syms[at+1]), syms[at+2:]...)
	}
}

func (v Vocab) with(typ int32, tokens []string) Vocab {
	v.Tokens, v.Types = slices.Clone(v.Tokens), slices.Clone(v.Types)
	if v.Scores != nil {
		v.Scores = slices.Clone(v.Scores)
	}
	for _, tok := range tokens {
		if slices.Contains(v.Tokens, tok) {
			continue
		}
		v.Tokens = append(v.Tokens, tok)
		v.Types = append(v.Types, typ)
		if v.Scores != nil {
			score := float32(0)
			if typ == TypeNormal {
				score = -float32(len(v.Tokens))
			}
			v.Scores = append(v.Scores, score)
		}
	}
	return v
}

// Conversation is a chat body for model of a system prompt and n turns
// of 50–350 bytes of Text each, ending with the user's turn, with the
// members of extra added.
func Conversation(model string, n int, seed uint64, extra map[string]any) []byte {
	msgs := []map[string]any{{"role": "system", "content": "You are terse. " + Text(100, seed)}}
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": Text(50+rng.IntN(300), seed+uint64(i))})
	}
	if n%2 == 0 {
		msgs = append(msgs, map[string]any{"role": "user", "content": "and now?"})
	}
	body := map[string]any{"model": model, "messages": msgs, "stream": false}
	maps.Copy(body, extra)
	b, _ := json.Marshal(body)
	return b
}
