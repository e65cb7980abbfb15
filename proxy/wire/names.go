package wire

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// What ctxproxy counts must be what the backend runs, so ctxproxy reads a
// request's member names by the backend's rules. Ollama decodes every
// route with Go's encoding/json: a name matches a field without regard to
// case ("Messages" is messages), and of two members naming one field the
// later is decoded over the earlier, which for most fields means the last
// wins. A body that spells a field ctxproxy reads in another case, or
// names it twice, is resolved here as encoding/json resolves it into the
// backend's Go type, and forwarded resolved (the backend reads it the
// same way). Toward a backend whose rules are unknown such a body is
// refused with a 400: it is the one place ctxproxy refuses what it would
// otherwise pass through.

// KeyRules says how the backend reads member names.
type KeyRules uint8

const (
	// ExactKeys: the backend's rules are unknown. A body that names a
	// field ctxproxy reads twice, or not in its documented spelling, is
	// ambiguous and refused.
	ExactKeys KeyRules = iota
	// JSONKeys: Go's encoding/json, as Ollama (v0.17.4, every route
	// through gin's ShouldBindJSON) reads requests.
	JSONKeys
)

// decodeKind is how encoding/json decodes a member into the Go field the
// backend declares for it, which decides what repeated members leave.
type decodeKind uint8

const (
	// scalar: a string, number or bool. null leaves the field as it
	// was; a value replaces it.
	scalar decodeKind = iota
	// replaced: a pointer to a scalar, a slice, an interface, raw JSON,
	// a type that decodes itself whole. null empties the field; a value
	// replaces it.
	replaced
	// merged: a map, or a pointer to a struct. null empties the field;
	// an object's members are decoded over what is there (the later of
	// two members of one name wins).
	merged
	// mergedStruct: a struct. null leaves it; an object's members are
	// decoded over what is there.
	mergedStruct
)

// field is a member ctxproxy reads, with the kind of the backend's field.
type field struct {
	name string
	kind decodeKind
}

// The fields ctxproxy reads of each request shape, with the kinds of
// Ollama's own types for them (api.ChatRequest and api.Message,
// openai.ChatCompletionRequest and openai.Message, openai.ResponsesRequest,
// anthropic.MessagesRequest and anthropic.MessageParam, v0.17.4).
var (
	ollamaFields = []field{{"model", scalar}, {"messages", replaced}, {"stream", replaced}, {"tools", replaced},
		{"options", merged}, {"think", replaced}, {"truncate", replaced}}
	ollamaMessageFields = []field{{"role", scalar}, {"content", scalar}, {"thinking", scalar}, {"images", replaced},
		{"tool_calls", replaced}, {"tool_name", scalar}, {"tool_call_id", scalar}}
	openAIFields = []field{{"model", scalar}, {"messages", replaced}, {"stream", scalar}, {"tools", replaced},
		{"max_tokens", replaced}, {"max_completion_tokens", replaced}, {"reasoning_effort", replaced}, {"options", merged}}
	openAIMessageFields = []field{{"role", scalar}, {"content", replaced}, {"tool_calls", replaced}, {"name", scalar},
		{"tool_call_id", scalar}}
	responsesFields = []field{{"model", scalar}, {"input", replaced}, {"instructions", scalar}, {"stream", replaced},
		{"max_output_tokens", replaced}, {"tools", replaced}, {"previous_response_id", scalar}, {"reasoning", mergedStruct},
		{"options", merged}, {"think", replaced}}
	responsesItemFields = []field{{"type", scalar}, {"role", scalar}, {"content", replaced}, {"call_id", scalar},
		{"name", scalar}, {"arguments", scalar}, {"output", replaced}}
	messagesFields = []field{{"model", scalar}, {"messages", replaced}, {"system", replaced}, {"max_tokens", scalar},
		{"stream", scalar}, {"tools", replaced}, {"thinking", merged}, {"options", merged}}
	messagesMessageFields = []field{{"role", scalar}, {"content", replaced}}
)

// requestFields are the top-level fields of dialect d's requests.
func requestFields(d Dialect) []field {
	switch d {
	case OpenAI:
		return openAIFields
	case Responses:
		return responsesFields
	case Messages:
		return messagesFields
	}
	return ollamaFields
}

// messageFields are the fields of one of dialect d's messages.
func messageFields(d Dialect) []field {
	switch d {
	case OpenAI:
		return openAIMessageFields
	case Responses:
		return responsesItemFields
	case Messages:
		return messagesMessageFields
	}
	return ollamaMessageFields
}

// AmbiguousError is a body that names a field twice, or in another
// spelling, toward a backend whose rules are unknown.
type AmbiguousError struct {
	name     string
	spelling []string
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("the request names %q as %s: ctxproxy cannot tell which the backend reads; "+
		"send it once, spelled %q", e.name, strings.Join(e.spelling, " and "), e.name)
}

// resolveNames returns obj, a JSON object with members ms, with every
// field of fs that it names twice or in another spelling resolved as
// encoding/json decodes it into the backend's type, or nil when each is
// named at most once and exactly (the common case, checked without
// allocating). Under ExactKeys such an object is an *AmbiguousError.
func resolveNames(obj []byte, ms []Member, fs []field, rules KeyRules) ([]byte, error) {
	var seen uint64 // fs's exact names met once
	clean := true
	for _, m := range ms {
		i := exactField(fs, m.Key)
		if i >= 0 && seen&(1<<i) == 0 {
			seen |= 1 << i
			continue
		}
		if i >= 0 || foldedField(fs, m.Key) >= 0 {
			clean = false
			break
		}
	}
	if clean {
		return nil, nil
	}
	orig := obj // ms are its members; obj is rewritten field by field
	for _, f := range fs {
		var spelling []string
		var values [][]byte
		for _, m := range ms {
			if sameName(m.Key, f.name) {
				spelling = append(spelling, fmt.Sprintf("%q", m.Key))
				values = append(values, orig[m.ValueStart:m.End])
			}
		}
		if len(values) == 0 || len(values) == 1 && spelling[0] == fmt.Sprintf("%q", f.name) {
			continue
		}
		if rules == ExactKeys {
			return nil, &AmbiguousError{name: f.name, spelling: spelling}
		}
		v, err := resolveValue(f.kind, values)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNotChat, f.name, err)
		}
		if obj, err = RemoveMembers(obj, func(k string) bool { return sameName(k, f.name) }); err != nil {
			return nil, err
		}
		if v != nil {
			if obj, err = SetMember(obj, f.name, v); err != nil {
				return nil, err
			}
		}
	}
	return obj, nil
}

// exactField is the index in fs of the field named key exactly, or -1.
func exactField(fs []field, key string) int {
	for i := range fs {
		if fs[i].name == key {
			return i
		}
	}
	return -1
}

// foldedField is the index in fs of the field key names in another
// spelling, or -1.
func foldedField(fs []field, key string) int {
	for i := range fs {
		if sameName(key, fs[i].name) {
			return i
		}
	}
	return -1
}

// resolveValue is what values, the members naming one field in order,
// leave in a field of kind k; nil when they leave it unset.
func resolveValue(k decodeKind, values [][]byte) ([]byte, error) {
	var cur []byte
	for _, v := range values {
		null := jsonscan.KindOf(v) == jsonscan.KindNull
		switch {
		case k == scalar && null, k == mergedStruct && null:
			// leaves the field as it was
		case k == scalar, k == replaced:
			cur = v
		case null:
			cur = v
		case jsonscan.KindOf(v) != jsonscan.KindObject:
			return nil, fmt.Errorf("%s is not an object", jsonscan.KindOf(v))
		case cur == nil || jsonscan.KindOf(cur) == jsonscan.KindNull:
			cur = v
		default:
			var err error
			if cur, err = mergeObjects(cur, v); err != nil {
				return nil, err
			}
		}
	}
	return cur, nil
}

// mergeObjects is a decoded over b: b's members over a's, a member of b
// replacing a's member of the same name (map keys, as encoding/json
// compares them: exactly).
func mergeObjects(a, b []byte) ([]byte, error) {
	bs, err := Members(b)
	if err != nil {
		return nil, err
	}
	out, err := RemoveMembers(a, func(k string) bool {
		for _, m := range bs {
			if m.Key == k {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	for _, m := range bs {
		if out, err = SetMember(out, m.Key, b[m.ValueStart:m.End]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sameName reports whether a JSON name matches a field's name as
// encoding/json matches them: rune by rune, each compared as the upper
// case of its lower case (so "Messages", "MESSAGES" and "meſſages" all
// name messages).
func sameName(key, name string) bool {
	if len(key) == len(name) && key == name {
		return true
	}
	for key != "" && name != "" {
		a, n := utf8.DecodeRuneInString(key)
		key = key[n:]
		b, m := utf8.DecodeRuneInString(name)
		name = name[m:]
		if a != b && fold(a) != fold(b) {
			return false
		}
	}
	return key == "" && name == ""
}

func fold(r rune) rune {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' {
			r -= 'a' - 'A'
		}
		return r
	}
	return unicode.ToUpper(unicode.ToLower(r))
}
