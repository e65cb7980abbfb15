package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// Dialect is the wire format of an intercepted chat route.
type Dialect int

const (
	// Ollama is POST /api/chat: NDJSON streams, {"error": "..."} errors,
	// streaming on unless "stream": false.
	Ollama Dialect = iota
	// OpenAI is POST /v1/chat/completions: SSE streams ending in
	// "data: [DONE]", {"error": {...}} errors, streaming off unless asked.
	OpenAI
	// Responses is OpenAI's Responses API, POST /v1/responses: typed SSE
	// events, OpenAI's error shape (see dialects.go).
	Responses
	// Messages is Anthropic's Messages API, POST /v1/messages: typed SSE
	// events, {"type":"error","error":{...}} errors (see dialects.go).
	Messages
)

func (d Dialect) String() string {
	switch d {
	case OpenAI:
		return "openai"
	case Responses:
		return "responses"
	case Messages:
		return "messages"
	}
	return "ollama"
}

// Annotation keys a client may put on a message to steer the strategies.
// They are ctxproxy's own and never reach the backend (DESIGN.md rule 2):
// OpenAI rejects unknown message keys.
const (
	keyPreserve   = "_preserve"
	keyImportance = "_importance"
)

// chatRequest is a decoded chat request: just what ctxproxy needs, plus the
// original bytes so that everything else is forwarded as sent.
type chatRequest struct {
	dialect Dialect
	body    []byte
	// members are body's top-level members (decodeChat), so that
	// rebuildBody edits it without scanning it again.
	members []member
	model   string
	// stream is the effective streaming flag (Ollama defaults to true).
	stream bool
	// messages are dialect-neutral; each keeps its raw JSON.
	messages []rewrite.Message
	// annotated reports that some message carried _preserve/_importance,
	// so the messages must be re-encoded even if no strategy changes them.
	annotated bool
	tools     json.RawMessage
	// think is the request's "think" value (raw JSON), effort its
	// OpenAI reasoning_effort; both shape the prompt of thinking models.
	think  json.RawMessage
	effort string
	// truncate reports that the request sets Ollama's "truncate" itself;
	// noTruncate that it set it to false.
	truncate, noTruncate bool
	// numCtx is the client's options.num_ctx (Ollama), 0 when unset.
	numCtx int
	// maxOutput is the request's own output limit (max_tokens,
	// max_completion_tokens or options.num_predict), 0 when unset.
	maxOutput int
	// firstSystem and firstUser feed the session fingerprint.
	firstSystem, firstUser string
	// conv is the conversation of a Responses or Messages request, which
	// encodes the body back; nil for the chat dialects.
	conv *translate.Conversation
	// serverState names the member of a Responses request that refers to
	// state the backend keeps (previous_response_id, conversation,
	// prompt, item_reference); "" when none.
	serverState string
}

// errNotChat means the body is not a chat request ctxproxy understands; it
// is forwarded unchanged (DESIGN.md rule 3).
var errNotChat = errors.New("not a chat request")

// decodeChat decodes body as a chat request of dialect d. Any error means
// the request should be forwarded unchanged.
//
// It validates the body once, finding its top-level members and decoding
// its messages in the same pass (decodeChatDepth), and reads only what
// ctxproxy needs: objects are scanned for their members and only small
// values are decoded (the known cost: decoding a 100 KB body into maps and
// back is ~1 ms).
func decodeChat(d Dialect, body []byte) (*chatRequest, error) {
	req, err := decodeChatDepth(d, body, jsonscan.MaxDepth)
	if err != nil && !errors.Is(err, errNotChat) {
		return nil, fmt.Errorf("%w: %v", errNotChat, err)
	}
	return req, err
}

// validMembers validates body, nested at most depth levels deep, and
// returns the top-level members the same pass found (jsonscan.ValidMembers);
// nil when body is not an object.
func validMembers(body []byte, depth int) ([]member, error) {
	var ms []member
	if i := jsonscan.SkipSpace(body, 0); i < len(body) && body[i] == '{' {
		ms = make([]member, 0, 8)
	}
	_, err := jsonscan.ValidMembers(body, depth, func(key, val []byte) {
		ms = append(ms, memberOf(body, key, val))
	})
	return ms, err
}

// decodeValidChat is decodeChat of a body validMembers accepted, with the
// members it found (nil: not an object).
func decodeValidChat(d Dialect, body []byte, ms []member) (*chatRequest, error) {
	if ms == nil {
		return nil, fmt.Errorf("%w: %v", errNotChat, errNotObject)
	}
	req := &chatRequest{dialect: d, body: body, members: ms, stream: d == Ollama}
	msgs, err := req.decodeMembers(ms)
	if err != nil {
		return nil, err
	}
	if msgs == nil || msgs[0] != '[' {
		return nil, fmt.Errorf("%w: messages is not an array", errNotChat)
	}
	// One walk of the array decodes each message where it starts.
	req.messages = messageList(msgs)
	at := jsonscan.SkipSpace(msgs, 1)
	for i := 0; at < len(msgs) && msgs[at] != ']'; i++ {
		m, annotated, end, err := decodeMessageAt(msgs, at)
		if err != nil {
			return nil, fmt.Errorf("%w: message %d: %v", errNotChat, i, err)
		}
		if at = jsonscan.SkipSpace(msgs, end); at < len(msgs) && msgs[at] == ',' {
			at = jsonscan.SkipSpace(msgs, at+1)
		}
		req.addMessage(m, annotated)
	}
	return req, nil
}

// messageList returns an empty list with room for the messages of arr, a
// messages array (or the body from where one starts). Every message is an
// object: counting the opening braces (one vector pass) sizes the list.
// Braces in the text count too, so the estimate is capped at one message
// per 128 bytes (a list of shorter messages grows as it is filled), lest
// a body of braces allocate a list many times its size.
func messageList(arr []byte) []rewrite.Message {
	return make([]rewrite.Message, 0, min(bytes.Count(arr, []byte{'{'}), len(arr)/128+1))
}

// addMessage appends m, a message decoded from req's body, to req.
func (req *chatRequest) addMessage(m rewrite.Message, annotated bool) {
	req.messages = append(req.messages, m)
	req.annotated = req.annotated || annotated
	req.noteFirst(&m)
}

// noteFirst keeps the content of m, a message of req, when it is the
// first system or the first user message.
func (req *chatRequest) noteFirst(m *rewrite.Message) {
	switch {
	case req.firstSystem == "" && isSystemRole(m.Role):
		req.firstSystem = m.Content
	case req.firstUser == "" && m.Role == "user":
		req.firstUser = m.Content
	}
}

// decodeMembers reads the top-level members of a chat body, ms, into req,
// all but the messages: it returns the value of the last "messages"
// member (nil when there is none) for the caller to decode.
func (req *chatRequest) decodeMembers(ms []member) ([]byte, error) {
	var err error
	var msgs []byte
	body := req.body
	for _, m := range ms {
		v := body[m.valueStart:m.end]
		switch m.key {
		case "messages":
			msgs = v
		// The small values are read as encoding/json would, without its
		// reflection: null leaves the default, another type is not a
		// chat request ctxproxy understands.
		case "model":
			switch jsonscan.KindOf(v) {
			case jsonscan.KindString:
				req.model, err = decodeText(v)
			case jsonscan.KindNull:
			default:
				err = errors.New("not a string")
			}
		case "stream":
			switch string(v) {
			case "true", "false":
				req.stream = string(v) == "true"
			case "null":
			default:
				err = errors.New("not a boolean")
			}
		case "tools":
			if !bytes.Equal(v, []byte("null")) {
				req.tools = v
			}
		case "max_tokens", "max_completion_tokens":
			if jsonscan.KindOf(v) == jsonscan.KindNull {
				break
			}
			n, ok := jsonInt(v)
			if !ok {
				err = errors.New("not an integer")
			} else if m.key == "max_completion_tokens" || req.maxOutput == 0 {
				req.maxOutput = n
			}
		case "options":
			req.decodeOptions(v)
		case "think":
			if !bytes.Equal(v, []byte("null")) {
				req.think = v
			}
		case "reasoning_effort":
			if v[0] == '"' {
				req.effort, _ = decodeString(v)
			}
		case "truncate":
			req.truncate = !bytes.Equal(v, []byte("null"))
			req.noTruncate = bytes.Equal(v, []byte("false"))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errNotChat, m.key, err)
		}
	}
	return msgs, nil
}

// maxWindow bounds token counts a client writes, so an absurd value
// (1e300) cannot overflow int.
const maxWindow = 1 << 30

// decodeOptions reads Ollama's options.num_ctx and options.num_predict.
func (req *chatRequest) decodeOptions(v []byte) {
	if v[0] != '{' {
		return
	}
	var opts struct {
		NumCtx     *float64 `json:"num_ctx"`
		NumPredict *float64 `json:"num_predict"`
	}
	// Ollama takes options loosely; a malformed option is the backend's
	// business, not a reason to stop managing the context.
	if json.Unmarshal(v, &opts) == nil {
		if opts.NumCtx != nil && *opts.NumCtx > 0 {
			req.numCtx = int(min(*opts.NumCtx, maxWindow))
		}
		if opts.NumPredict != nil && *opts.NumPredict > 0 {
			req.maxOutput = int(min(*opts.NumPredict, maxWindow))
		}
	}
}

// isSystemRole reports whether role carries instructions: OpenAI's newer
// "developer" role plays the part of "system".
func isSystemRole(role string) bool { return role == "system" || role == "developer" }

type wireToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type wirePart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// decodeString decodes a JSON string value. One without escapes (the
// common case for long chat content) is not copied: the string shares v's
// bytes, so v must never change afterwards. Request bodies are never
// edited in place (rebuildBody copies), and a message's Raw already keeps
// its body alive wherever the message goes, so sharing adds no retention.
func decodeString(v []byte) (string, error) {
	if len(v) > 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return unsafe.String(&v[1], len(v)-2), nil
	}
	if len(v) == 2 && v[0] == '"' {
		return "", nil
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}

// decodeMessage reads the fields ctxproxy needs from one message object.
// The caller has validated the body, so values are scanned, not checked.
func decodeMessage(raw json.RawMessage) (rewrite.Message, bool, error) {
	i := jsonscan.SkipSpace(raw, 0)
	m, annotated, end, err := decodeMessageAt(raw, i)
	if err == nil && jsonscan.SkipSpace(raw, end) != len(raw) {
		err = errors.New("json: text after the message")
	}
	return m, annotated, err
}

// decodeMessageAt decodes the message object at d[i] (valid JSON, like
// all of d) and returns the index just past it. The messages of a request
// are read in one walk of its array: each object is scanned once, not
// once to find its end and again for its members.
func decodeMessageAt(d []byte, i int) (rewrite.Message, bool, int, error) {
	var buf [8]member // the members are not kept: no allocation for them
	ms, end, err := appendMembersAt(buf[:0], d, i)
	if err != nil {
		return rewrite.Message{}, false, 0, err
	}
	m, annotated, err := decodeMessageMembers(d, i, end, ms)
	return m, annotated, end, err
}

// decodeMessageMembers decodes the message object d[i:end] from its
// members, ms.
func decodeMessageMembers(d []byte, i, end int, ms []member) (rewrite.Message, bool, error) {
	var err error
	raw := json.RawMessage(d[i:end:end])
	m := rewrite.Message{Raw: raw}
	annotated := false
	for _, mem := range ms {
		v := d[mem.valueStart:mem.end]
		null := bytes.Equal(v, []byte("null"))
		switch mem.key {
		case "role":
			m.Role, err = decodeMember(v, mem.plain)
		case "content":
			err = decodeContent(&m, v, mem.plain)
		case "name":
			if !null {
				m.Name, err = decodeMember(v, mem.plain)
			}
		case "tool_call_id":
			if !null {
				m.ToolCallID, err = decodeMember(v, mem.plain)
			}
		case "images":
			if v[0] == '[' {
				var sp [][2]int
				sp, err = elements(v)
				m.Images += len(sp)
			}
		case "tool_calls":
			if !null {
				m.ToolCalls, err = decodeToolCalls(v)
			}
		case keyPreserve:
			annotated = true
			var b bool
			if json.Unmarshal(v, &b) == nil {
				m.Preserve = b
			}
		case keyImportance:
			annotated = true
			var f float64
			if json.Unmarshal(v, &f) == nil {
				m.Importance = min(max(f, 0), 1)
				m.HasImportance = true
			}
		}
		if err != nil {
			return rewrite.Message{}, false, fmt.Errorf("%s: %v", mem.key, err)
		}
	}
	if m.Role == "" {
		return rewrite.Message{}, false, errors.New("message has no role")
	}
	if annotated {
		clean, err := removeMembers(raw, func(k string) bool { return k == keyPreserve || k == keyImportance })
		if err != nil {
			return rewrite.Message{}, false, err
		}
		m.Raw = clean
	}
	return m, annotated, nil
}

// decodeContent reads a string content, or the text parts of a parts
// array (counting its images).
func decodeContent(m *rewrite.Message, v []byte, plain bool) error {
	switch v[0] {
	case 'n':
		return nil
	case '"':
		var err error
		m.Content, err = decodeMember(v, plain)
		return err
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(v, &parts); err != nil {
			return err
		}
		var texts []string
		for _, p := range parts {
			var part wirePart
			if json.Unmarshal(p, &part) != nil {
				continue // an unknown part shape is the backend's business
			}
			switch part.Type {
			case "text", "input_text":
				texts = append(texts, part.Text)
			case "image_url", "input_image", "image":
				m.Images++
			}
		}
		m.Content = strings.Join(texts, "\n")
		return nil
	}
	return errors.New("neither a string nor an array")
}

func decodeToolCalls(v []byte) ([]rewrite.ToolCall, error) {
	var calls []wireToolCall
	if err := json.Unmarshal(v, &calls); err != nil {
		return nil, err
	}
	out := make([]rewrite.ToolCall, 0, len(calls))
	for _, tc := range calls {
		call := rewrite.ToolCall{ID: tc.ID, Name: tc.Function.Name}
		args := tc.Function.Arguments
		if len(args) > 0 && args[0] == '"' {
			// OpenAI sends the arguments as a string of JSON.
			var s string
			if json.Unmarshal(args, &s) == nil {
				call.Arguments = s
			}
		} else if len(args) > 0 && !bytes.Equal(args, []byte("null")) {
			call.Arguments = string(args)
		}
		out = append(out, call)
	}
	return out, nil
}

// encodeMessages returns the JSON array for msgs: each message's raw bytes
// when it has them, its edited form when a strategy changed its content,
// and a plain {"role","content"} object for messages ctxproxy made.
func encodeMessages(msgs []rewrite.Message) ([]byte, error) {
	size := 2
	for i := range msgs {
		// An edited message is written from its (shorter) content, not
		// its raw bytes: a 30 MB message cut to fit must not cost a
		// 30 MB buffer.
		if m := &msgs[i]; m.Raw != nil && !m.Edited {
			size += len(m.Raw) + 1
		} else {
			size += len(m.Content) + 64
		}
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	for i := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		b, err := encodeMessage(&msgs[i])
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return append(out, ']'), nil
}

func encodeMessage(m *rewrite.Message) ([]byte, error) {
	if m.Raw == nil {
		out := append([]byte(`{"role":`), marshalString(m.Role)...)
		out = append(out, `,"content":`...)
		out = append(out, marshalString(m.Content)...)
		return append(out, '}'), nil
	}
	if !m.Edited {
		return m.Raw, nil
	}
	content, err := editedContent(m)
	if err != nil {
		return nil, err
	}
	return setMember(m.Raw, "content", content)
}

// editedContent is the new "content" value of an edited message. A parts
// array keeps its non-text parts (images stay attached) and gets the new
// text as its first text part.
func editedContent(m *rewrite.Message) ([]byte, error) {
	text := marshalString(m.Content)
	ms, err := members(m.Raw)
	if err != nil {
		return nil, err
	}
	cm, ok := findMember(ms, "content")
	if !ok || m.Raw[cm.valueStart] != '[' {
		return text, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(m.Raw[cm.valueStart:cm.end], &parts); err != nil {
		return text, nil
	}
	out := []byte(`[{"type":"text","text":`)
	out = append(out, text...)
	out = append(out, '}')
	for _, p := range parts {
		var part wirePart
		if json.Unmarshal(p, &part) == nil && (part.Type == "text" || part.Type == "input_text") {
			continue
		}
		out = append(out, ',')
		out = append(out, p...)
	}
	return append(out, ']'), nil
}

// rebuildBody returns body with its messages replaced by msgs (when
// setMessages), options.num_ctx set (numCtx > 0) and "truncate": false
// added (noTruncate), every other byte as sent and not copied (splice).
// ms are body's top-level members as decodeChat found them; nil scans
// them.
func rebuildBody(body []byte, ms []member, msgs []rewrite.Message, setMessages bool, numCtx int, noTruncate bool) (payload, error) {
	if ms == nil {
		var err error
		if ms, err = members(body); err != nil {
			return nil, err
		}
	}
	var buf [3]edit
	edits := buf[:0]
	if setMessages {
		arr, err := encodeMessages(msgs)
		if err != nil {
			return nil, err
		}
		edits = append(edits, edit{"messages", arr})
	}
	if numCtx > 0 {
		num := appendInt(nil, numCtx)
		if m, ok := findMember(ms, "options"); ok && body[m.valueStart] == '{' {
			opts, err := setMember(body[m.valueStart:m.end], "num_ctx", num)
			if err != nil {
				return nil, err
			}
			edits = append(edits, edit{"options", opts})
		} else {
			edits = append(edits, edit{"options", append(append([]byte(`{"num_ctx":`), num...), '}')})
		}
	}
	if noTruncate {
		edits = append(edits, edit{"truncate", []byte("false")})
	}
	if len(edits) == 0 {
		return bodyOf(body), nil
	}
	return splice(body, ms, edits), nil
}

// setOption sets options.<key> in an Ollama request body, creating the
// options object when the request has none.
func setOption(body []byte, key string, value []byte) ([]byte, error) {
	ms, err := members(body)
	if err != nil {
		return nil, err
	}
	if m, ok := findMember(ms, "options"); ok && body[m.valueStart] == '{' {
		opts, err := setMember(body[m.valueStart:m.end], key, value)
		if err != nil {
			return nil, err
		}
		return replaceValue(body, m, opts), nil
	}
	k := jsonscan.AppendString(nil, key)
	opts := append(append(append([]byte{'{'}, k...), ':'), value...)
	opts = append(opts, '}')
	return setMember(body, "options", opts)
}

// marshalString encodes s as a JSON string without encoding/json's HTML
// escaping: "<conversation_summary>" stays readable in what is forwarded,
// as a client's own JSON would have it.
func marshalString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
