package wire

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// This file edits JSON objects in place: it finds the byte span of one
// member and replaces or removes it, leaving every other byte as the client
// sent it (docs/how-it-works.md). Decoding into map[string]any and encoding
// again would reorder keys, reformat numbers and cost ~1 ms per 100 KB.

// Member is one "key": value pair of a JSON object, as byte offsets into
// the object's text. start is the offset of the key's opening quote, end is
// one past the value's last byte.
type Member struct {
	Key        string
	Start      int
	ValueStart int
	End        int
}

var errNotObject = errors.New("json: not an object")

// offset is where part, a sub-slice of whole, starts in it.
func offset(whole, part []byte) int { return cap(whole) - cap(part) }

// Members lists the top-level Members of the JSON object in obj, which
// must be valid JSON (callers have validated it with jsonscan.Valid).
func Members(obj []byte) ([]Member, error) {
	// A chat message has two to four members: one allocation for them.
	ms, _, err := appendMembersAt(make([]Member, 0, 4), obj, jsonscan.SkipSpace(obj, 0))
	return ms, err
}

// appendMembersAt appends the members of the object at d[i] (valid JSON),
// with offsets into d, and returns the index just past the object; dst is
// a caller's own buffer (messageDecoder.decodeAt's, on its stack).
func appendMembersAt(dst []Member, d []byte, i int) ([]Member, int, error) {
	if i >= len(d) || d[i] != '{' {
		return nil, 0, errNotObject
	}
	out := dst
	end, err := jsonscan.MembersAt(d, i, func(key, val []byte) error {
		out = append(out, memberOf(d, key, val))
		return nil
	})
	return out, end, err
}

// memberOf is the member of d whose key token and value are key and val
// (subslices of d).
func memberOf(d, key, val []byte) Member {
	vs := offset(d, val)
	return Member{Key: keyName(key), Start: offset(d, key), ValueStart: vs, End: vs + len(val)}
}

// keyName is the name of a member's key token. The keys of chat requests
// and messages are constants, so that decoding a message allocates no
// string for its keys; others are decoded.
func keyName(key []byte) string {
	if len(key) < 2 {
		return jsonscan.KeyName(key)
	}
	switch string(key[1 : len(key)-1]) {
	case "role":
		return "role"
	case "content":
		return "content"
	case "name":
		return "name"
	case "tool_calls":
		return "tool_calls"
	case "tool_call_id":
		return "tool_call_id"
	case "images":
		return "images"
	case "thinking":
		return "thinking"
	case "model":
		return "model"
	case "messages":
		return "messages"
	case "stream":
		return "stream"
	case "options":
		return "options"
	case "tools":
		return "tools"
	}
	return jsonscan.KeyName(key)
}

// FindMember returns the last member named key (encoding/json also takes
// the last of duplicate keys) and whether it exists.
func FindMember(ms []Member, key string) (Member, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Key == key {
			return ms[i], true
		}
	}
	return Member{}, false
}

// ReplaceValue returns obj with the value of m replaced by value.
func ReplaceValue(obj []byte, m Member, value []byte) []byte {
	out := make([]byte, 0, len(obj)-(m.End-m.ValueStart)+len(value))
	out = append(out, obj[:m.ValueStart]...)
	out = append(out, value...)
	return append(out, obj[m.End:]...)
}

// SetMember sets key to value in the object obj: the value is replaced in
// place when the key exists, else the member is appended before the
// closing brace.
func SetMember(obj []byte, key string, value []byte) ([]byte, error) {
	ms, err := Members(obj)
	if err != nil {
		return nil, err
	}
	if m, ok := FindMember(ms, key); ok {
		return ReplaceValue(obj, m, value), nil
	}
	k := jsonscan.AppendString(nil, key)
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

// RemoveMembers returns obj without the members whose keys are in drop,
// along with the comma that separated each from its neighbour.
func RemoveMembers(obj []byte, drop func(key string) bool) ([]byte, error) {
	ms, err := Members(obj)
	if err != nil {
		return nil, err
	}
	out := obj
	// Remove from the last member backwards so earlier offsets stay valid.
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if !drop(m.Key) {
			continue
		}
		from, to := m.Start, m.End
		if j := jsonscan.SkipSpace(out, to); j < len(out) && out[j] == ',' {
			to = jsonscan.SkipSpace(out, j+1) // take the comma after, and the space after it
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

// elements returns the [start, end) offsets of each element of the JSON
// array in arr, which must be valid.
func elements(arr []byte) ([][2]int, error) {
	i := jsonscan.SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return nil, errors.New("json: not an array")
	}
	var out [][2]int
	err := jsonscan.Elements(arr[i:], func(_ int, val []byte) error {
		s := offset(arr, val)
		out = append(out, [2]int{s, s + len(val)})
		return nil
	})
	return out, err
}

// appendInt is strconv.AppendInt for the common case.
func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }

// edit sets one top-level member of an object: splice replaces the value
// of the last member named key, or appends the member when there is none.
type edit struct {
	key   string
	value []byte
}

// splice returns obj with every edit applied, without copying obj and
// without scanning it again: the parts are obj's own bytes between the
// edits and the edited values. ms are obj's members (members(obj)). Edits
// name distinct keys; appended members keep the order of edits.
func splice(obj []byte, ms []Member, edits []edit) Payload {
	var at [4]Member // the member each edit replaces; start -1: appended
	found := at[:0]
	for _, e := range edits {
		m, ok := FindMember(ms, e.key)
		if !ok {
			m = Member{Key: e.key, Start: -1}
		}
		found = append(found, m)
	}
	out := make(Payload, 0, 2*len(edits)+2)
	from := 0
	// Replacements in the order of their offsets.
	for {
		next := -1
		for i, m := range found {
			if m.Start >= 0 && m.ValueStart >= from && (next < 0 || m.ValueStart < found[next].ValueStart) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		m := found[next]
		out = append(out, obj[from:m.ValueStart], edits[next].value)
		from = m.End
	}
	closing := bytes.LastIndexByte(obj, '}')
	out = append(out, obj[from:closing])
	var added []byte
	n := len(ms)
	for i, m := range found {
		if m.Start >= 0 {
			continue
		}
		if n > 0 {
			added = append(added, ',')
		}
		n++
		added = jsonscan.AppendString(added, edits[i].key)
		added = append(added, ':')
		added = append(added, edits[i].value...)
	}
	if added != nil {
		out = append(out, added)
	}
	return append(out, obj[closing:])
}
