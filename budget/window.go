package budget

import (
	"cmp"

	"slices"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// Window are a model's context window and what of it is kept free.
type Window struct {
	// MaxTokens is the context window: prompt and reply together.
	MaxTokens int
	// MaxOutputTokens is kept free for the reply.
	MaxOutputTokens int
	// Reserved is a safety margin kept free as well.
	Reserved int
}

// Effective returns the tokens a prompt may use: MaxTokens − MaxOutputTokens
// − Reserved, never negative (100000 − 4096 − 1000 = 94904).
func (l Window) Effective() int {
	return max(0, l.MaxTokens-l.MaxOutputTokens-l.Reserved)
}

// WithOutput returns l with the reply reserve replaced by what the request
// itself asks for (max_tokens, max_completion_tokens or Ollama's
// options.num_predict). n ≤ 0 — absent, or num_predict −1 (unbounded) —
// keeps the model's default reserve.
func (l Window) WithOutput(n int) Window {
	if n > 0 {
		l.MaxOutputTokens = n
	}
	return l
}

// Yield returns l with the reply reserve lowered to floor when it is
// larger (floor ≤ 0 changes nothing). For a backend that counts no reply
// into the window (Ollama: num_predict only caps the reply), a request's
// max_tokens is room the reply may use where the prompt leaves it, never
// a reason to cut the prompt: only floor, the model's own reserve, is
// kept free whatever the prompt (an agent's max_tokens 32000 on an
// 8192-token window cuts nothing of a 6000-token prompt; the reply gets
// the 2192 tokens left).
func (l Window) Yield(floor int) Window {
	if floor > 0 && l.MaxOutputTokens > floor {
		l.MaxOutputTokens = floor
	}
	return l
}

// ReplyRoom is what a prompt of prompt tokens leaves the reply of the
// window: MaxTokens − Reserved − prompt, never negative.
func (l Window) ReplyRoom(prompt int) int {
	return max(0, l.MaxTokens-l.Reserved-prompt)
}

// Cap returns l with the window narrowed to window tokens when that is
// smaller (the num_ctx the backend runs with); window ≤ 0 changes nothing.
func (l Window) Cap(window int) Window {
	if window > 0 && window < l.MaxTokens {
		l.MaxTokens = window
	}
	return l
}

// Floor returns l with the reply reserve (and, if need be, the safety
// margin) lowered so that at least a quarter of the window is left for
// the prompt, and true when it had to. A request whose num_predict or
// max_tokens is as large as the window would otherwise leave an
// effective limit of 0: nothing could be sent, and nothing managed.
func (l Window) Floor() (Window, bool) {
	quarter := max(1, l.MaxTokens/4)
	if l.MaxTokens <= 0 || l.Effective() >= quarter {
		return l, false
	}
	out := l.MaxTokens - quarter - l.Reserved
	if out < 0 {
		l.Reserved = max(0, l.MaxTokens-quarter)
		out = 0
	}
	l.MaxOutputTokens = out
	return l, true
}

// Defaults for a model ctxproxy does not know.
const (
	// DefaultMaxTokens is the window assumed for an unknown model that
	// reports no trained context length: small enough that every model
	// ctxproxy is likely to front holds it (gpt-4, Llama 3, Gemma 2), so
	// an unknown model gets trimmed early rather than silently truncated
	// by its backend. Configure the real size under models:.
	DefaultMaxTokens = 8192
	// DefaultOutputTokens is the reply reserve of a model that has no
	// output limit of its own (local models; context.reserve_output).
	DefaultOutputTokens = 1024
)

// known is one row of the table of known model families.
type known struct {
	prefix    string
	window    int
	maxOutput int // 0: a local model, reply reserve from config
}

// table lists context windows (and, for hosted models, maximum output) by
// family prefix. A model name is matched after normalization (see family)
// by its longest matching prefix. Sources: the vendors' model pages and
// each model's trained context_length as Ollama's /api/show reports it.
var table = []known{
	// Anthropic (claude-3-opus: a 200000-token window, 4096 out).
	{"claude", 200000, 4096},
	{"claude-2", 100000, 4096},
	{"claude-2.1", 200000, 4096},
	{"claude-instant", 100000, 4096},
	{"claude-3-opus", 200000, 4096},
	{"claude-3-sonnet", 200000, 4096},
	{"claude-3-haiku", 200000, 4096},
	{"claude-3-5-sonnet", 200000, 8192},
	{"claude-3.5-sonnet", 200000, 8192},
	{"claude-3-5-haiku", 200000, 8192},
	{"claude-3.5-haiku", 200000, 8192},
	{"claude-3-7-sonnet", 200000, 64000},
	{"claude-3.7-sonnet", 200000, 64000},
	{"claude-sonnet-4", 200000, 64000},
	{"claude-4-sonnet", 200000, 64000},
	{"claude-opus-4", 200000, 32000},
	{"claude-4-opus", 200000, 32000},
	{"claude-opus-4-5", 200000, 64000},
	{"claude-opus-4.5", 200000, 64000},
	{"claude-haiku-4-5", 200000, 64000},
	{"claude-haiku-4.5", 200000, 64000},

	// OpenAI.
	{"gpt-3.5-turbo", 16385, 4096},
	{"gpt-4", 8192, 4096},
	{"gpt-4-32k", 32768, 4096},
	{"gpt-4-turbo", 128000, 4096},
	{"gpt-4-1106", 128000, 4096},
	{"gpt-4-0125", 128000, 4096},
	{"gpt-4-vision", 128000, 4096},
	{"gpt-4o", 128000, 16384},
	{"gpt-4o-mini", 128000, 16384},
	{"chatgpt-4o", 128000, 16384},
	{"gpt-4.1", 1047576, 32768},
	{"gpt-4.5", 128000, 16384},
	{"gpt-5", 400000, 128000},
	{"gpt-5-chat", 128000, 16384},
	{"o1", 200000, 100000},
	{"o1-mini", 128000, 65536},
	{"o1-preview", 128000, 32768},
	{"o3", 200000, 100000},
	{"o3-mini", 200000, 100000},
	{"o4-mini", 200000, 100000},
	{"gpt-oss", 131072, 0},

	// DeepSeek's API.
	{"deepseek-chat", 131072, 8192},
	{"deepseek-reasoner", 131072, 32768},

	// Local models (Ollama library names).
	{"llama2", 4096, 0},
	{"codellama", 16384, 0},
	{"llama3", 8192, 0},
	{"llama3.1", 131072, 0},
	{"llama3.2", 131072, 0},
	{"llama3.3", 131072, 0},
	{"llama4", 1048576, 0},
	{"qwen", 32768, 0},
	{"qwen2", 32768, 0},
	{"qwen2.5", 32768, 0},
	{"qwen2.5-coder", 32768, 0},
	{"qwen3", 40960, 0},
	{"qwen3-coder", 262144, 0},
	{"qwq", 40960, 0},
	{"mistral", 32768, 0},
	{"mistral-nemo", 131072, 0},
	{"mistral-small", 32768, 0},
	{"mistral-small3.1", 131072, 0},
	{"mistral-small3.2", 131072, 0},
	{"mistral-large", 131072, 0},
	{"mixtral", 32768, 0},
	{"codestral", 32768, 0},
	{"devstral", 131072, 0},
	{"gemma", 8192, 0},
	{"gemma2", 8192, 0},
	{"gemma3", 131072, 0},
	{"gemma3n", 32768, 0},
	{"phi3", 4096, 0},
	{"phi3.5", 131072, 0},
	{"phi4", 16384, 0},
	{"phi4-mini", 131072, 0},
	{"phi4-reasoning", 32768, 0},
	{"deepseek-r1", 131072, 0},
	{"deepseek-v3", 163840, 0},
	{"deepseek-coder", 16384, 0},
	{"deepseek-coder-v2", 163840, 0},
	{"command-r", 131072, 0},
	{"command-r-plus", 131072, 0},
	{"command-a", 256000, 0},
	{"granite3.1", 131072, 0},
	{"granite3.2", 131072, 0},
	{"granite3.3", 131072, 0},
	{"smollm2", 8192, 0},
	{"tinyllama", 2048, 0},
}

func init() {
	// Longest prefix first, so "llama3.1" wins over "llama3".
	slices.SortStableFunc(table, func(a, b known) int { return cmp.Compare(len(b.prefix), len(a.prefix)) })
}

// Known returns the table's limits for model and whether it knows the
// family. MaxOutputTokens is 0 for a local model (no output limit of its
// own). Reserved is never set.
func Known(model string) (Window, bool) {
	if r, ok := knownCache.Get(model); ok {
		return r.l, r.ok
	}
	k, ok := lookup(model, func(k known) string { return k.prefix }, table)
	l := Window{MaxTokens: k.window, MaxOutputTokens: k.maxOutput}
	knownCache.Add(model, knownResult{l, ok})
	return l, ok
}

// knownCache remembers Known's answers: the table does not change, and
// every chat request asks for its model (matching a name against the table
// normalizes it and tries each prefix).
var knownCache = cache.New[string, knownResult](1024)

type knownResult struct {
	l  Window
	ok bool
}

// lookup finds the row of rows whose key best names model: the longest key
// that prefixes the normalized name; failing that, the same with hyphens
// before version digits dropped ("llama-3.1-8b" → "llama3.1-8b"); failing
// that, the longest key of five or more bytes that starts a word inside
// the name ("meta-llama-3.1-8b-instruct").
func lookup[T any](model string, key func(T) string, rows []T) (T, bool) {
	name := family(model)
	var zero T
	if name == "" {
		return zero, false
	}
	squeezed := squeeze(name)
	for _, n := range []string{name, squeezed} {
		if r, ok := longest(rows, key, func(k string) bool { return strings.HasPrefix(n, k) }); ok {
			return r, true
		}
	}
	return longest(rows, key, func(k string) bool {
		if len(k) < 5 {
			return false
		}
		for _, n := range []string{name, squeezed} {
			for i := 0; i+len(k) <= len(n); i++ {
				if (i == 0 || !asciiAlnum(n[i-1])) && strings.HasPrefix(n[i:], k) {
					return true
				}
			}
		}
		return false
	})
}

// longest returns the row with the longest key that match accepts.
func longest[T any](rows []T, key func(T) string, match func(string) bool) (T, bool) {
	var best T
	bestLen := -1
	for _, r := range rows {
		if k := strings.ToLower(key(r)); len(k) > bestLen && match(k) {
			best, bestLen = r, len(k)
		}
	}
	return best, bestLen >= 0
}

// family normalizes a model name for lookup: lower case, without a
// registry, namespace or Ollama tag ("registry.ollama.ai/library/
// llama3.1:8b-instruct-q4_K_M" → "llama3.1", "hf.co/org/Qwen2.5-7B:Q4" →
// "qwen2.5-7b", "anthropic/claude-3-opus" → "claude-3-opus").
func family(model string) string {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	if i := strings.IndexByte(m, ':'); i >= 0 {
		m = m[:i]
	}
	return m
}

// squeeze drops a hyphen between a letter and a digit, the way Hugging
// Face names spell the families Ollama writes without one.
func squeeze(s string) string {
	if !strings.Contains(s, "-") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '-' && i > 0 && i+1 < len(s) && asciiLetter(s[i-1]) && asciiDigit(s[i+1]) {
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func asciiLetter(c byte) bool { return c >= 'a' && c <= 'z' }
func asciiDigit(c byte) bool  { return c >= '0' && c <= '9' }
func asciiAlnum(c byte) bool  { return asciiLetter(c) || asciiDigit(c) }
