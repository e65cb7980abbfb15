package exact

import "maps"

// Reading model_info's values as /api/show's JSON gives them, or as a
// Vocab holds them (typed slices, returned as they are).

// Vocab is a vocabulary's four long arrays of model_info
// (tokenizer.ggml.tokens, .token_type, .scores and .merges), typed: what
// ctxproxy's tokenizer directory keeps them as, so that a restarted
// ctxproxy builds a tokenizer without decoding them as JSON into []any.
type Vocab struct {
	Tokens []string
	Types  []int32
	Scores []float32 // nil for a vocabulary without scores
	Merges []string  // nil for a vocabulary without merges
}

const (
	keyTokens = "tokenizer.ggml.tokens"
	keyTypes  = "tokenizer.ggml.token_type"
	keyScores = "tokenizer.ggml.scores"
	keyMerges = "tokenizer.ggml.merges"
)

// Split returns show with its vocabulary's arrays taken out of ModelInfo
// (a copy of it without them) and put in Vocab, as New reads them; a show
// whose Vocab is set comes back as it is.
func (s Show) Split() Show {
	if s.Vocab != nil {
		return s
	}
	kv := s.ModelInfo
	v := &Vocab{Tokens: strings_(kv[keyTokens]), Types: ints(kv[keyTypes])}
	if f := floats(kv[keyScores]); len(f) > 0 {
		v.Scores = f
	}
	if m := strings_(kv[keyMerges]); len(m) > 0 {
		v.Merges = m
	}
	s.ModelInfo = maps.Clone(kv)
	for _, k := range []string{keyTokens, keyTypes, keyScores, keyMerges} {
		delete(s.ModelInfo, k)
	}
	s.Vocab = v
	return s
}

// modelInfo is show's model_info with Vocab's arrays under their keys
// (a copy of the map) when Vocab is set.
func (s Show) modelInfo() map[string]any {
	if s.Vocab == nil {
		return s.ModelInfo
	}
	kv := make(map[string]any, len(s.ModelInfo)+4)
	maps.Copy(kv, s.ModelInfo)
	kv[keyTokens], kv[keyTypes] = s.Vocab.Tokens, s.Vocab.Types
	if s.Vocab.Scores != nil {
		kv[keyScores] = s.Vocab.Scores
	}
	if s.Vocab.Merges != nil {
		kv[keyMerges] = s.Vocab.Merges
	}
	return kv
}

// tokenAt is model_info kv's token i, "" past the end.
func tokenAt(kv map[string]any, i int) string {
	switch a := kv[keyTokens].(type) {
	case []string:
		if i < len(a) {
			return a[i]
		}
	case []any:
		if i < len(a) {
			s, _ := a[i].(string)
			return s
		}
	}
	return ""
}

func strings_(v any) []string {
	if s, ok := v.([]string); ok {
		return s
	}
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func ints(v any) []int32 {
	if s, ok := v.([]int32); ok {
		return s
	}
	a, _ := v.([]any)
	out := make([]int32, 0, len(a))
	for _, x := range a {
		n, _ := number(x)
		out = append(out, int32(n))
	}
	return out
}

func floats(v any) []float32 {
	if s, ok := v.([]float32); ok {
		return s
	}
	a, _ := v.([]any)
	out := make([]float32, 0, len(a))
	for _, x := range a {
		f, _ := x.(float64)
		out = append(out, float32(f))
	}
	return out
}

func number(v any) (int, bool) {
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}

func boolOr(v any, def bool) bool {
	if b, ok := v.(bool); ok {
		return b
	}
	return def
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
