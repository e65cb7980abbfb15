package fakebackend

import "strings"

// What the fake's /api/show says of a model without a ModelSpec.

// Llama31ModelInfo is /api/show's model_info for llama3.1 8B.
func Llama31ModelInfo() map[string]any {
	return map[string]any{
		"general.architecture":                   "llama",
		"general.parameter_count":                8030261248,
		"llama.block_count":                      32,
		"llama.context_length":                   131072,
		"llama.embedding_length":                 4096,
		"llama.attention.head_count":             32,
		"llama.attention.head_count_kv":          8,
		"llama.attention.key_length":             128,
		"llama.attention.value_length":           128,
		"llama.feed_forward_length":              14336,
		"llama.rope.freq_base":                   500000,
		"llama.vocab_size":                       128256,
		"tokenizer.ggml.model":                   "gpt2",
		"llama.attention.layer_norm_rms_epsilon": 1e-05,
	}
}

// parameters is /api/show's parameters text: a Modelfile's PARAMETER
// lines without the keyword.
func parameters(modelfile string) string {
	var b strings.Builder
	for line := range strings.Lines(modelfile) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "PARAMETER "); ok {
			b.WriteString(rest + "\n")
		}
	}
	return b.String()
}
