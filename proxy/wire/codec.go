package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
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
// They are ctxproxy's own and never reach the backend (docs/headers.md):
// OpenAI rejects unknown message keys.
const (
	keyPreserve   = "_preserve"
	keyImportance = "_importance"
)

// Request is a decoded chat request: just what ctxproxy needs, plus the
// original bytes so that everything else is forwarded as sent.
type Request struct {
	Dialect Dialect
	Body    []byte
	// members are body's top-level members (validMembers), so that
	// Rebuild edits it without scanning it again.
	members []Member
	Model   string
	// Stream is the effective streaming flag (Ollama defaults to true).
	Stream bool
	// Messages are dialect-neutral; each keeps its raw JSON.
	Messages []chat.Message
	// Annotated reports that some message carried _preserve/_importance,
	// so the messages must be re-encoded even if no strategy changes them.
	Annotated bool
	Tools     json.RawMessage
	// Think is the request's "Think" value (raw JSON), effort its
	// OpenAI reasoning_effort; both shape the prompt of thinking models.
	Think  json.RawMessage
	Effort string
	// Truncate reports that the request sets Ollama's "Truncate" itself;
	// NoTruncate that it set it to false.
	Truncate, NoTruncate bool
	// NumCtx is the client's options.num_ctx (Ollama), 0 when unset.
	NumCtx int
	// MaxOutput is the request's own output limit (max_tokens,
	// max_completion_tokens or options.num_predict), 0 when unset.
	MaxOutput int
	// FirstSystem and FirstUser feed the session fingerprint.
	FirstSystem, FirstUser string
	// ClientSession is the conversation id a client put in its body,
	// which names the session when no header does (ClientSessionOf);
	// "" when none.
	ClientSession string
	// Conv is the conversation of a Responses or Messages request, which
	// encodes the body back; nil for the chat dialects.
	Conv *translate.Conversation
	// ServerState names the member of a Responses request that refers to
	// state the backend keeps (previous_response_id, conversation,
	// prompt, item_reference); "" when none.
	ServerState string
}

// ErrNotChat means the body is not a chat request ctxproxy understands; it
// is forwarded unchanged.
var ErrNotChat = errors.New("not a chat request")

// DecodeChat decodes body as a chat request of dialect d, its names read
// as Ollama reads them. Any error means the request should be forwarded
// unchanged.
func DecodeChat(d Dialect, body []byte) (*Request, error) {
	req, err := decodeChatDepth(d, body, jsonscan.MaxDepth, JSONKeys)
	if err != nil && !errors.Is(err, ErrNotChat) {
		return nil, fmt.Errorf("%w: %v", ErrNotChat, err)
	}
	return req, err
}

// Decode validates body, nested at most depth levels deep, and decodes
// it as a request of dialect d, its member names read by rules. Its error
// is jsonscan's when body is not valid JSON within depth (ErrDepth among
// them), an *AmbiguousError, or one wrapping ErrNotChat; ErrDepth and an
// ambiguous body are refused, any other error means the request should be
// forwarded unchanged.
func Decode(d Dialect, body []byte, depth int, rules KeyRules) (*Request, error) {
	if d != Responses && d != Messages {
		return decodeChatDepth(d, body, depth, rules)
	}
	ms, err := validMembers(body, depth)
	if err != nil {
		return nil, err
	}
	if ms == nil {
		return nil, fmt.Errorf("%w: %v", ErrNotChat, errNotObject)
	}
	if body, err = resolveConversation(d, body, ms, rules); err != nil {
		return nil, err
	}
	return decodeConversation(d, body)
}

// decodeChatDepth decodes body as a chat request of dialect d (Ollama or
// OpenAI), nested at most depth levels deep, its member names read by
// rules. It validates the body once, finding its top-level members, then
// walks its messages, and reads only what ctxproxy needs: objects are
// scanned for their members and only small values are decoded (decoding a
// 100 KB body into maps and back costs about 1 ms). Its error is
// jsonscan's when the body is not valid JSON within depth (ErrDepth among
// them), an *AmbiguousError, or one wrapping ErrNotChat.
func decodeChatDepth(d Dialect, body []byte, depth int, rules KeyRules) (*Request, error) {
	ms, err := validMembers(body, depth)
	if err != nil {
		return nil, err
	}
	return decodeValidChat(d, body, ms, rules)
}

// validMembers validates body, nested at most depth levels deep, and
// returns the top-level members the same pass found (jsonscan.ValidMembers);
// nil when body is not an object.
func validMembers(body []byte, depth int) ([]Member, error) {
	var ms []Member
	if i := jsonscan.SkipSpace(body, 0); i < len(body) && body[i] == '{' {
		ms = make([]Member, 0, 8)
	}
	_, err := jsonscan.ValidMembers(body, depth, func(key, val []byte) {
		ms = append(ms, memberOf(body, key, val))
	})
	return ms, err
}

// decodeValidChat is decodeChatDepth of a body validMembers accepted, with
// the members it found (nil: not an object).
func decodeValidChat(d Dialect, body []byte, ms []Member, rules KeyRules) (*Request, error) {
	if ms == nil {
		return nil, fmt.Errorf("%w: %v", ErrNotChat, errNotObject)
	}
	resolved, err := resolveNames(body, ms, requestFields(d), rules)
	if err != nil {
		return nil, err
	}
	if resolved != nil {
		// Forwarded resolved: the backend reads it as it would have read
		// the body as sent.
		if ms, err = Members(resolved); err != nil {
			return nil, err
		}
		body = resolved
	}
	req := &Request{Dialect: d, Body: body, members: ms, Stream: d == Ollama}
	msgs, err := req.decodeMembers(ms)
	if err != nil {
		return nil, err
	}
	if msgs == nil || msgs[0] != '[' {
		return nil, fmt.Errorf("%w: messages is not an array", ErrNotChat)
	}
	// One walk of the array decodes each message where it starts.
	req.Messages = messageList(msgs)
	at := jsonscan.SkipSpace(msgs, 1)
	dec := messageDecoder{fields: messageFields(d), rules: rules, lowerRole: rules == JSONKeys}
	for i := 0; at < len(msgs) && msgs[at] != ']'; i++ {
		m, annotated, end, err := dec.decodeAt(msgs, at)
		if err != nil {
			return nil, messageError(i, err)
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
func messageList(arr []byte) []chat.Message {
	return make([]chat.Message, 0, min(bytes.Count(arr, []byte{'{'}), len(arr)/128+1))
}

// addMessage appends m, a message decoded from req's body, to req.
func (req *Request) addMessage(m chat.Message, annotated bool) {
	req.Messages = append(req.Messages, m)
	req.Annotated = req.Annotated || annotated
	req.noteFirst(&m)
}

// noteFirst keeps the content of m, a message of req, when it is the
// first system or the first user message.
func (req *Request) noteFirst(m *chat.Message) {
	switch {
	case req.FirstSystem == "" && IsSystemRole(m.Role):
		req.FirstSystem = m.Content
	case req.FirstUser == "" && m.Role == "user":
		req.FirstUser = m.Content
	}
}

// decodeMembers reads the top-level members of a chat body, ms, into req,
// all but the messages: it returns the value of the last "messages"
// member (nil when there is none) for the caller to decode.
func (req *Request) decodeMembers(ms []Member) ([]byte, error) {
	var err error
	var msgs []byte
	body := req.Body
	for _, m := range ms {
		v := body[m.ValueStart:m.End]
		switch m.Key {
		case "messages":
			msgs = v
		// The small values are read as encoding/json would, without its
		// reflection: null leaves the default, another type is not a
		// chat request ctxproxy understands.
		case "model":
			switch jsonscan.KindOf(v) {
			case jsonscan.KindString:
				req.Model, err = decodeText(v)
			case jsonscan.KindNull:
			default:
				err = errors.New("not a string")
			}
		case "stream":
			switch string(v) {
			case "true", "false":
				req.Stream = string(v) == "true"
			case "null":
			default:
				err = errors.New("not a boolean")
			}
		case "tools":
			if !bytes.Equal(v, []byte("null")) {
				req.Tools = v
			}
		case "max_tokens", "max_completion_tokens":
			if jsonscan.KindOf(v) == jsonscan.KindNull {
				break
			}
			n, ok := jsonInt(v)
			if !ok {
				err = errors.New("not an integer")
			} else if m.Key == "max_completion_tokens" || req.MaxOutput == 0 {
				req.MaxOutput = n
			}
		case "options":
			req.decodeOptions(v)
		case "think":
			if !bytes.Equal(v, []byte("null")) {
				req.Think = v
			}
		case "reasoning_effort":
			if v[0] == '"' {
				req.Effort, _ = DecodeString(v)
			}
		case "truncate":
			req.Truncate = !bytes.Equal(v, []byte("null"))
			req.NoTruncate = bytes.Equal(v, []byte("false"))
		case "prompt_cache_key":
			req.ClientSession = ClientSessionOf(m.Key, v)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNotChat, m.Key, err)
		}
	}
	return msgs, nil
}

// maxWindow bounds token counts a client writes, so an absurd value
// (1e300) cannot overflow int.
const maxWindow = 1 << 30

// decodeOptions reads Ollama's options.num_ctx and options.num_predict.
func (req *Request) decodeOptions(v []byte) {
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
			req.NumCtx = int(min(*opts.NumCtx, maxWindow))
		}
		if opts.NumPredict != nil && *opts.NumPredict > 0 {
			req.MaxOutput = int(min(*opts.NumPredict, maxWindow))
		}
	}
}

// IsSystemRole reports whether role carries instructions: OpenAI's newer
// "developer" role plays the part of "system".
func IsSystemRole(role string) bool { return role == "system" || role == "developer" }

// Rebuild returns req's body with its messages replaced by msgs (when
// setMessages), options.num_ctx set (numCtx > 0) and "truncate": false
// added (noTruncate), every other byte as sent and not copied (splice).
func (req *Request) Rebuild(msgs []chat.Message, setMessages bool, numCtx int, noTruncate bool) (Payload, error) {
	return rebuild(req.Body, req.members, msgs, setMessages, numCtx, noTruncate)
}

// rebuild is Rebuild of body, whose top-level members are ms (nil scans
// them).
func rebuild(body []byte, ms []Member, msgs []chat.Message, setMessages bool, numCtx int, noTruncate bool) (Payload, error) {
	if ms == nil {
		var err error
		if ms, err = Members(body); err != nil {
			return nil, err
		}
	}
	var buf [3]edit
	edits := buf[:0]
	if setMessages {
		arr, err := EncodeMessages(msgs)
		if err != nil {
			return nil, err
		}
		edits = append(edits, edit{"messages", arr})
	}
	if numCtx > 0 {
		num := appendInt(nil, numCtx)
		if m, ok := FindMember(ms, "options"); ok && body[m.ValueStart] == '{' {
			opts, err := SetMember(body[m.ValueStart:m.End], "num_ctx", num)
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
		return PayloadOf(body), nil
	}
	return splice(body, ms, edits), nil
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
