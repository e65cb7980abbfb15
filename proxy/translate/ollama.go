package translate

import (
	"bytes"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// The Responses and Messages translations do not map one client message to
// one Ollama message the way chat completions do: a Responses function call
// is an item of its own that joins the assistant message before it, and an
// Anthropic user message that carries tool results becomes Ollama tool
// messages. Both build a list of ollamaMessage values first and write them
// with appendOllamaMessages; every text stays the JSON string token the
// client sent.

// ollamaMessage is one Ollama /api/chat message under construction.
type ollamaMessage struct {
	role string
	// texts are JSON string tokens, joined with "\n" into content (as the
	// proxy joins text parts when it counts them).
	texts [][]byte
	// images are base64 data, without quotes.
	images [][]byte
	// thinking is a JSON string token, or nil.
	thinking []byte
	calls    []ollamaCall
	// toolName and toolCallID are JSON string tokens on a tool message.
	toolName, toolCallID []byte
}

// ollamaCall is one tool call: id and name are JSON string tokens, args a
// JSON object.
type ollamaCall struct{ id, name, args []byte }

// appendOllamaMessages writes msgs as an Ollama messages array.
func appendOllamaMessages(dst []byte, msgs []ollamaMessage) []byte {
	dst = append(dst, '[')
	for i := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = msgs[i].append(dst)
	}
	return append(dst, ']')
}

func (m *ollamaMessage) append(dst []byte) []byte {
	dst = append(dst, `{"role":`...)
	dst = jsonscan.AppendString(dst, m.role)
	dst = append(dst, `,"content":`...)
	dst = appendJoined(dst, m.texts)
	if hasText(m.thinking) {
		dst = append(dst, `,"thinking":`...)
		dst = append(dst, m.thinking...)
	}
	if len(m.images) > 0 {
		dst = append(dst, `,"images":[`...)
		for j, img := range m.images {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendBase64(dst, img)
		}
		dst = append(dst, ']')
	}
	if len(m.calls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for j, c := range m.calls {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '{')
			if hasText(c.id) {
				dst = append(dst, `"id":`...)
				dst = append(dst, c.id...)
				dst = append(dst, ',')
			}
			dst = append(dst, `"function":{"index":`...)
			dst = strconv.AppendInt(dst, int64(j), 10)
			dst = append(dst, `,"name":`...)
			dst = append(dst, c.name...)
			dst = append(dst, `,"arguments":`...)
			dst = append(dst, c.args...)
			dst = append(dst, "}}"...)
		}
		dst = append(dst, ']')
	}
	if hasText(m.toolName) {
		dst = append(dst, `,"tool_name":`...)
		dst = append(dst, m.toolName...)
	}
	if hasText(m.toolCallID) {
		dst = append(dst, `,"tool_call_id":`...)
		dst = append(dst, m.toolCallID...)
	}
	return append(dst, '}')
}

// appendJoined writes string tokens as one JSON string joined with "\n",
// splicing the tokens' insides: the inside of a valid string token joined
// with `\n` is again a valid token.
func appendJoined(dst []byte, texts [][]byte) []byte {
	switch len(texts) {
	case 0:
		return append(dst, `""`...)
	case 1:
		return append(dst, texts[0]...)
	}
	dst = append(dst, '"')
	for j, t := range texts {
		if j > 0 {
			dst = append(dst, `\n`...)
		}
		dst = append(dst, t[1:len(t)-1]...)
	}
	return append(dst, '"')
}

// lastCallName returns the name token of the latest call with id among
// msgs, so a tool result gets the tool_name Ollama's templates print.
func lastCallName(msgs []ollamaMessage, id []byte) []byte {
	// Newest first, without copying the calls: it runs for every tool
	// result of a conversation. The match is nameFor's: the id as sent,
	// else the same id spelled with other escapes.
	match := func(got []byte) bool { return bytes.Equal(got, id) }
	for pass := 0; pass < 2; pass++ {
		for i := len(msgs) - 1; i >= 0; i-- {
			for k := len(msgs[i].calls) - 1; k >= 0; k-- {
				if c := msgs[i].calls[k]; match(c.id) {
					return c.name
				}
			}
		}
		if pass == 1 || bytes.IndexByte(id, '\\') < 0 {
			return nil
		}
		want, _ := jsonscan.Unquote(id)
		match = func(got []byte) bool { s, _ := jsonscan.Unquote(got); return s == want }
	}
	return nil
}

// fields reads an object's members into a map from key to value, leaving
// out nulls, which every dialect treats as absent. Objects here are small
// (a content part, a tool, an item), so the map costs little and keeps
// the readers short.
func fields(obj []byte) map[string][]byte {
	out := make(map[string][]byte, 8)
	_ = jsonscan.Members(obj, func(key, val []byte) error {
		if jsonscan.KindOf(val) != jsonscan.KindNull {
			out[string(keyBytes(key))] = val
		}
		return nil
	})
	return out
}

// str returns the Go string of a string token, "" for anything else.
func str(tok []byte) string {
	if jsonscan.KindOf(tok) != jsonscan.KindString {
		return ""
	}
	s, _ := jsonscan.Unquote(tok)
	return s
}

// appendToolFunction writes {"type":"function","function":{…}} from a
// function's name, description and JSON schema tokens, the one tool shape
// Ollama reads. A missing schema becomes an empty object schema, which
// Ollama's templates render as a function without parameters.
func appendToolFunction(dst, name, description, schema []byte) []byte {
	dst = append(dst, `{"type":"function","function":{"name":`...)
	dst = append(dst, name...)
	if jsonscan.KindOf(description) == jsonscan.KindString {
		dst = append(dst, `,"description":`...)
		dst = append(dst, description...)
	}
	dst = append(dst, `,"parameters":`...)
	if jsonscan.KindOf(schema) == jsonscan.KindObject {
		dst = append(dst, schema...)
	} else {
		dst = append(dst, `{"type":"object","properties":{}}`...)
	}
	return append(dst, "}}"...)
}

// appendStreamFlag writes ,"stream":<bool>: Ollama streams by default,
// both client dialects do not, so the flag is always written.
func appendStreamFlag(dst []byte, stream bool) []byte {
	dst = append(dst, `,"stream":`...)
	return strconv.AppendBool(dst, stream)
}

// checkStream reads a stream token.
func checkStream(tok []byte, info *Info) error {
	if tok == nil {
		return nil
	}
	if jsonscan.KindOf(tok) != jsonscan.KindBool {
		return invalid("stream", codeInvalidType, "stream must be a boolean")
	}
	info.Stream = tok[0] == 't'
	return nil
}

// checkModel reads the model token.
func checkModel(tok []byte, info *Info) error {
	if tok == nil {
		return invalid("model", codeMissing, "model is required")
	}
	if jsonscan.KindOf(tok) != jsonscan.KindString || jsonscan.IsEmptyString(tok) {
		return invalid("model", codeInvalidType, "model must be a non-empty string")
	}
	info.Model, _ = jsonscan.Unquote(tok)
	return nil
}
