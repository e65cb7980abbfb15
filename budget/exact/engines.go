package exact

// The expressions Ollama's own engine splits text with before byte-level
// BPE are set by each architecture's model code, not by the file's
// tokenizer.ggml.pre alone as in llama.cpp (Pretokenizer): a llama model
// with "deepseek-r1-qwen" is split as Llama 3 there, and deepseek2 has
// rules of its own. These are Ollama v0.17.4's.

const (
	// regexLlama3 splits digits in threes: the Llama 3 family's
	// expression, Ollama's default for most architectures.
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// regexQwen2 splits digits one by one.
	regexQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// regexTekken is Mistral's.
	regexTekken = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// regexO200k is gpt-oss's and Llama 4's.
	regexO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// deepseekV3 are DeepSeek V3's three expressions, applied one after the
// other (each splits what the one before left).
var deepseekV3 = []string{
	`\p{N}{1,3}`,
	`[一-龥぀-ゟ゠-ヿ]+`,
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
}

// ollamaPretokenizer returns the expressions Ollama's engine splits a
// byte-level BPE model of architecture arch and pre-tokenizer pre with,
// nil for the default GPT-2 expression; ok is false for an architecture
// whose model code this table does not know (then llama.cpp's table for
// pre is the best guess).
func ollamaPretokenizer(arch, pre string) (exprs []string, ok bool) {
	switch arch {
	case "llama":
		switch pre {
		case "default":
			return nil, true
		case "qwen2":
			return []string{regexQwen2}, true
		case "refact", "tekken":
			return Pretokenizer(pre), true
		}
		return []string{regexLlama3}, true
	case "qwen2", "qwen25vl", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "qwen3vl", "qwen3vlmoe",
		"nemotron_h", "nemotron_h_moe":
		return []string{regexQwen2}, true
	case "glmocr", "mllama", "olmo3", "glm4moelite":
		return []string{regexLlama3}, true
	case "lfm2", "lfm2moe":
		if pre == "default" {
			return nil, true
		}
		return []string{regexLlama3}, true
	case "mistral3":
		return []string{regexTekken}, true
	case "gptoss", "gpt-oss", "llama4":
		return []string{regexO200k}, true
	case "deepseek2", "deepseekocr":
		return deepseekV3, true
	case "gemma3":
		return nil, true
	}
	return nil, false
}
