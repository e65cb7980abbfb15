package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// This file edits JSON objects in place: it finds the byte span of one
// member and replaces or removes it, leaving every other byte as the client
// sent it (DESIGN.md rule 1). Decoding into map[string]any and encoding
// again would reorder keys, reformat numbers and cost ~1 ms per 100 KB.

// member is one "key": value pair of a JSON object, as byte offsets into
// the object's text. start is the offset of the key's opening quote, end is
// one past the value's last byte.
type member struct {
	key        string
	start      int
	valueStart int
	end        int
}

var errNotObject = errors.New("json: not an object")

// members lists the top-level members of the JSON object in obj. obj must
// be valid JSON (callers have already decoded it once).
func members(obj []byte) ([]member, error) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, errNotObject
	}
	i++
	var out []member
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) {
			return nil, errors.New("json: unterminated object")
		}
		if obj[i] == '}' {
			return out, nil
		}
		if obj[i] == ',' {
			i++
			continue
		}
		if obj[i] != '"' {
			return nil, fmt.Errorf("json: unexpected %q at offset %d", obj[i], i)
		}
		start := i
		keyEnd, err := skipString(obj, i)
		if err != nil {
			return nil, err
		}
		var key string
		if err := json.Unmarshal(obj[start:keyEnd], &key); err != nil {
			return nil, err
		}
		i = skipSpace(obj, keyEnd)
		if i >= len(obj) || obj[i] != ':' {
			return nil, errors.New("json: missing colon")
		}
		i = skipSpace(obj, i+1)
		valueStart := i
		end, err := skipValue(obj, i)
		if err != nil {
			return nil, err
		}
		out = append(out, member{key: key, start: start, valueStart: valueStart, end: end})
		i = end
	}
}

// findMember returns the last member named key (encoding/json also takes
// the last of duplicate keys) and whether it exists.
func findMember(ms []member, key string) (member, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].key == key {
			return ms[i], true
		}
	}
	return member{}, false
}

// replaceValue returns obj with the value of m replaced by value.
func replaceValue(obj []byte, m member, value []byte) []byte {
	out := make([]byte, 0, len(obj)-(m.end-m.valueStart)+len(value))
	out = append(out, obj[:m.valueStart]...)
	out = append(out, value...)
	return append(out, obj[m.end:]...)
}

// setMember sets key to value in the object obj: the value is replaced in
// place when the key exists, else the member is appended before the
// closing brace.
func setMember(obj []byte, key string, value []byte) ([]byte, error) {
	ms, err := members(obj)
	if err != nil {
		return nil, err
	}
	if m, ok := findMember(ms, key); ok {
		return replaceValue(obj, m, value), nil
	}
	k, _ := json.Marshal(key)
	closing := bytes.LastIndexByte(obj, '}')
	out := make([]byte, 0, len(obj)+len(k)+len(value)+2)
	out = append(out, obj[:closing]...)
	if len(ms) > 0 {
		out = append(out, ',')
	}
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, value...)
	return append(out, obj[closing:]...), nil
}

// removeMembers returns obj without the members whose keys are in drop,
// along with the comma that separated each from its neighbour.
func removeMembers(obj []byte, drop func(key string) bool) ([]byte, error) {
	ms, err := members(obj)
	if err != nil {
		return nil, err
	}
	out := obj
	// Remove from the last member backwards so earlier offsets stay valid.
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if !drop(m.key) {
			continue
		}
		from, to := m.start, m.end
		if j := skipSpace(out, to); j < len(out) && out[j] == ',' {
			to = skipSpace(out, j+1) // take the comma after, and the space after it
		} else {
			k := from - 1
			for k >= 0 && isSpace(out[k]) {
				k--
			}
			if k >= 0 && out[k] == ',' {
				from = k // last member: take the comma before it
			}
		}
		if &out[0] == &obj[0] {
			out = append([]byte(nil), obj...)
		}
		out = append(out[:from], out[to:]...)
	}
	return out, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the offset just past the JSON string starting at i.
// It jumps from quote to quote with bytes.IndexByte, which is vectorized:
// chat bodies are mostly long strings.
func skipString(b []byte, i int) (int, error) {
	i++ // opening quote
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return 0, errors.New("json: unterminated string")
		}
		i += j
		// The quote is escaped if an odd number of backslashes precede it.
		k := i - 1
		for k >= 0 && b[k] == '\\' {
			k--
		}
		if (i-1-k)%2 == 0 {
			return i + 1, nil
		}
		i++
	}
}

// skipValue returns the offset just past the JSON value starting at i.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("json: missing value")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				j, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = j
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errors.New("json: unterminated value")
	default:
		j := i
		for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		if j == i {
			return 0, fmt.Errorf("json: unexpected %q at offset %d", b[i], i)
		}
		return j, nil
	}
}

// elements returns the [start, end) offsets of each element of the JSON
// array in arr.
func elements(arr []byte) ([][2]int, error) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return nil, errors.New("json: not an array")
	}
	i++
	var out [][2]int
	for {
		i = skipSpace(arr, i)
		if i >= len(arr) {
			return nil, errors.New("json: unterminated array")
		}
		switch arr[i] {
		case ']':
			return out, nil
		case ',':
			i++
			continue
		}
		end, err := skipValue(arr, i)
		if err != nil {
			return nil, err
		}
		out = append(out, [2]int{i, end})
		i = end
	}
}

// depthExceeds reports whether the JSON text nests objects and arrays more
// than limit levels deep. It runs before decoding, so a hostile body cannot
// make the decoder recurse (DESIGN.md rule 3).
func depthExceeds(b []byte, limit int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			j, err := skipString(b, i)
			if err != nil {
				return false // malformed: the decoder reports it
			}
			i = j - 1
		case '{', '[':
			depth++
			if depth > limit {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// appendInt is strconv.AppendInt for the common case.
func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }
