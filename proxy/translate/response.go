package translate

import (
	"crypto/rand"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// ResponseOptions tune Response and Stream. The zero value uses random ids
// and the real clock.
type ResponseOptions struct {
	// ID is the completion id; empty means NewID("chatcmpl-").
	ID string
	// NewID makes ids from a prefix: "chatcmpl-" for the completion and
	// "call_" for a tool call that Ollama sent without an id. nil means a
	// random suffix.
	NewID func(prefix string) string
	// Now gives "created" when Ollama's created_at is missing or
	// unreadable; nil means time.Now.
	Now func() time.Time
}

func (o *ResponseOptions) newID(prefix string) string {
	if o.NewID != nil {
		return o.NewID(prefix)
	}
	return prefix + strings.ToLower(rand.Text())
}

func (o *ResponseOptions) id() string {
	if o.ID != "" {
		return o.ID
	}
	return o.newID("chatcmpl-")
}

func (o *ResponseOptions) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// reply holds the raw values of one Ollama /api/chat response object (a
// whole answer, or one line of a stream).
type reply struct {
	model, createdAt, doneReason             []byte
	content, thinking, toolCalls, logprobs   []byte
	promptEvalCount, evalCount, errorMessage []byte
	done                                     bool
}

var errNotObject = errors.New("not a JSON object")

// parseReply reads an Ollama response object.
func parseReply(body []byte) (reply, error) {
	var r reply
	v, err := jsonscan.Valid(body)
	if err != nil {
		return r, err
	}
	if jsonscan.KindOf(v) != jsonscan.KindObject {
		return r, errNotObject
	}
	_ = jsonscan.Members(v, func(key, val []byte) error {
		switch string(keyBytes(key)) {
		case "model":
			r.model = val
		case "created_at":
			r.createdAt = val
		case "done":
			r.done = string(val) == "true"
		case "done_reason":
			r.doneReason = val
		case "prompt_eval_count":
			r.promptEvalCount = val
		case "eval_count":
			r.evalCount = val
		case "logprobs":
			r.logprobs = val
		case "error":
			r.errorMessage = val
		case "message":
			if jsonscan.KindOf(val) != jsonscan.KindObject {
				return nil
			}
			_ = jsonscan.Members(val, func(k, v []byte) error {
				switch string(keyBytes(k)) {
				case "content":
					r.content = v
				case "thinking":
					r.thinking = v
				case "tool_calls":
					r.toolCalls = v
				}
				return nil
			})
		}
		return nil
	})
	return r, nil
}

// hasText reports whether tok is a non-empty JSON string.
func hasText(tok []byte) bool {
	return jsonscan.KindOf(tok) == jsonscan.KindString && !jsonscan.IsEmptyString(tok)
}

// created returns the Unix time of Ollama's created_at, or of now.
func (r *reply) created(opts *ResponseOptions) int64 {
	if jsonscan.KindOf(r.createdAt) == jsonscan.KindString {
		if s, err := jsonscan.Unquote(r.createdAt); err == nil {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				return t.Unix()
			}
		}
	}
	return opts.now().Unix()
}

// modelToken returns the model as a JSON string token.
func (r *reply) modelToken(info *Info) []byte {
	if jsonscan.KindOf(r.model) == jsonscan.KindString {
		return r.model
	}
	return jsonscan.AppendString(nil, info.Model)
}

// finishReason maps Ollama's done_reason: "length" stays, anything else
// ("stop", and "load"/"unload" for an empty prompt) is "stop", and an
// answer with tool calls finishes with "tool_calls", as Ollama's /v1 does.
func finishReason(doneReason []byte, toolCalls bool) string {
	switch {
	case toolCalls:
		return "tool_calls"
	case string(doneReason) == `"length"`:
		return "length"
	}
	return "stop"
}

// appendUsage writes {"prompt_tokens","completion_tokens","total_tokens"}.
func (r *reply) appendUsage(dst []byte) []byte {
	p, c := count(r.promptEvalCount), count(r.evalCount)
	dst = append(dst, `{"prompt_tokens":`...)
	dst = jsonscan.AppendInt(dst, p)
	dst = append(dst, `,"completion_tokens":`...)
	dst = jsonscan.AppendInt(dst, c)
	dst = append(dst, `,"total_tokens":`...)
	dst = jsonscan.AppendInt(dst, p+c)
	return append(dst, '}')
}

// count reads a token count; anything but a non-negative integer is 0.
func count(tok []byte) int64 {
	n, err := strconv.ParseInt(string(tok), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// appendToolCalls writes Ollama's tool calls in OpenAI's shape, arguments
// as a string of JSON. In a stream each call carries its index among all
// the calls of the answer (next is the first index to use); Ollama sends
// every call whole, so one delta per call is complete. It returns how many
// calls it wrote.
func appendReplyToolCalls(dst, raw []byte, stream bool, next int, opts *ResponseOptions) ([]byte, int) {
	n := 0
	dst = append(dst, `"tool_calls":[`...)
	_ = jsonscan.Elements(raw, func(_ int, tc []byte) error {
		if jsonscan.KindOf(tc) != jsonscan.KindObject {
			return nil
		}
		var id, name, args []byte
		_ = jsonscan.Members(tc, func(key, val []byte) error {
			switch {
			case jsonscan.KeyIs(key, "id"):
				id = val
			case jsonscan.KeyIs(key, "function") && jsonscan.KindOf(val) == jsonscan.KindObject:
				_ = jsonscan.Members(val, func(k, v []byte) error {
					switch {
					case jsonscan.KeyIs(k, "name"):
						name = v
					case jsonscan.KeyIs(k, "arguments"):
						args = v
					}
					return nil
				})
			}
			return nil
		})
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if stream {
			dst = append(dst, `"index":`...)
			dst = jsonscan.AppendInt(dst, int64(next+n))
			dst = append(dst, ',')
		}
		dst = append(dst, `"id":`...)
		if hasText(id) {
			dst = append(dst, id...)
		} else {
			dst = jsonscan.AppendString(dst, opts.newID("call_"))
		}
		dst = append(dst, `,"type":"function","function":{"name":`...)
		if jsonscan.KindOf(name) == jsonscan.KindString {
			dst = append(dst, name...)
		} else {
			dst = append(dst, `""`...)
		}
		dst = append(dst, `,"arguments":`...)
		switch jsonscan.KindOf(args) {
		case jsonscan.KindInvalid, jsonscan.KindNull:
			dst = append(dst, `"{}"`...)
		default:
			dst = jsonscan.AppendStringBytes(dst, args)
		}
		dst = append(dst, "}}"...)
		n++
		return nil
	})
	return append(dst, ']'), n
}

// hasToolCalls reports whether raw is a non-empty array.
func hasToolCalls(raw []byte) bool {
	return jsonscan.KindOf(raw) == jsonscan.KindArray && jsonscan.SkipSpace(raw, 1) < len(raw)-1
}

// appendReasoning writes the thinking text under both names clients read:
// reasoning_content (DeepSeek, vLLM, go-openai) and reasoning (what
// Ollama's own /v1 layer sends).
func appendReasoning(dst, thinking []byte) []byte {
	dst = append(dst, `"reasoning_content":`...)
	dst = append(dst, thinking...)
	dst = append(dst, `,"reasoning":`...)
	return append(dst, thinking...)
}

// errUnreadable answers a backend body that is not an Ollama answer.
var errUnreadable = &Error{
	Status:  http.StatusBadGateway,
	Type:    "api_error",
	Message: "the backend's answer could not be read",
}

// Response translates a whole (non-stream) Ollama /api/chat answer into an
// OpenAI chat.completion body. The proxy calls it on a 2xx answer to a
// request that Request translated with Info.Stream false; for a non-2xx
// answer it calls BackendError instead. Its errors are *Error, ready to
// send: 502 for a body that is not an Ollama answer, and BackendError's
// mapping for an Ollama {"error": …} body.
func Response(body []byte, info Info, opts ResponseOptions) ([]byte, error) {
	r, err := parseReply(body)
	if err != nil {
		return nil, errUnreadable
	}
	if r.errorMessage != nil {
		return nil, BackendError(0, body)
	}
	tools := hasToolCalls(r.toolCalls)

	dst := make([]byte, 0, len(body)+256)
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, opts.id())
	dst = append(dst, `,"object":"chat.completion","created":`...)
	dst = jsonscan.AppendInt(dst, r.created(&opts))
	dst = append(dst, `,"model":`...)
	dst = append(dst, r.modelToken(&info)...)
	dst = append(dst, `,"system_fingerprint":"fp_ollama","choices":[{"index":0,"message":{"role":"assistant","content":`...)
	switch {
	case hasText(r.content):
		dst = append(dst, r.content...)
	case tools:
		// OpenAI sends null content beside tool calls.
		dst = append(dst, "null"...)
	default:
		dst = append(dst, `""`...)
	}
	if hasText(r.thinking) {
		dst = append(dst, ',')
		dst = appendReasoning(dst, r.thinking)
	}
	if tools {
		dst = append(dst, ',')
		dst, _ = appendReplyToolCalls(dst, r.toolCalls, false, 0, &opts)
	}
	dst = append(dst, '}')
	if jsonscan.KindOf(r.logprobs) == jsonscan.KindArray {
		dst = append(dst, `,"logprobs":{"content":`...)
		dst = append(dst, r.logprobs...)
		dst = append(dst, '}')
	}
	dst = append(dst, `,"finish_reason":`...)
	dst = jsonscan.AppendString(dst, finishReason(r.doneReason, tools))
	dst = append(dst, `}],"usage":`...)
	dst = r.appendUsage(dst)
	return append(dst, '}'), nil
}
