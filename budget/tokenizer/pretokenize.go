package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers below split text the way the regular expressions of
// OpenAI's encodings do, without a regular expression engine: tiktoken-go
// runs them on dlclark/regexp2, which backtracks, allocates per match and
// converts the text to runes, and was most of the time spent counting.
// Each function returns the end of the piece that starts at p (p < len(s)),
// taking the alternatives in the patterns' order, with the backtracking
// they imply worked out by hand. TestTiktokenMatchesReference and
// FuzzTiktoken check the counts they lead to against tiktoken-go, which
// runs the patterns themselves.
//
// Character classes are Go's unicode tables, as in regexp2: \s is
// unicode.IsSpace, \p{L} unicode.IsLetter, \p{N} unicode.IsNumber.

// cl100kPiece implements
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func cl100kPiece(s string, p int) int {
	r, n := decode(s, p)
	if r == '\'' {
		if k := contraction(s, p+n); k > 0 {
			return p + n + k
		}
	}
	if isLetter(r) {
		return run(s, p+n, isLetter)
	}
	if prefix(r) && p+n < len(s) {
		if r2, n2 := decode(s, p+n); isLetter(r2) {
			return run(s, p+n+n2, isLetter)
		}
	}
	if isNumber(r) {
		return numbers(s, p+n)
	}
	if e := punctuation(s, p, r, n, false); e > 0 {
		return e
	}
	return whitespace(s, p)
}

// o200kPiece implements
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
func o200kPiece(s string, p int) int {
	r, n := decode(s, p)
	pre := prefix(r)
	if pre {
		if e := o200kLower(s, p+n); e > 0 {
			return e
		}
	}
	if e := o200kLower(s, p); e > 0 {
		return e
	}
	if pre {
		if e := o200kUpper(s, p+n); e > 0 {
			return e
		}
	}
	if e := o200kUpper(s, p); e > 0 {
		return e
	}
	if isNumber(r) {
		return numbers(s, p+n)
	}
	if e := punctuation(s, p, r, n, true); e > 0 {
		return e
	}
	return whitespace(s, p)
}

// o200kLower matches [U]*[W]+ contraction? at q (0 if no match), where U
// is upper-like (Lu Lt Lm Lo M) and W lower-like (Ll Lm Lo M) letters.
// U* is greedy: it backtracks to the last position from which W+ can
// match, which is the end of the U run if a W follows it, else the last W
// inside the run (W+ then takes just that one).
func o200kLower(s string, q int) int {
	i, lastW, lastWEnd := q, -1, 0
	for i < len(s) {
		r, n := decode(s, i)
		if !isUpperLike(r) {
			break
		}
		if isLowerLike(r) {
			lastW, lastWEnd = i, i+n
		}
		i += n
	}
	var end int
	if i < len(s) {
		if r, _ := decode(s, i); isLowerLike(r) {
			end = run(s, i, isLowerLike)
		}
	}
	if end == 0 {
		if lastW < 0 {
			return 0
		}
		end = lastWEnd
	}
	return withContraction(s, end)
}

// o200kUpper matches [U]+[W]*contraction? at q (0 if no match).
func o200kUpper(s string, q int) int {
	i := run(s, q, isUpperLike)
	if i == q {
		return 0
	}
	return withContraction(s, run(s, i, isLowerLike))
}

// withContraction extends a word ending at end by an optional contraction.
func withContraction(s string, end int) int {
	if end < len(s) && s[end] == '\'' {
		if k := contraction(s, end+1); k > 0 {
			return end + 1 + k
		}
	}
	return end
}

// contraction returns the length of s|t|re|ve|m|ll|d (any case) at i, or 0.
func contraction(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	switch s[i] | 0x20 {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if i+1 < len(s) && s[i+1]|0x20 == 'e' {
			return 2
		}
	case 'l':
		if i+1 < len(s) && s[i+1]|0x20 == 'l' {
			return 2
		}
	}
	return 0
}

// numbers matches the rest of \p{N}{1,3} after one number ending at i.
func numbers(s string, i int) int {
	for k := 1; k < 3 && i < len(s); k++ {
		r, n := decode(s, i)
		if !isNumber(r) {
			break
		}
		i += n
	}
	return i
}

// punctuation matches " ?[^\s\p{L}\p{N}]+[\r\n]*" at p, whose rune r is n
// bytes long, or returns 0; with slash, the tail is o200k's [\r\n/]* (a
// line break may be followed by more slashes: ">\n/" is one piece).
func punctuation(s string, p int, r rune, n int, slash bool) int {
	q := p
	if r == ' ' && p+1 < len(s) {
		if r2, _ := decode(s, p+1); isOther(r2) {
			q = p + 1
		}
	}
	if q == p && !isOther(r) {
		return 0
	}
	e := run(s, q, isOther)
	for e < len(s) && (s[e] == '\r' || s[e] == '\n' || slash && s[e] == '/') {
		e++
	}
	return e
}

// whitespace matches \s*[\r\n]+|\s+(?!\S)|\s+ at p: up to the last line
// break of the whitespace run; else the run, less its last character when
// a non-space follows (that character goes with the next word); else the
// one space.
func whitespace(s string, p int) int {
	e, lastBreak, last := p, -1, p
	for e < len(s) {
		r, n := decode(s, e)
		if !unicode.IsSpace(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastBreak = e
		}
		last = e
		e += n
	}
	switch {
	case lastBreak >= 0:
		return lastBreak + 1
	case e == p: // not whitespace: no rule above left one, but never split a rune
		_, n := decode(s, p)
		return p + n
	case e == len(s) || last == p:
		return e
	default:
		return last
	}
}

// run returns the end of the run of runes from i that are in class.
func run(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		r, n := decode(s, i)
		if !class(r) {
			break
		}
		i += n
	}
	return i
}

func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// prefix reports whether r may lead a word: [^\r\n\p{L}\p{N}].
func prefix(r rune) bool { return r != '\r' && r != '\n' && !isLetter(r) && !isNumber(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !unicode.IsSpace(r) && !isLetter(r) && !isNumber(r) }

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r|0x20 && r|0x20 <= 'z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

// isUpperLike is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]: a letter that is not
// lower case, or a mark.
func isUpperLike(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r) && !unicode.IsLower(r) || unicode.IsMark(r)
}

// isLowerLike is [\p{Ll}\p{Lm}\p{Lo}\p{M}]: a letter that is neither
// upper nor title case, or a mark.
func isLowerLike(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z'
	}
	return unicode.IsLetter(r) && !unicode.IsUpper(r) && !unicode.IsTitle(r) || unicode.IsMark(r)
}
