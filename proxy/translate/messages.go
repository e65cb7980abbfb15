package translate

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// inputAudioVersion is the first Ollama version whose /v1 carries an
// input_audio part (0.18.0 refuses it, 0.20.0 carries it).
const inputAudioVersion = "0.19.0"

// message holds the raw values of one OpenAI message's fields.
type message struct {
	role, content, name, toolCalls, toolCallID, thinking []byte
	thinkingKey                                          string
}

// appendMessages translates the messages array. One OpenAI message becomes
// one Ollama message: a parts array is joined into one content with its
// images attached, where Ollama's own /v1 layer splits every part into a
// message of its own; keeping one message per turn keeps the chat template's
// turns and ctxproxy's tool-call units as the client sent them.
func appendMessages(dst, raw []byte, version string, info *Info) ([]byte, error) {
	if raw == nil {
		return nil, invalid("messages", codeMissing, "messages is required")
	}
	if jsonscan.KindOf(raw) != jsonscan.KindArray {
		return nil, invalid("messages", codeInvalidType, "messages must be an array")
	}
	// calls are the tool calls seen so far, so that a tool result without
	// a name gets its tool_name from the call it answers, as Ollama's /v1
	// layer does.
	var calls []call
	count := 0
	dst = append(dst, '[')
	err := jsonscan.Elements(raw, func(i int, m []byte) error {
		if i > 0 {
			dst = append(dst, ',')
		}
		count++
		var err error
		dst, err = appendMessage(dst, i, m, &calls, version, info)
		return err
	})
	if err != nil {
		return nil, err
	}
	if count == 0 {
		return nil, invalid("messages", codeInvalidValue, "messages must not be empty")
	}
	return append(dst, ']'), nil
}

func appendMessage(dst []byte, i int, raw []byte, calls *[]call, version string, info *Info) ([]byte, error) {
	if jsonscan.KindOf(raw) != jsonscan.KindObject {
		return nil, invalid(messagePath(i, ""), codeInvalidType, "a message must be an object")
	}
	var m message
	var bad error
	_ = jsonscan.Members(raw, func(key, val []byte) error {
		if jsonscan.KindOf(val) == jsonscan.KindNull {
			return nil
		}
		k := keyBytes(key)
		switch string(k) {
		case "role":
			m.role = val
		case "content":
			m.content = val
		case "name":
			m.name = val
		case "tool_calls":
			m.toolCalls = val
		case "tool_call_id":
			m.toolCallID = val
		case "reasoning_content", "reasoning", "thinking":
			// reasoning_content (DeepSeek, vLLM), reasoning (Ollama's /v1,
			// OpenRouter) and thinking (Ollama) all carry the same text;
			// the first one present wins. Ollama's /v1 reads only
			// reasoning, and refuses one that is not a string; another
			// name that is not a string is left out.
			switch {
			case jsonscan.KindOf(val) == jsonscan.KindString:
				if m.thinking == nil {
					m.thinking, m.thinkingKey = val, string(k)
				}
			case string(k) == "reasoning":
				bad = invalid(messagePath(i, ".reasoning"), codeInvalidType, "reasoning must be a string")
				return bad
			default:
				info.Dropped = append(info.Dropped, Drop{Field: messagePath(i, "."+string(k)), Reason: "not a string"})
			}
		case "function_call":
			// The legacy function API: Ollama's /v1 ignores it too.
			info.Dropped = append(info.Dropped, Drop{Field: messagePath(i, ".function_call"), Reason: "the legacy function_call; Ollama reads tool_calls"})
		case "_preserve", "_importance":
			// ctxproxy's own annotations; the proxy normally strips them first.
		default:
			info.Dropped = append(info.Dropped, Drop{Field: messagePath(i, "."+string(k)), Reason: "no Ollama message field"})
		}
		return nil
	})
	if bad != nil {
		return nil, bad
	}

	role, err := messageRole(i, m.role)
	if err != nil {
		return nil, err
	}
	dst = append(dst, `{"role":`...)
	dst = jsonscan.AppendString(dst, role)

	var images [][]byte
	dst = append(dst, `,"content":`...)
	switch jsonscan.KindOf(m.content) {
	case jsonscan.KindString:
		dst = append(dst, m.content...)
	case jsonscan.KindArray:
		if dst, images, err = appendParts(dst, i, m.content, version); err != nil {
			return nil, err
		}
	case jsonscan.KindInvalid: // absent or null
		// OpenAI lets an assistant message carry only tool calls (or a
		// refusal); Ollama's /v1 lets any message with tool calls go
		// without content; every other message needs it.
		if role != "assistant" && m.toolCalls == nil {
			return nil, invalid(messagePath(i, ".content"), codeMissing, "content is required")
		}
		dst = append(dst, `""`...)
	default:
		return nil, invalid(messagePath(i, ".content"), codeInvalidType, "content must be a string or an array of content parts")
	}

	if m.thinking != nil {
		if role == "assistant" {
			if !jsonscan.IsEmptyString(m.thinking) {
				dst = append(dst, `,"thinking":`...)
				dst = append(dst, m.thinking...)
			}
		} else {
			info.Dropped = append(info.Dropped, Drop{Field: messagePath(i, "."+m.thinkingKey), Reason: "only assistant messages carry reasoning"})
		}
	}

	if len(images) > 0 {
		dst = append(dst, `,"images":[`...)
		for j, img := range images {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendBase64(dst, img)
		}
		dst = append(dst, ']')
	}

	if m.toolCalls != nil {
		// Any role's tool calls are carried, as Ollama's /v1 carries them.
		if dst, err = appendToolCalls(dst, i, m.toolCalls, calls); err != nil {
			return nil, err
		}
	}

	if m.name != nil && jsonscan.KindOf(m.name) != jsonscan.KindString {
		return nil, invalid(messagePath(i, ".name"), codeInvalidType, "name must be a string")
	}
	if m.toolCallID != nil && jsonscan.KindOf(m.toolCallID) != jsonscan.KindString {
		return nil, invalid(messagePath(i, ".tool_call_id"), codeInvalidType, "tool_call_id must be a string")
	}
	if role == "tool" {
		name := m.name
		if name == nil && m.toolCallID != nil {
			name = nameFor(*calls, m.toolCallID)
		}
		if name != nil && !jsonscan.IsEmptyString(name) {
			dst = append(dst, `,"tool_name":`...)
			dst = append(dst, name...)
		}
		if m.toolCallID != nil {
			dst = append(dst, `,"tool_call_id":`...)
			dst = append(dst, m.toolCallID...)
		}
	} else {
		if m.name != nil {
			info.Dropped = append(info.Dropped, Drop{Field: messagePath(i, ".name"), Reason: "Ollama messages have no participant name"})
		}
		if m.toolCallID != nil {
			info.Dropped = append(info.Dropped, Drop{Field: messagePath(i, ".tool_call_id"), Reason: "only tool messages answer a call"})
		}
	}
	return append(dst, '}'), nil
}

// messageRole checks the role. "developer" (OpenAI's newer name for the
// system role) becomes "system", since Ollama's chat templates know only
// system, user, assistant and tool; any other role (the legacy "function",
// or none) is handed to the template as it is, as Ollama's /v1 does.
// Ollama lowercases roles too.
func messageRole(i int, raw []byte) (string, error) {
	if raw == nil {
		return "", nil
	}
	if jsonscan.KindOf(raw) != jsonscan.KindString {
		return "", invalid(messagePath(i, ".role"), codeInvalidType, "role must be a string")
	}
	r := strings.ToLower(str(raw))
	if r == "developer" {
		return "system", nil
	}
	return r, nil
}

// appendParts writes the text of a parts array as one string (parts joined
// with "\n", as ctxproxy counts them) and returns the images' base64 data.
// Text tokens are spliced without decoding: the inside of a valid JSON
// string token joined with `\n` is again a valid token.
func appendParts(dst []byte, i int, parts []byte, version string) ([]byte, [][]byte, error) {
	var texts [][]byte
	var images [][]byte
	err := jsonscan.Elements(parts, func(j int, p []byte) error {
		// at names a field of this part; built only for an error.
		at := func(suffix string) string { return messagePath(i, ".content["+strconv.Itoa(j)+"]"+suffix) }
		if jsonscan.KindOf(p) != jsonscan.KindObject {
			return invalid(at(""), codeInvalidType, "a content part must be an object")
		}
		var typ, text, refusal, imageURL, audio []byte
		_ = jsonscan.Members(p, func(key, val []byte) error {
			switch {
			case jsonscan.KeyIs(key, "type"):
				typ = val
			case jsonscan.KeyIs(key, "text"):
				text = val
			case jsonscan.KeyIs(key, "refusal"):
				refusal = val
			case jsonscan.KeyIs(key, "image_url"):
				imageURL = val
			case jsonscan.KeyIs(key, "input_audio"):
				audio = val
			}
			return nil
		})
		switch string(typ) {
		case `"text"`:
			if jsonscan.KindOf(text) != jsonscan.KindString {
				return invalid(at(".text"), codeInvalidType, "text must be a string")
			}
			texts = append(texts, text)
		case `"refusal"`:
			// An assistant's refusal, replayed in history: it is what the
			// assistant said.
			if jsonscan.KindOf(refusal) != jsonscan.KindString {
				return invalid(at(".refusal"), codeInvalidType, "refusal must be a string")
			}
			texts = append(texts, refusal)
		case `"image_url"`:
			img, err := imageData(imageURL)
			if err != nil {
				err.Param = at(".image_url" + err.Param)
				return err
			}
			images = append(images, img)
		case `"input_audio"`:
			if !atLeast(version, inputAudioVersion) {
				// Ollama's /v1 before it refuses the part too.
				return invalid(at(".type"), codeUnsupportedValue, "only text and image content parts are supported by this Ollama version")
			}
			// Audio data goes with the images, as Ollama's /v1 carries it.
			data := fields(audio)["data"]
			if jsonscan.KindOf(audio) != jsonscan.KindObject || jsonscan.KindOf(data) != jsonscan.KindString || !validBase64(inside(data)) {
				return invalid(at(".input_audio.data"), codeInvalidValue, "input_audio.data must be standard base64")
			}
			images = append(images, inside(data))
		case `"file"`:
			// Ollama's /v1 refuses it too ("invalid message format").
			return invalid(at(".type"), codeUnsupportedValue, "only text, image and audio content parts are supported")
		case "":
			return invalid(at(".type"), codeMissing, "a content part needs a type")
		default:
			return invalid(at(".type"), codeInvalidValue, "content part type must be text or image_url")
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	switch len(texts) {
	case 0:
		dst = append(dst, `""`...)
	case 1:
		dst = append(dst, texts[0]...)
	default:
		dst = append(dst, '"')
		for j, t := range texts {
			if j > 0 {
				dst = append(dst, `\n`...)
			}
			dst = append(dst, t[1:len(t)-1]...)
		}
		dst = append(dst, '"')
	}
	return dst, images, nil
}

// imageData returns the base64 data of an image_url part, which must be a
// data: URL: ctxproxy does not fetch remote images, and neither does
// Ollama's /v1 layer. The part is {"url": …, "detail": …} or, as Ollama
// also accepts, a bare string; detail has no Ollama equivalent. An error's
// Param is relative to the image_url field.
func imageData(v []byte) ([]byte, *Error) {
	url, param := v, ""
	if jsonscan.KindOf(v) == jsonscan.KindObject {
		url = nil
		_ = jsonscan.Members(v, func(key, val []byte) error {
			if jsonscan.KeyIs(key, "url") {
				url = val
			}
			return nil
		})
		param = ".url"
	}
	if jsonscan.KindOf(url) != jsonscan.KindString {
		return nil, invalid(param, codeInvalidType, "image_url must be an object with a url string")
	}
	s := url[1 : len(url)-1]
	if bytes.IndexByte(s, '\\') >= 0 {
		// Escapes (some encoders write "\/"): decode. Otherwise the
		// token's inside is the URL itself and is used without a copy.
		d, err := jsonscan.Unquote(url)
		if err != nil {
			return nil, invalid(param, codeInvalidValue, "image_url.url is not a valid string")
		}
		s = []byte(d)
	}
	if bytes.HasPrefix(s, []byte("http://")) || bytes.HasPrefix(s, []byte("https://")) {
		return nil, invalid(param, codeUnsupportedValue, "image URLs cannot be fetched; send the image as a base64 data: URL")
	}
	rest, ok := bytes.CutPrefix(s, []byte("data:"))
	if !ok {
		return nil, invalid(param, codeInvalidValue, "image_url.url must be a base64 data: URL")
	}
	meta, data, ok := bytes.Cut(rest, []byte(","))
	if !ok || !bytes.HasSuffix(meta, []byte(";base64")) {
		return nil, invalid(param, codeInvalidValue, "image_url.url must be a base64 data: URL")
	}
	if mime := meta[:len(meta)-len(";base64")]; len(mime) > 0 && !bytes.HasPrefix(mime, []byte("image/")) {
		return nil, invalid(param, codeInvalidValue, "image_url.url must hold an image/* type")
	}
	if !validBase64(data) {
		return nil, invalid(param, codeInvalidValue, "image_url.url holds invalid base64 data")
	}
	return data, nil
}

// validBase64 checks standard, padded base64 (line breaks allowed, as
// Ollama's decoder ignores them) without decoding it.
func validBase64(b []byte) bool {
	n, pad := 0, 0
	for _, c := range b {
		switch {
		case c == '\r' || c == '\n':
			continue
		case c == '=':
			pad++
			if pad > 2 {
				return false
			}
		case pad > 0: // data after padding
			return false
		case (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/':
		default:
			return false
		}
		n++
	}
	return n > 0 && n%4 == 0
}

// appendBase64 writes image data as a JSON string; base64 needs no escapes
// except for line breaks.
func appendBase64(dst, data []byte) []byte {
	if bytes.ContainsAny(data, "\r\n") {
		return jsonscan.AppendStringBytes(dst, data)
	}
	dst = append(dst, '"')
	dst = append(dst, data...)
	return append(dst, '"')
}

// call is a tool call seen in an assistant message: its id and function
// name as raw JSON string tokens.
type call struct{ id, name []byte }

// nameFor returns the name token of the latest call with the id token id,
// as Ollama's /v1 layer looks it up ("last one wins").
func nameFor(calls []call, id []byte) []byte {
	for k := len(calls) - 1; k >= 0; k-- {
		if bytes.Equal(calls[k].id, id) {
			return calls[k].name
		}
	}
	if bytes.IndexByte(id, '\\') < 0 {
		return nil
	}
	// The same id spelled with other escapes: compare decoded.
	want, _ := jsonscan.Unquote(id)
	for k := len(calls) - 1; k >= 0; k-- {
		if got, _ := jsonscan.Unquote(calls[k].id); got == want {
			return calls[k].name
		}
	}
	return nil
}

// appendToolCalls translates an assistant's tool calls: the arguments, a
// JSON string in OpenAI's shape, become the object Ollama expects; ids are
// kept (Ollama's api.ToolCall has an id). It adds each call to calls.
func appendToolCalls(dst []byte, i int, raw []byte, calls *[]call) ([]byte, error) {
	if jsonscan.KindOf(raw) != jsonscan.KindArray {
		return nil, invalid(messagePath(i, ".tool_calls"), codeInvalidType, "tool_calls must be an array")
	}
	start := len(dst)
	dst = append(dst, `,"tool_calls":[`...)
	n := 0
	err := jsonscan.Elements(raw, func(j int, tc []byte) error {
		// at names a field of this call; built only for an error.
		at := func(suffix string) string { return messagePath(i, ".tool_calls["+strconv.Itoa(j)+"]"+suffix) }
		if jsonscan.KindOf(tc) != jsonscan.KindObject {
			return invalid(at(""), codeInvalidType, "a tool call must be an object")
		}
		// type is not read: Ollama's /v1 carries a call of any type as
		// the function it names.
		var id, fn []byte
		_ = jsonscan.Members(tc, func(key, val []byte) error {
			switch {
			case jsonscan.KeyIs(key, "id"):
				id = val
			case jsonscan.KeyIs(key, "function"):
				fn = val
			}
			return nil
		})
		if jsonscan.KindOf(fn) != jsonscan.KindObject {
			return invalid(at(".function"), codeInvalidType, "function must be an object")
		}
		var name, args []byte
		_ = jsonscan.Members(fn, func(key, val []byte) error {
			switch {
			case jsonscan.KeyIs(key, "name"):
				name = val
			case jsonscan.KeyIs(key, "arguments"):
				args = val
			}
			return nil
		})
		switch jsonscan.KindOf(name) {
		case jsonscan.KindString:
		case jsonscan.KindInvalid, jsonscan.KindNull:
			name = []byte(`""`) // Ollama's /v1 forwards a call without a name
		default:
			return invalid(at(".function.name"), codeInvalidType, "function name must be a string")
		}
		switch jsonscan.KindOf(id) {
		case jsonscan.KindString:
			*calls = append(*calls, call{id, name})
		case jsonscan.KindInvalid, jsonscan.KindNull:
		default:
			return invalid(at(".id"), codeInvalidType, "id must be a string")
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, '{')
		if jsonscan.KindOf(id) == jsonscan.KindString {
			dst = append(dst, `"id":`...)
			dst = append(dst, id...)
			dst = append(dst, ',')
		}
		dst = append(dst, `"function":{"index":`...)
		dst = strconv.AppendInt(dst, int64(j), 10)
		dst = append(dst, `,"name":`...)
		dst = append(dst, name...)
		dst = append(dst, `,"arguments":`...)
		var msg string
		if dst, msg = appendArguments(dst, args); msg != "" {
			return invalid(at(".function.arguments"), codeInvalidValue, msg)
		}
		dst = append(dst, "}}"...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return dst[:start], nil
	}
	return append(dst, ']'), nil
}

// appendArguments appends tool call arguments as a JSON object. OpenAI
// sends a string holding JSON, decoded here straight into dst; some
// clients send the object itself; an empty string means no arguments. On
// bad input it returns a message saying why.
func appendArguments(dst, args []byte) ([]byte, string) {
	switch jsonscan.KindOf(args) {
	case jsonscan.KindInvalid, jsonscan.KindNull:
		return append(dst, "{}"...), ""
	case jsonscan.KindObject:
		return append(dst, args...), ""
	case jsonscan.KindString:
	default:
		return dst, "arguments must be a string of JSON"
	}
	start := len(dst)
	dst = jsonscan.AppendUnescaped(dst, args)
	text := dst[start:]
	if jsonscan.SkipSpace(text, 0) == len(text) {
		return append(dst[:start], "{}"...), ""
	}
	obj, err := jsonscan.Valid(text)
	if err != nil || jsonscan.KindOf(obj) != jsonscan.KindObject {
		return dst[:start], "arguments must hold a JSON object"
	}
	// Drop the white space around the object.
	n := copy(dst[start:], obj)
	return dst[:start+n], ""
}
