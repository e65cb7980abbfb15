package jsonscan

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The string codec: JSON string tokens read into text and text written
// as tokens.

// Unquote decodes a valid JSON string token.
func Unquote(tok []byte) (string, error) {
	if len(tok) < 2 || tok[0] != '"' || tok[len(tok)-1] != '"' {
		return "", errSyntax
	}
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), nil
	}
	return string(AppendUnescaped(nil, tok)), nil
}

// AppendUnescaped appends the text of a valid JSON string token, escapes
// decoded. A lone UTF-16 surrogate becomes U+FFFD, as in encoding/json.
func AppendUnescaped(dst, tok []byte) []byte {
	s := tok[1 : len(tok)-1]
	for {
		j := bytes.IndexByte(s, '\\')
		if j < 0 || j+1 >= len(s) {
			return append(dst, s...)
		}
		dst = append(dst, s[:j]...)
		c := s[j+1]
		s = s[j+2:]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s)
			if !ok {
				return dst // not valid; callers pass valid tokens
			}
			s = s[4:]
			if utf16.IsSurrogate(r) {
				r2 := unicode.ReplacementChar
				if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					if lo, ok := hex4(s[2:]); ok {
						if d := utf16.DecodeRune(r, lo); d != unicode.ReplacementChar {
							s, r2 = s[6:], d
						}
					}
				}
				r = r2
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// AppendString appends s as a JSON string token, the bytes encoding/json
// writes with HTML escaping off (json.Encoder.SetEscapeHTML(false)):
// invalid UTF-8 becomes U+FFFD, so the output is always valid, and U+2028
// and U+2029 are escaped.
func AppendString(dst []byte, s string) []byte { return appendString(dst, s, &safe) }

// AppendStringHTML is AppendString that also escapes <, > and &, the bytes
// json.Marshal writes.
func AppendStringHTML(dst []byte, s string) []byte { return appendString(dst, s, &htmlSafe) }

// AppendStringBytes is AppendString of the raw bytes s.
func AppendStringBytes(dst, s []byte) []byte {
	return appendString(dst, unsafe.String(unsafe.SliceData(s), len(s)), &safe)
}

// safe and htmlSafe mark the ASCII bytes a string token holds as they are.
var safe, htmlSafe = func() (plain, html [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
		html[c] = plain[c] && c != '<' && c != '>' && c != '&'
	}
	return plain, html
}()

func appendString(dst []byte, s string, ok *[utf8.RuneSelf]bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if ok[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// AppendKey appends `"name":` for a name that needs no escaping.
func AppendKey(dst []byte, name string) []byte {
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

// AppendInt appends n in decimal.
func AppendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// IsEmptyString reports whether tok is the token "".
func IsEmptyString(tok []byte) bool { return len(tok) == 2 && tok[0] == '"' }
