package exact

import "slices"

// llamaCppRules are the expressions llama.cpp's runner splits byte-level
// BPE text with before merging (llama-vocab.cpp as Ollama v0.17.4 vendors
// it), applied one after the other, each to the parts the one before left,
// with the tokenizer.ggml.pre values that select each list. The
// expressions are llama.cpp's own, its adaptations of the tokenizers'
// originals included (for the first request to count as the runner
// counts, ctxproxy splits as it splits), except that the Llama 3 and
// Qwen 2 ones are written as Ollama's engine writes them: llama.cpp's
// form spells the case-insensitive contractions out letter by letter,
// which matches the same text. Kimi K2's and AFMoE's steps include
// llama.cpp's hand-written splitters (llamacppsplit.go). A rule also says
// whether llama.cpp looks a whole word up before merging (ignore_merges)
// and whether it adds BOS when the file does not say (add_bos). Its
// expressions with \p{S} are written as that llama.cpp reads them
// (deepseekWords0174).
var llamaCppRules = []llamaCppRule{
	{[]string{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}, []string{
		regexLlama3,
	}, true, true},
	{[]string{"dbrx", "smaug-bpe"}, []string{
		regexLlama3,
	}, false, false},
	{[]string{"deepseek-llm"}, []string{
		`[\r\n]`,
		`\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+`,
		`\s?[!-/:-~！-／：-～‘-‟　-。]+`,
		`\s+$`,
		`[一-龥ࠀ-一가-퟿]+`,
		`\p{N}+`,
	}, false, false},
	{[]string{"deepseek-v3", "hunyuan-dense"}, []string{
		`\p{N}{1,3}`,
		cjkDeepSeek,
		deepseekWords0174,
	}, false, false},
	{[]string{"deepseek-coder"}, []string{
		`[\r\n]`,
		`\s?\p{L}+`,
		`\s?\p{P}+`,
		`[一-龥ࠀ-一가-퟿]+`,
		`\p{N}`,
	}, false, false},
	{[]string{"falcon"}, []string{
		"[\\p{P}\\$\\+<=>\\^~\\|`]+",
		`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
		`[0-9][0-9][0-9]`,
	}, false, false},
	{[]string{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, []string{
		`\p{N}`,
		`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
	}, false, false},
	{[]string{"mpt", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "jina-v1-en", "jina-v2-code", "roberta-bpe", "olmo", "jais", "exaone4", "trillion", "granite-docling"}, []string{
		`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
	}, false, false},
	{[]string{"qwen2", "deepseek-r1-qwen", "kormo", "stablelm2", "megrez", "hunyuan"}, []string{
		regexQwen2,
	}, false, false},
	{[]string{"poro-chat", "bloom", "gpt3-finnish"}, []string{
		` ?[^(\s|.,!?…。，、।۔،)]+`,
	}, false, false},
	{[]string{"glm4", "chatglm-bpe"}, []string{
		regexLlama3,
	}, false, false},
	{[]string{"viking"}, []string{
		` ?[^(\s|.,!?…。，、।۔،)]+`,
		`\p{N}`,
	}, false, false},
	{[]string{"tekken"}, []string{
		`[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, true, true},
	{[]string{"chameleon"}, []string{
		`<sentinel:[0-9]+>`,
		`(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z`,
		`([\t\n]|    |  )`,
		`\p{N}`,
		"[\\p{P}!-/:-@\\[-`{-~]",
		`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
	}, false, true},
	{[]string{"gpt-4o", "llama4", "minimax-m2"}, []string{
		`[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, false, false},
	{[]string{"superbpe"}, []string{
		`\p{N}+`,
		`(?=(\d{3})+(?!\d))`,
	}, false, false},
	{[]string{"bailingmoe", "bailingmoe2", "llada-moe"}, []string{
		`'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`,
	}, false, false},
	{[]string{"seed-coder"}, []string{
		`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, false, false},
	{[]string{"grok-2"}, []string{
		regexQwen2,
	}, false, false},
	{[]string{"kimi-k2"}, []string{
		splitKimiK2,
	}, false, false},
	{[]string{"afmoe"}, []string{
		splitAFMoE,
		scriptsAFMoE,
		deepseekWords0174,
	}, false, false},
	{[]string{"default"}, []string{
		`[\p{P}\$\+<=>\^~\|]+`,
		`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`,
		`\p{N}+`,
		`[0-9][0-9][0-9]`,
	}, false, false},
}

// deepseekWords is the expression of DeepSeek V3's pre-tokenizer (and
// AFMoE's) that splits words, punctuation and whitespace, as the llama.cpp
// of Ollama 0.30 and later reads it. 0.17.4's llama.cpp matched \p{S}
// among ASCII characters with its own list, which lacked "~" (unicode.cpp):
// there "~" is neither punctuation nor symbol, so it may lead a word and
// never joins a run of punctuation, as deepseekWords0174 writes it.
const (
	// cjkDeepSeek and scriptsAFMoE are the runs of scripts DeepSeek V3's
	// and AFMoE's pre-tokenizers split off whole.
	cjkDeepSeek  = `[一-龥぀-ゟ゠-ヿ]+`
	scriptsAFMoE = `[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+`

	deepseekWords     = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	deepseekWords0174 = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|(?:[^\\r\\n\\p{L}\\p{P}\\p{S}]|~)?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}-[~]]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)

// llamaServerRules are the rules the llama.cpp of Ollama 0.30 and later
// adds (llama-server, built from llama.cpp b10969 in Ollama 0.34.3; its
// llama-vocab.cpp and unicode.cpp): pre-tokenizer values with expressions
// of their own, and DeepSeek V3's and AFMoE's, whose \p{S} now holds "~"
// (deepseekWords). Every other value of llamaCppRules keeps its
// expressions and flags there, and llamaServerAliases are the new values
// that share a rule of either table. Two more changes of its expression
// engine are written into the expressions below: \p{Lu}, \p{Ll}, \p{Lt},
// \p{Lm} and \p{Lo} are read as any letter (so those are written \p{L}),
// and Qwen 2's and Qwen 3.5's expressions are hand-written code that
// splits as they do. Values whose tokenizer is not byte-level (gemma4,
// granite-embed-multi-311m and sarvam-moe split only at newlines and merge
// raw UTF-8 with "▁" for a space; whitespace) have no rule here.
var llamaServerRules = []llamaCppRule{
	{[]string{"deepseek-v3", "hunyuan-dense"}, []string{
		`\p{N}{1,3}`,
		cjkDeepSeek,
		deepseekWords,
	}, false, false},
	{[]string{"afmoe"}, []string{
		splitAFMoE,
		scriptsAFMoE,
		deepseekWords,
	}, false, false},
	{[]string{"qwen35"}, []string{
		`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, false, false},
	{[]string{"granite-embed-multi-97m"}, []string{
		`[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, true, false},
	{[]string{"tiny_aya", "cohere2moe"}, []string{
		splitAFMoE, // llama.cpp groups digits in threes with AFMoE's code
		`[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, false, false},
	{[]string{"youtu"}, []string{
		`[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+`,
		`[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, true, false},
	{[]string{"spark2_5"}, []string{
		`\p{N}{1,3}`,
		cjkDeepSeek,
		"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
		`\p{N}`,
	}, false, false},
	{[]string{"jais-2"}, []string{
		`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}`,
	}, false, false},
	{[]string{"exaone-moe"}, []string{
		`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+`,
	}, false, false},
	{[]string{"laguna"}, []string{
		`[^\n]+|[\n]+`,
		regexQwen2,
	}, false, false},
	{[]string{"minicpm5"}, []string{
		`\p{N}{1,3}`,
		`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, true, false},
	{[]string{"ufakzeka"}, []string{
		`[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}, false, false},
}

// llamaServerAliases are the values the llama.cpp of Ollama 0.30 and
// later adds to rules llamaCppRules already has, by a value of each.
var llamaServerAliases = map[string]string{
	"jina-v5-nano": "llama3",
	"f2llmv2":      "qwen2",
	"solar-open":   "qwen2",
	"modern-bert":  "gpt-2",
	"mellum2":      "starcoder",
	"kanana2":      "gpt-4o",
	"talkie":       "gpt-4o",
	"joyai-llm":    "deepseek-v3",
	"hy_v4":        "deepseek-v3",
}

// llamaCppRule is one rule of llama.cpp's table: the tokenizer.ggml.pre
// values it serves, its expressions, and its ignore_merges and add_bos.
type llamaCppRule struct {
	pres, exprs         []string
	wholeWords, addsBOS bool
}

// llamaCppRuleOf returns the rule llama.cpp splits text of the byte-level
// BPE pre-tokenizer pre with: as Ollama v0.17.4 vendors it, or, when
// llamaServer, as Ollama 0.30 and later run it. It returns false for a
// value that llama.cpp has no expressions for (whole words and BOS are
// then off, as llama.cpp's defaults are).
func llamaCppRuleOf(pre string, llamaServer bool) (llamaCppRule, bool) {
	if pre == "" {
		pre = "default"
	}
	tables := [][]llamaCppRule{llamaCppRules}
	if llamaServer {
		if alias, ok := llamaServerAliases[pre]; ok {
			pre = alias
		}
		tables = [][]llamaCppRule{llamaServerRules, llamaCppRules}
	}
	for _, table := range tables {
		for _, r := range table {
			if slices.Contains(r.pres, pre) {
				return r, true
			}
		}
	}
	return llamaCppRule{}, false
}
