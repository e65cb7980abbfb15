package exact

import "unicode"

// Two of llama.cpp's pre-tokenizers are hand-written code rather than
// expressions (src/unicode.cpp as Ollama v0.17.4 vendors it): Kimi K2's
// splitter, which its table selects with the expression `\p{Han}+`, and
// AFMoE's digit grouping, selected with `\p{AFMoE_digits}`. ctxproxy
// names them in its table by these keys and splits as that code does,
// where it differs from the tokenizers' own expressions included.
const (
	splitKimiK2 = "(llama.cpp's Kimi K2 splitter)"
	splitAFMoE  = "(llama.cpp's AFMoE digit grouping)"
)

// customSplitters are the hand-written splitters by key. Each returns the
// lengths, in runes, of the pieces it cuts r into, which cover r.
var customSplitters = map[string]func(r []rune) []int{
	splitKimiK2: kimiK2Pieces,
	splitAFMoE:  afmoePieces,
}

// isHan reports whether c is in the CJK ideograph blocks llama.cpp calls
// Han (unicode_cpt_is_han).
func isHan(c rune) bool {
	switch {
	case c >= 0x4E00 && c <= 0x9FFF, c >= 0x3400 && c <= 0x4DBF,
		c >= 0x20000 && c <= 0x2A6DF, c >= 0x2A700 && c <= 0x2EBEF,
		c >= 0xF900 && c <= 0xFAFF, c >= 0x2F800 && c <= 0x2FA1F:
		return true
	}
	return false
}

// pieces collects the lengths of consecutive pieces of a text.
type pieces struct {
	lens []int
	prev int
}

// cut ends the current piece at end; an empty piece is no piece.
func (p *pieces) cut(end int) {
	if end > p.prev {
		p.lens = append(p.lens, end-p.prev)
	}
	p.prev = end
}

// kimiK2Pieces splits as llama.cpp's Kimi K2 code: runs of Han; words of
// other letters with an optional leading character and English
// contraction; digits in threes; punctuation runs with their newlines;
// whitespace as the GPT-4 family splits it. Its letters are \p{L} only:
// the marks the tokenizer's expression allows in words are not letters
// to it.
func kimiK2Pieces(r []rune) []int {
	n := len(r)
	at := func(i int) rune {
		if i < n {
			return r[i]
		}
		return -1
	}
	letter := func(i int) bool { return i < n && unicode.IsLetter(r[i]) }
	word := func(i int) bool { return letter(i) && !isHan(r[i]) }
	number := func(i int) bool { return i < n && unicode.IsNumber(r[i]) }
	space := func(i int) bool { return i < n && unicode.IsSpace(r[i]) }
	var p pieces
	for pos := 0; pos < n; {
		c := r[pos]
		if isHan(c) {
			for isHan(at(pos)) {
				pos++
			}
			p.cut(pos)
			continue
		}
		lead := !(c == '\r' || c == '\n' || letter(pos) || number(pos))
		if word(pos) || (lead && word(pos+1)) {
			if lead {
				pos++
			}
			for word(pos) {
				pos++
			}
			if at(pos) == '\'' && pos+1 < n {
				next := unicode.ToLower(r[pos+1])
				switch {
				case next == 's' || next == 't' || next == 'm' || next == 'd':
					pos += 2
				case pos+2 < n:
					after := unicode.ToLower(r[pos+2])
					if (next == 'r' || next == 'v') && after == 'e' || next == 'l' && after == 'l' {
						pos += 3
					}
				}
			}
			p.cut(pos)
			continue
		}
		if number(pos) {
			start := pos
			for number(pos) {
				if pos++; pos-start >= 3 {
					p.cut(pos)
					start = pos
				}
			}
			p.cut(pos)
			continue
		}
		// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
		other := func(i int) bool { return i < n && !space(i) && !letter(i) && !number(i) }
		if q := pos + btoi(c == ' '); other(q) {
			for pos = q; other(pos); pos++ {
			}
			for at(pos) == '\r' || at(pos) == '\n' {
				pos++
			}
			p.cut(pos)
			continue
		}
		spaces, lastNewline := 0, 0
		for space(pos + spaces) {
			if c := r[pos+spaces]; c == '\r' || c == '\n' {
				lastNewline = pos + spaces + 1
			}
			spaces++
		}
		switch {
		case lastNewline > 0: // `\s*[\r\n]+`
			pos = lastNewline
		case spaces > 1 && pos+spaces < n: // `\s+(?!\S)`
			pos += spaces - 1
		case spaces > 0: // `\s+`
			pos += spaces
		default:
			pos++
		}
		p.cut(pos)
	}
	return p.lens
}

// afmoePieces groups each run of digits in threes from its end, so that
// the first group holds the one or two left over; the text before a run
// stays in one piece with the run's first group (the later expressions
// split it off), as llama.cpp's code does.
func afmoePieces(r []rune) []int {
	var p pieces
	for pos := 0; pos < len(r); {
		if !unicode.IsNumber(r[pos]) {
			pos++
			continue
		}
		start := pos
		for pos < len(r) && unicode.IsNumber(r[pos]) {
			pos++
		}
		cur := start
		if rest := (pos - start) % 3; rest > 0 {
			cur += rest
			p.cut(cur)
		}
		for ; cur < pos; cur += 3 {
			p.cut(cur + 3)
		}
	}
	p.cut(len(r))
	return p.lens
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
