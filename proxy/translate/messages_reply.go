package translate

import (
	"fmt"
	"io"
	"net/http"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// AnthropicJSON returns the error in Anthropic's shape,
// {"type":"error","error":{"type","message"}}, for /v1/messages. The type
// follows the status as Anthropic's API types its errors.
func (e *Error) AnthropicJSON() []byte {
	return e.appendAnthropic(make([]byte, 0, 64+len(e.Message)))
}

func (e *Error) appendAnthropic(dst []byte) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = jsonscan.AppendString(dst, anthropicErrorType(e.Status))
	dst = append(dst, `,"message":`...)
	msg := e.Message
	if e.Param != "" {
		// Anthropic's errors have no param member; its messages name the
		// field ("messages.0.content: …").
		msg = e.Param + ": " + msg
	}
	dst = jsonscan.AppendString(dst, msg)
	return append(dst, "}}"...)
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// messageID is the message id: opts.ID, else msg_<random>.
func (o *ResponseOptions) messageID() string {
	if o.ID != "" {
		return o.ID
	}
	return o.newID("msg_")
}

// stopReason maps Ollama's done_reason: tool_use when the answer calls
// tools, max_tokens for "length", end_turn otherwise.
func stopReason(doneReason []byte, toolCalls bool) string {
	switch {
	case toolCalls:
		return "tool_use"
	case string(doneReason) == `"length"`:
		return "max_tokens"
	}
	return "end_turn"
}

// appendToolUse writes a tool_use block; input is the arguments object,
// or {} while a stream has yet to send it.
func appendToolUse(dst []byte, c *replyCall, input []byte) []byte {
	dst = append(dst, `{"type":"tool_use","id":`...)
	dst = append(dst, c.id...)
	dst = append(dst, `,"name":`...)
	dst = append(dst, c.name...)
	dst = append(dst, `,"input":`...)
	dst = append(dst, input...)
	return append(dst, '}')
}

// MessagesResponse translates a whole (non-stream) Ollama /api/chat answer
// into an Anthropic message object: a thinking block, a text block, then a
// tool_use block per call. Ollama's tool call ids (call_…) are kept, so
// the tool_result the client sends back names them. Errors are *Error, as
// Response's; send them with AnthropicJSON.
func MessagesResponse(body []byte, info MessagesInfo, opts ResponseOptions) ([]byte, error) {
	r, err := parseReply(body)
	if err != nil {
		return nil, errUnreadable
	}
	if r.errorMessage != nil {
		return nil, BackendError(0, body)
	}
	calls := replyCalls(r.toolCalls, &opts)
	dst := make([]byte, 0, len(body)+256)
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, opts.messageID())
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = append(dst, r.modelToken(&info.Info)...)
	dst = append(dst, `,"content":[`...)
	n := 0
	sep := func() {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
	}
	if hasText(r.thinking) {
		sep()
		dst = append(dst, `{"type":"thinking","thinking":`...)
		dst = append(dst, r.thinking...)
		dst = append(dst, `,"signature":""}`...)
	}
	if hasText(r.content) {
		sep()
		dst = append(dst, `{"type":"text","text":`...)
		dst = append(dst, r.content...)
		dst = append(dst, '}')
	}
	for i := range calls {
		sep()
		dst = appendToolUse(dst, &calls[i], calls[i].object)
	}
	dst = append(dst, `],"stop_reason":`...)
	dst = jsonscan.AppendString(dst, stopReason(r.doneReason, len(calls) > 0))
	dst = append(dst, `,"stop_sequence":null,"usage":{"input_tokens":`...)
	dst = jsonscan.AppendInt(dst, count(r.promptEvalCount))
	dst = append(dst, `,"output_tokens":`...)
	dst = jsonscan.AppendInt(dst, count(r.evalCount))
	return append(dst, "}}"...), nil
}

// MessagesStream converts Ollama's /api/chat NDJSON stream into Anthropic's
// server-sent events, one line at a time:
//
//	message_start, ping,
//	per block: content_block_start, content_block_delta… (thinking_delta,
//	           text_delta, input_json_delta), content_block_stop
//	message_delta (stop_reason, usage), message_stop
//
// An Ollama error line becomes an "error" event and ends the stream; see
// Finish for a stream that breaks off. A MessagesStream is for one
// response and is not safe for concurrent use.
type MessagesStream struct {
	info  MessagesInfo
	opts  ResponseOptions
	state streamState
	err   error

	started bool
	// block is the index of the open block, or of the next one when open
	// is blockNone.
	block int
	open  blockKind
	calls int
}

type blockKind int

const (
	blockNone blockKind = iota
	blockThinking
	blockText
)

// NewMessagesStream returns a converter for the stream answering a request
// that MessagesRequest translated into info.
func NewMessagesStream(info MessagesInfo, opts ResponseOptions) *MessagesStream {
	return &MessagesStream{info: info, opts: opts}
}

// sse starts an event: "event: typ\ndata: {"type":typ"; the caller adds
// the other members and ends it with endEvent.
func sse(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	return append(dst, '"')
}

func (s *MessagesStream) index(dst []byte) []byte {
	dst = append(dst, `,"index":`...)
	return jsonscan.AppendInt(dst, int64(s.block))
}

// Append converts one line of Ollama's stream and appends the events for
// it to dst, as ResponsesStream.Append does.
func (s *MessagesStream) Append(dst, line []byte) ([]byte, error) {
	if s.state != running || jsonscan.SkipSpace(line, 0) == len(line) {
		return dst, nil
	}
	r, err := parseReply(line)
	if err != nil {
		return dst, fmt.Errorf("translate: backend stream line is not a JSON object: %w", err)
	}
	if r.errorMessage != nil {
		e := BackendError(0, line)
		s.state, s.err = failed, e
		return s.appendError(dst, e), nil
	}
	if !s.started {
		s.started = true
		dst = sse(dst, "message_start")
		dst = append(dst, `,"message":{"id":`...)
		dst = jsonscan.AppendString(dst, s.opts.messageID())
		dst = append(dst, `,"type":"message","role":"assistant","model":`...)
		dst = append(dst, r.modelToken(&s.info.Info)...)
		dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
		dst = jsonscan.AppendInt(dst, int64(max(s.info.InputTokens, 0)))
		dst = append(dst, `,"output_tokens":0}}`...)
		dst = endEvent(dst)
		dst = endEvent(sse(dst, "ping"))
	}
	if hasText(r.thinking) {
		dst = s.openBlock(dst, blockThinking)
		dst = s.index(sse(dst, "content_block_delta"))
		dst = append(dst, `,"delta":{"type":"thinking_delta","thinking":`...)
		dst = append(dst, r.thinking...)
		dst = endEvent(append(dst, '}'))
	}
	if hasText(r.content) {
		dst = s.openBlock(dst, blockText)
		dst = s.index(sse(dst, "content_block_delta"))
		dst = append(dst, `,"delta":{"type":"text_delta","text":`...)
		dst = append(dst, r.content...)
		dst = endEvent(append(dst, '}'))
	}
	for _, c := range replyCalls(r.toolCalls, &s.opts) {
		dst = s.closeBlock(dst)
		dst = s.index(sse(dst, "content_block_start"))
		dst = append(dst, `,"content_block":`...)
		dst = endEvent(appendToolUse(dst, &c, []byte("{}")))
		dst = s.index(sse(dst, "content_block_delta"))
		dst = append(dst, `,"delta":{"type":"input_json_delta","partial_json":`...)
		dst = endEvent(append(append(dst, c.args...), '}'))
		dst = endEvent(s.index(sse(dst, "content_block_stop")))
		s.block++
		s.calls++
	}
	if !r.done {
		return dst, nil
	}
	dst = s.closeBlock(dst)
	s.state = done
	dst = sse(dst, "message_delta")
	dst = append(dst, `,"delta":{"stop_reason":`...)
	dst = jsonscan.AppendString(dst, stopReason(r.doneReason, s.calls > 0))
	dst = append(dst, `,"stop_sequence":null},"usage":{"input_tokens":`...)
	dst = jsonscan.AppendInt(dst, count(r.promptEvalCount))
	dst = append(dst, `,"output_tokens":`...)
	dst = jsonscan.AppendInt(dst, count(r.evalCount))
	dst = endEvent(append(dst, '}'))
	return endEvent(sse(dst, "message_stop")), nil
}

// openBlock makes kind the open block, closing another one first.
func (s *MessagesStream) openBlock(dst []byte, kind blockKind) []byte {
	if s.open == kind {
		return dst
	}
	dst = s.closeBlock(dst)
	s.open = kind
	dst = s.index(sse(dst, "content_block_start"))
	if kind == blockThinking {
		dst = append(dst, `,"content_block":{"type":"thinking","thinking":"","signature":""}`...)
	} else {
		dst = append(dst, `,"content_block":{"type":"text","text":""}`...)
	}
	return endEvent(dst)
}

// closeBlock ends the open block, if any.
func (s *MessagesStream) closeBlock(dst []byte) []byte {
	if s.open == blockNone {
		return dst
	}
	s.open = blockNone
	dst = endEvent(s.index(sse(dst, "content_block_stop")))
	s.block++
	return dst
}

// appendError writes an "error" event in Anthropic's shape, which its
// SDKs raise as an error.
func (s *MessagesStream) appendError(dst []byte, e *Error) []byte {
	dst = append(dst, "event: error\ndata: "...)
	dst = e.appendAnthropic(dst)
	return append(dst, "\n\n"...)
}

// Finish ends the conversion once Ollama's stream has ended, as
// Stream.Finish does: nil after the final line, ErrIncomplete (with an
// "error" event appended) when the stream broke off before it, or the
// *Error of an Ollama error line.
func (s *MessagesStream) Finish(dst []byte) ([]byte, error) {
	switch s.state {
	case done:
		return dst, nil
	case failed:
		return dst, s.err
	}
	s.state, s.err = failed, ErrIncomplete
	return s.appendError(dst, errCutOff), ErrIncomplete
}

// Copy converts the whole stream from r to w, flushing after each line's
// events, as Stream.Copy does.
func (s *MessagesStream) Copy(w io.Writer, r io.Reader) error { return copyLines(w, r, s) }
