package exact

import (
	"slices"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/cache"

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
// model_info on llama.cpp's runner: every architecture its own engine
// does not require, and those it requires but cannot load, where the
// server falls back to llama.cpp (llm/server.go in v0.17.4): a projector
// in a file of its own ("split vision models aren't supported"), or a
// tokenizer the architecture's model code refuses (ollamaEngineTakes).
func onLlamaCpp(kv map[string]any, splitProjector bool) bool {
	if !ggml.KV(kv).OllamaEngineRequired() || splitProjector {
		return true
	}
	return !ollamaEngineTakes(kv)
}

// ollamaEngineTakes reports whether the model code of Ollama's engine
// accepts the tokenizer of model_info kv: deepseek2 only with DeepSeek
// V3's pre-tokenizer (so Kimi K2 runs on llama.cpp), glm4moelite only
// with GLM-4's, lfm2 only with byte-level BPE (each New in
// model/models/<arch>/model.go).
func ollamaEngineTakes(kv map[string]any) bool {
	model, _ := kv["tokenizer.ggml.model"].(string)
	pre, _ := kv["tokenizer.ggml.pre"].(string)
	switch arch, _ := kv["general.architecture"].(string); arch {
	case "deepseek2":
		return pre == "deepseek-v3"
	case "glm4moelite":
		return pre == "glm4"
	case "lfm2", "lfm2moe":
		return model == "gpt2"
	}
	return true
}

// engine is what a Tokenizer needs to count as one runner or the other:
// the vocabulary, its kind (tokenizer.ggml.model), pre-tokenizer and
// add_space_prefix flag, and the runner it counts for now.
type engine struct {
	// vocab is the vocabulary as Ollama's tokenizer package takes it;
	// for byte-level BPE without its tokens and merges, which bpe holds.
	vocab       *tokenizer.Vocabulary
	bpe         *bpeVocab
	kind, pre   string
	arch        string // general.architecture
	spacePrefix bool
	// bosKey is the file's tokenizer.ggml.add_bos_token, nil without one.
	bosKey *bool
	// bosText is the BOS token's text ("<s>", "<|begin_of_text|>").
	bosText  string
	llamaCpp bool
	// llamaServer: the server is Ollama 0.30 or later, whose llama.cpp is
	// newer than 0.17.4's and has more rules (llamaServerRules).
	llamaServer bool
}

// rule returns llama.cpp's rule for e's pre-tokenizer, from the table of
// the llama.cpp e's server runs. A value llama.cpp does not know gets its
// default rule, as 0.17.4's llama.cpp splits it ("unrecognized
// pre-tokenizer type, using: 'default'"; llama-server refuses to load
// such a model).
func (e engine) rule() llamaCppRule {
	if r, ok := llamaCppRuleOf(e.pre, e.llamaServer); ok {
		return r
	}
	r, _ := llamaCppRuleOf("default", e.llamaServer)
	return r
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
	return e.kind != "gpt2" || e.rule().addsBOS
}

// exprs are the expressions e's runner splits byte-level BPE text with.
func (e engine) exprs() []string {
	if own, ok := ollamaPretokenizer(e.arch, e.pre); ok && !e.llamaCpp {
		return own
	}
	if e.llamaCpp {
		return e.rule().exprs
	}
	return Pretokenizer(e.pre)
}

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
	m.bpe, m.spmPrefix = nil, false
	m.addBOS = e.addsBOS() && len(e.vocab.BOS) > 0
	switch e.kind {
	case "gpt2":
		m.name = runner + ":gpt2/" + cmpOr(e.pre, "default")
		exprs := e.exprs()
		m.bpe = newBPE(e.bpe, exprs, llamaCpp, !llamaCpp || e.rule().wholeWords)
		m.tok = nil
	case "llama":
		m.name = runner + ":spm"
		m.spmPrefix = llamaCpp && e.spacePrefix
	case "bert":
		m.name = "ollama:wpm"
		m.addBOS = false
	}
}

// imageCost returns what img costs m on the runner it counts for now,
// and whether that is exact: on llama-server (Ollama 0.30 and later) the
// family's rule there (serverFamilies) or the projector's estimate; the
// family's rule on Ollama's engine (visionFamilies); on llama.cpp's
// runner, an estimate from the
// projector's facts (projectorEstimate); else the 768 the server assumes
// when it fits a prompt to the window. Estimates are corrected by the
// reply's prompt_eval_count.
func (m *Tokenizer) imageCost(img chat.Image) (tokens int, exact bool) {
	if m.rules.llamaServer {
		if m.serverImages != nil {
			return m.serverImages(img)
		}
		return m.projector, false
	}
	if m.images != nil && !m.engine.llamaCpp {
		return m.images(img)
	}
	if m.engine.llamaCpp {
		return m.projector, false
	}
	return imageTokens, false
}

// OtherEngine returns m counting as the other runner would: Ollama's own
// engine for a model m counts as llama.cpp runs it, and the reverse. The
// server decides the runner from the architecture, and the environment
// (OLLAMA_NEW_ENGINE) can move a model to Ollama's engine, which a client
// cannot see: when m's counts miss, the other runner's may be right. It
// returns nil when the runners count alike (a WordPiece vocabulary, a
// SentencePiece one without llama.cpp's space prefix).
func (m *Tokenizer) OtherEngine() *Tokenizer {
	o := *m
	o.runOn(!m.engine.llamaCpp)
	// Byte-level BPE always differs: the runners merge in other orders.
	if m.bpe == nil && o.spmPrefix == m.spmPrefix && o.addBOS == m.addBOS {
		return nil
	}
	o.pieces = cache.NewSharded[pieceKey, int](maxPieces, func(k pieceKey) uint64 { return k.hash })
	o.shares = cache.New[uint64, int](maxPieces)
	return &o
}
