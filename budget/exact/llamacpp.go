package exact

import (
	"slices"

	"github.com/ctxproxy/ctxproxy/internal/cache"

	"github.com/dlclark/regexp2"
	"github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/tokenizer"
)

// Ollama runs most architectures on llama.cpp's runner, whose tokenizer
// differs from Ollama's Go tokenizer package in two ways that change
// counts (measured against the real server in the e2e suite; llama.cpp's
// src/llama-vocab.cpp):
//
//   - SentencePiece vocabularies: llama.cpp writes a space before the
//     text at the start of the prompt and after every special token
//     (tokenizer.ggml.add_space_prefix, on unless the model says off);
//     Ollama's Go tokenizer does not.
//   - Byte-level BPE: llama.cpp looks a whole pre-tokenized word up in the
//     vocabulary only for Llama 3-style pre-tokenizers ("ignore_merges");
//     for every other one it applies the merges, which can end in other
//     tokens than the whole word. Ollama's Go tokenizer always looks the
//     whole word up first.
//
// Architectures that need Ollama's own engine (Gemma 3, Qwen 3, …) are
// tokenized by its Go package, and counted with it unchanged.

// onLlamaCpp reports whether Ollama runs the model described by
// model_info on llama.cpp's runner.
func onLlamaCpp(kv map[string]any) bool {
	return !ggml.KV(kv).OllamaEngineRequired()
}

// engine is what a Tokenizer needs to count as one runner or the other:
// the vocabulary, its kind (tokenizer.ggml.model), pre-tokenizer and
// add_space_prefix flag, and the runner it counts for now.
type engine struct {
	vocab       *tokenizer.Vocabulary
	kind, pre   string
	arch        string // general.architecture
	spacePrefix bool
	// bosKey is the file's tokenizer.ggml.add_bos_token, nil without one.
	bosKey   *bool
	llamaCpp bool
}

// addsBOS reports whether e's runner adds the BOS token to a prompt: the
// file's add_bos_token when it has one, else the runner's default. For
// llama.cpp that is yes for SentencePiece and WordPiece and, among
// byte-level BPE vocabularies, only for the pre-tokenizers it names
// (llama-vocab.cpp); for Ollama's engine, yes except for the
// architectures whose model code says no. llama.cpp's GLM-4
// pre-tokenizer has no BOS token at all.
func (e engine) addsBOS() bool {
	if e.llamaCpp && (e.pre == "glm4" || e.pre == "chatglm-bpe") {
		return false
	}
	if e.bosKey != nil {
		return *e.bosKey
	}
	if !e.llamaCpp {
		return !slices.Contains(noBOSArchitectures, e.arch)
	}
	return e.kind != "gpt2" || slices.Contains(bosPretokenizers, e.pre)
}

// exprs are the expressions e's runner splits byte-level BPE text with.
func (e engine) exprs() []string {
	if own, ok := ollamaPretokenizer(e.arch, e.pre); ok && !e.llamaCpp {
		return own
	}
	if own, ok := llamaCppPretokenizer(e.pre); ok && e.llamaCpp {
		return own
	}
	return Pretokenizer(e.pre)
}

// bosPretokenizers are the byte-level BPE pre-tokenizers llama.cpp adds a
// BOS token for when the file does not say.
var bosPretokenizers = []string{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
	"tekken", "chameleon"}

// noBOSArchitectures are the architectures Ollama's engine adds no BOS
// token for when the file does not say (their model code's default).
var noBOSArchitectures = []string{"qwen35", "qwen35moe", "qwen3next", "glm4moelite", "qwen3vl", "qwen3vlmoe", "qwen25vl",
	"glmocr", "olmo3", "nemotron_h", "nemotron_h_moe", "gptoss", "gpt-oss"}

// runOn makes m count as the runner says: llama.cpp's (llamaCpp) or
// Ollama's own engine.
func (m *Tokenizer) runOn(llamaCpp bool) {
	e := &m.engine
	e.llamaCpp = llamaCpp
	runner := "ollama"
	if llamaCpp {
		runner = "llama.cpp"
	}
	m.merging, m.spmPrefix = nil, false
	m.addBOS = e.addsBOS() && len(e.vocab.BOS) > 0
	switch e.kind {
	case "gpt2":
		m.name = runner + ":gpt2/" + cmpOr(e.pre, "default")
		exprs := e.exprs()
		m.tok = tokenizer.NewBytePairEncoding(e.vocab, exprs...)
		if llamaCpp && !slices.Contains(ignoresMerges, e.pre) {
			m.merging = newMergingBPE(e.vocab, exprs)
		}
	case "llama":
		m.name = runner + ":spm"
		m.spmPrefix = llamaCpp && e.spacePrefix
	case "bert":
		m.name = "ollama:wpm"
		m.addBOS = false
	}
}

// OtherEngine returns m counting as the other runner would: Ollama's own
// engine for a model m counts as llama.cpp runs it, and the reverse. The
// server decides the runner from the architecture, and the environment
// (OLLAMA_NEW_ENGINE) can move a model to Ollama's engine, which a client
// cannot see: when m's counts miss, the other runner's may be right. It
// returns nil when the runners count alike (a WordPiece vocabulary, or a
// BPE one both runners split the same way).
func (m *Tokenizer) OtherEngine() *Tokenizer {
	o := *m
	o.runOn(!m.engine.llamaCpp)
	if o.merging == nil && m.merging == nil && o.spmPrefix == m.spmPrefix && o.addBOS == m.addBOS &&
		(m.engine.kind != "gpt2" || slices.Equal(o.engine.exprs(), m.engine.exprs())) {
		return nil
	}
	o.pieces = cache.NewSharded[pieceKey, int](maxPieces, func(k pieceKey) uint64 { return k.hash })
	o.shares = cache.New[uint64, int](maxPieces)
	return &o
}

// ignoresMerges lists the tokenizer.ggml.pre values llama.cpp gives
// ignore_merges (the Llama 3 family, and Tekken).
var ignoresMerges = []string{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "tekken"}

// mergingBPE encodes pre-tokenized words by applying merges in rank
// order, leftmost first on ties, without looking the whole word up: the
// standard algorithm, as llama.cpp's BPE session runs it.
type mergingBPE struct {
	vocab   *tokenizer.Vocabulary
	regexps []*regexp2.Regexp
}

func newMergingBPE(vocab *tokenizer.Vocabulary, pre []string) *mergingBPE {
	if len(pre) == 0 {
		pre = []string{`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`}
	}
	b := &mergingBPE{vocab: vocab}
	for _, p := range pre {
		b.regexps = append(b.regexps, regexp2.MustCompile(p, regexp2.RE2))
	}
	return b
}

// split applies each pre-tokenizer expression in turn to every part, the
// text between matches kept as parts of its own.
func (b *mergingBPE) split(s string) []string {
	parts := []string{s}
	for _, re := range b.regexps {
		var next []string
		for _, part := range parts {
			r := []rune(part)
			offset := 0
			for m, _ := re.FindRunesMatch(r); m != nil; m, _ = re.FindNextMatch(m) {
				if m.Index > offset {
					next = append(next, string(r[offset:m.Index]))
				}
				next = append(next, m.String())
				offset = m.Index + m.Length
			}
			if offset < len(r) {
				next = append(next, string(r[offset:]))
			}
		}
		parts = next
	}
	return parts
}

// byteLevel maps s's bytes to GPT-2's printable runes.
func byteLevel(s string) []string {
	out := make([]string, 0, len(s))
	for _, c := range []byte(s) {
		r := rune(c)
		switch {
		case r == 0x00ad:
			r = 0x0143
		case r <= 0x0020:
			r += 0x0100
		case r >= 0x007f && r <= 0x00a0:
			r += 0x00a2
		}
		out = append(out, string(r))
	}
	return out
}

// count returns the tokens of text that holds no special token.
func (b *mergingBPE) count(text string) int {
	n := 0
	for _, word := range b.split(text) {
		syms := byteLevel(word)
		for len(syms) > 1 {
			best, at := -1, -1
			for i := 0; i+1 < len(syms); i++ {
				rank := b.vocab.Merge(syms[i], syms[i+1])
				if rank < 0 || (best >= 0 && rank >= best) {
					continue
				}
				if b.vocab.Encode(syms[i]+syms[i+1]) < 0 {
					continue
				}
				best, at = rank, i
			}
			if at < 0 {
				break
			}
			syms[at] += syms[at+1]
			syms = slices.Delete(syms, at+1, at+2)
		}
		for _, s := range syms {
			if b.vocab.Encode(s) >= 0 {
				n++
			}
		}
	}
	return n
}
