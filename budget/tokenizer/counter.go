package tokenizer

import (
	"math"
	"unicode/utf8"
)

// Counter counts the tokens of plain text. Implementations are safe for
// concurrent use and never panic, whatever the input (empty, invalid
// UTF-8, many megabytes).
type Counter interface {
	// Count returns the tokens of text; 0 for the empty string.
	Count(text string) int
	// Name names the encoding ("cl100k_base", "o200k_base", "approximate").
	Name() string
}

// Encoding names: what Counter.Name returns.
const (
	EncodingCL100K      = "cl100k_base"
	EncodingO200K       = "o200k_base"
	EncodingApproximate = "approximate"
)

// Default approximation rates.
const (
	// DefaultCharsPerToken is the rule of thumb for English text: 1 token
	// ≈ 4 characters.
	DefaultCharsPerToken = 4.0
	// WordTokens is the same rule of thumb per word (1 token ≈ ¾ of a
	// word, so about 1.3 tokens a word).
	WordTokens = 1.3
)

// Approx estimates tokens without a tokenizer: bytes divided by
// CharsPerToken, or words times TokensPerWord when that is set. Its zero
// value is the 4-characters-per-token rule of thumb.
//
// "Characters" are UTF-8 bytes, not runes. BPE vocabularies split
// non-ASCII text into more tokens per character than English: on a mixed
// sample of English, accented Latin, Cyrillic, Greek and CJK text
// (testdata/mixed.txt) cl100k_base finds 1 token per 3.25 bytes but per
// 2.14 runes, so bytes/4 is 19% under where runes/4 is 47% under
// (TestApproxBytesNotRunes). For ASCII the two are the same. Counting
// bytes also makes the estimate O(1): no scan of a 10 MB message.
type Approx struct {
	// CharsPerToken is the divisor; 0 means DefaultCharsPerToken (a
	// smaller divisor such as 3.5 counts more tokens: safer).
	CharsPerToken float64
	// TokensPerWord, when positive, counts words (runs of non-space)
	// times this factor instead (e.g. WordTokens).
	TokensPerWord float64
}

// Name returns "approximate".
func (Approx) Name() string { return EncodingApproximate }

// Count returns the estimated tokens of text, rounded up so that any
// non-empty text costs at least one token.
func (a Approx) Count(text string) int {
	if text == "" {
		return 0
	}
	if a.TokensPerWord > 0 {
		return ceil(float64(words(text)) * a.TokensPerWord)
	}
	cpt := a.CharsPerToken
	if !(cpt > 0) || math.IsInf(cpt, 0) {
		cpt = DefaultCharsPerToken
	}
	return ceil(float64(len(text)) / cpt)
}

// words counts runs of non-space runes without allocating.
func words(s string) int {
	n, in := 0, false
	for i := 0; i < len(s); {
		c := s[i]
		var space bool
		if c < utf8.RuneSelf {
			space = c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			space = r == 0x85 || r == 0xA0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200A) ||
				r == 0x2028 || r == 0x2029 || r == 0x202F || r == 0x205F || r == 0x3000
			i += size
		}
		if !space && !in {
			n++
		}
		in = !space
	}
	return n
}

// ceil rounds up and keeps the result in int range.
func ceil(f float64) int {
	if !(f > 0) {
		return 0
	}
	if f >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.Ceil(f))
}
