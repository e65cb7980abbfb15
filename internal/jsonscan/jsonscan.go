// Package jsonscan is ctxproxy's small JSON reader and writer, shared by
// the decoding of chat requests (proxy/wire), the translation between
// dialects (proxy/translate), the check of stored messages
// (proxy/sessions) and the reading of image headers (internal/imagesize).
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// encoding/json needs two passes over a body even into json.RawMessage fields
// (a validity check, then the decode) and copies every raw value; on a 100 KB
// chat body that is about 0.4 ms, more than the whole translation costs here.
// The reader here validates a body once (Valid, eight bytes at a time
// inside strings), then walks it without checking again (Members, Elements)
// and hands out sub-slices of the input, so string contents (the bulk of a
// chat) are never copied into values or re-escaped: a JSON string token in
// an OpenAI body is already a valid JSON string token for an Ollama body.
// Valid runs at about 4 GB/s on a 100 KB chat body, ten times json.Valid.
// Fuzz tests hold the reader to json.Valid and the string codec to
// encoding/json.

// MaxDepth bounds nesting, as encoding/json does, so hostile input cannot
// exhaust the stack.
const MaxDepth = 10000

var (
	errSyntax = errors.New("invalid JSON")
	// ErrDepth reports a value nested deeper than allowed.
	ErrDepth = errors.New("JSON nested too deeply")
)

// Kind is the type of a JSON value, read from its first byte.
type Kind byte

const (
	KindInvalid Kind = iota
	KindNull
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindBool:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindArray:
		return "array"
	case KindObject:
		return "object"
	}
	return "invalid"
}

// KindOf reports the kind of a trimmed, valid JSON value.
func KindOf(v []byte) Kind {
	if len(v) == 0 {
		return KindInvalid
	}
	switch c := v[0]; {
	case c == 'n':
		return KindNull
	case c == 't' || c == 'f':
		return KindBool
	case c == '"':
		return KindString
	case c == '[':
		return KindArray
	case c == '{':
		return KindObject
	case c == '-' || (c >= '0' && c <= '9'):
		return KindNumber
	}
	return KindInvalid
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func SkipSpace(d []byte, i int) int {
	for i < len(d) && isSpace(d[i]) {
		i++
	}
	return i
}

// Valid reports whether d is exactly one JSON value, with optional
// surrounding white space, and returns it trimmed.
func Valid(d []byte) ([]byte, error) { return ValidDepth(d, MaxDepth) }

// ValidDepth is Valid with objects and arrays nested at most limit levels
// deep; a deeper value is an error wrapping ErrDepth. One pass both
// validates and bounds the nesting, so a hostile body never reaches a
// recursive decoder.
func ValidDepth(d []byte, limit int) ([]byte, error) {
	i := SkipSpace(d, 0)
	end, err := skipValue(d, i, limit)
	if err != nil {
		return nil, err
	}
	if SkipSpace(d, end) != len(d) {
		return nil, errSyntax
	}
	return d[i:end], nil
}

// ValidMembers is ValidDepth that also calls fn with each member of the
// document, when it is an object, as MembersAt would (the key's raw
// token, the value trimmed), in the same pass: a caller that needs the
// top-level members does not walk the document a second time. fn runs
// before the rest of the document is validated; what it was given is
// meaningful only when ValidMembers returns no error.
func ValidMembers(d []byte, limit int, fn func(key, val []byte)) ([]byte, error) {
	i := SkipSpace(d, 0)
	var end int
	var err error
	if i < len(d) && d[i] == '{' {
		end, err = walkObject(d, i, limit-1, fn)
	} else {
		end, err = skipValue(d, i, limit)
	}
	if err != nil {
		return nil, err
	}
	if SkipSpace(d, end) != len(d) {
		return nil, errSyntax
	}
	return d[i:end], nil
}

// skipValue validates the value starting at d[i], inside which left more
// levels of nesting are allowed, and returns the index just past it.
func skipValue(d []byte, i, left int) (int, error) {
	if i >= len(d) {
		return 0, errSyntax
	}
	switch c := d[i]; {
	case c == '"':
		return skipString(d, i)
	case c == '{':
		return skipObject(d, i, left-1)
	case c == '[':
		return skipArray(d, i, left-1)
	case c == 't':
		return skipLiteral(d, i, "true")
	case c == 'f':
		return skipLiteral(d, i, "false")
	case c == 'n':
		return skipLiteral(d, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(d, i)
	}
	return 0, errSyntax
}

func skipLiteral(d []byte, i int, lit string) (int, error) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return 0, errSyntax
	}
	return i + len(lit), nil
}

// plain marks the bytes a JSON string may hold unescaped; the scan loop
// stops only on the quote, the backslash and control characters.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Constants for testing eight bytes at once (SWAR).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special reports whether any of the eight bytes in x is a quote, a
// backslash or a control character: a byte is zero in x^('"'*ones) or in
// x^('\\'*ones), or below 0x20. It may report true for a plain byte only
// when a special one is also present; the byte loop then finds it.
func special(x uint64) bool {
	q := x ^ ('"' * ones)
	b := x ^ ('\\' * ones)
	return ((q-ones)&^q|(b-ones)&^b|(x-0x20*ones)&^x)&highs != 0
}

// skipString validates the string token at d[i] == '"'.
func skipString(d []byte, i int) (int, error) {
	i++
	// Most strings have no escapes: find the closing quote with
	// bytes.IndexByte (vector instructions), and check the text before it
	// for a backslash the same way and for control characters 32 bytes at
	// a time. A string with escapes is read byte by byte below.
	if j := bytes.IndexByte(d[i:], '"'); j >= 0 {
		text := d[i : i+j]
		if bytes.IndexByte(text, '\\') < 0 {
			if hasControl(text) {
				return 0, errSyntax
			}
			return i + j + 1, nil
		}
	}
	for {
		// Chat text is long runs of plain bytes: test eight at a time.
		for i+8 <= len(d) && !special(binary.LittleEndian.Uint64(d[i:])) {
			i += 8
		}
		for i < len(d) && plain[d[i]] {
			i++
		}
		if i >= len(d) {
			return 0, errSyntax
		}
		switch d[i] {
		case '"':
			return i + 1, nil
		case '\\':
			if i+1 >= len(d) {
				return 0, errSyntax
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(d)-i < 6 || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) || !isHex(d[i+5]) {
					return 0, errSyntax
				}
				i += 6
			default:
				return 0, errSyntax
			}
		default: // a control character
			return 0, errSyntax
		}
	}
}

// hasControl reports whether b holds a byte below 0x20, which a JSON
// string may not hold unescaped.
func hasControl(b []byte) bool {
	const low = 0x20 * ones
	for len(b) >= 32 {
		_ = b[31] // one bounds check for the four words
		w, x := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		y, z := binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
		if ((w-low)&^w|(x-low)&^x|(y-low)&^y|(z-low)&^z)&highs != 0 {
			return true
		}
		b = b[32:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// skipNumber validates a number token: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func skipNumber(d []byte, i int) (int, error) {
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return 0, errSyntax
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return 0, errSyntax
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return 0, errSyntax
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	return i, nil
}

func skipObject(d []byte, i, left int) (int, error) { return walkObject(d, i, left, nil) }

// walkObject is skipObject calling fn, when not nil, with each member's
// key token and value.
func walkObject(d []byte, i, left int, fn func(key, val []byte)) (int, error) {
	if left < 0 {
		return 0, ErrDepth
	}
	i = SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return 0, errSyntax
		}
		key := i
		var err error
		if i, err = skipString(d, i); err != nil {
			return 0, err
		}
		keyEnd := i
		i = SkipSpace(d, i)
		if i >= len(d) || d[i] != ':' {
			return 0, errSyntax
		}
		val := SkipSpace(d, i+1)
		if i, err = skipValue(d, val, left); err != nil {
			return 0, err
		}
		if fn != nil {
			fn(d[key:keyEnd], d[val:i])
		}
		i = SkipSpace(d, i)
		if i >= len(d) {
			return 0, errSyntax
		}
		switch d[i] {
		case ',':
			i = SkipSpace(d, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errSyntax
		}
	}
}

func skipArray(d []byte, i, left int) (int, error) {
	if left < 0 {
		return 0, ErrDepth
	}
	i = SkipSpace(d, i+1)
	if i < len(d) && d[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = skipValue(d, i, left); err != nil {
			return 0, err
		}
		i = SkipSpace(d, i)
		if i >= len(d) {
			return 0, errSyntax
		}
		switch d[i] {
		case ',':
			i = SkipSpace(d, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, errSyntax
		}
	}
}

// skipValid returns the index just past the value at d[i], which is known
// to be valid JSON (a part of a body Valid accepted): it does not
// check the grammar again, and finds string ends with bytes.IndexByte.
// On input that is not valid after all it still returns an index past i
// (at most len(d)), never panics and never loops.
func skipValid(d []byte, i int) int {
	if i >= len(d) {
		return len(d)
	}
	switch d[i] {
	case '"':
		return skipValidString(d, i)
	case '{', '[':
		depth := 0
		for i < len(d) {
			switch d[i] {
			case '"':
				i = skipValidString(d, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(d)
	}
	// A number or a literal: up to the next delimiter.
	i++
	for i < len(d) {
		switch d[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// skipValidString returns the index just past the string token at
// d[i] == '"': the first quote not escaped by an odd run of backslashes.
func skipValidString(d []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(d[i:], '"')
		if j < 0 {
			return len(d)
		}
		i += j
		n := 0
		for k := i - 1; k >= 0 && d[k] == '\\'; k-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
}

// Members calls fn for each member of obj, a trimmed and already validated
// JSON object, with the key's raw token (quotes included) and the trimmed
// value. It stops at fn's first error. Validation happens once, in
// Valid; walking a value again only looks for where things end.
func Members(obj []byte, fn func(key, val []byte) error) error {
	_, err := MembersAt(obj, 0, fn)
	return err
}

// MembersAt is Members of the object that starts at d[i] (already
// validated, like all of d), and returns the index just past it: a caller
// walking an array of objects reads each one once, without first finding
// where it ends.
func MembersAt(d []byte, i int, fn func(key, val []byte) error) (end int, err error) {
	i = SkipSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1, nil
	}
	for i < len(d) {
		kEnd := skipValidString(d, i)
		vStart := SkipSpace(d, SkipSpace(d, kEnd)+1) // past ':'
		if vStart >= len(d) {
			return 0, errSyntax
		}
		vEnd := skipValid(d, vStart)
		if err := fn(d[i:kEnd], d[vStart:vEnd]); err != nil {
			return 0, err
		}
		i = SkipSpace(d, vEnd)
		if i >= len(d) {
			return 0, errSyntax
		}
		if d[i] == '}' {
			return i + 1, nil
		}
		i = SkipSpace(d, i+1) // past ','
	}
	return 0, errSyntax
}

// Elements calls fn for each element of arr, a trimmed and already
// validated JSON array.
func Elements(arr []byte, fn func(i int, val []byte) error) error {
	i := SkipSpace(arr, 1)
	for n := 0; i < len(arr) && arr[i] != ']'; n++ {
		end := skipValid(arr, i)
		if err := fn(n, arr[i:end]); err != nil {
			return err
		}
		i = SkipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = SkipSpace(arr, i+1)
		}
	}
	return nil
}

// KeyIs reports whether the raw key token names name. Keys with escapes
// are rare; they are decoded before comparing.
func KeyIs(key []byte, name string) bool {
	if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
		return true
	}
	for _, c := range key {
		if c == '\\' {
			s, err := Unquote(key)
			return err == nil && s == name
		}
	}
	return false
}

// KeyName returns the key as a Go string.
func KeyName(key []byte) string {
	s, err := Unquote(key)
	if err != nil {
		return string(key)
	}
	return s
}
