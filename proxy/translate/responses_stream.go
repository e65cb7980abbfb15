package translate

import (
	"fmt"
	"io"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// ResponsesStream converts Ollama's /api/chat NDJSON stream into the
// Responses API's typed server-sent events, one line at a time, in the
// order OpenAI sends them and its SDKs check:
//
//	response.created, response.in_progress
//	reasoning:  response.output_item.added, response.reasoning_summary_part.added,
//	            response.reasoning_summary_text.delta…, …text.done, …part.done,
//	            response.output_item.done
//	text:       response.output_item.added, response.content_part.added,
//	            response.output_text.delta…, response.output_text.done,
//	            response.content_part.done, response.output_item.done
//	each call:  response.output_item.added, response.function_call_arguments.delta,
//	            response.function_call_arguments.done, response.output_item.done
//	response.completed (also when Ollama stopped at num_predict, as its own /v1/responses answers)
//
// Every event carries a sequence_number counting from 0, and the final
// response repeats the output items with the ids the events gave them
// (OpenAI's SDK checks that they match). An Ollama error line becomes an
// "error" event and ends the stream; see Finish for a stream that breaks
// off. A ResponsesStream is for one response and is not safe for
// concurrent use.
type ResponsesStream struct {
	info ResponsesInfo
	opts ResponseOptions

	id      string
	created int64
	model   []byte
	seq     int64
	state   streamState
	err     error

	// output holds the finished output items, comma-separated, for the
	// final response object.
	output []byte
	items  int
	// open is the item being streamed (a reasoning summary or a message),
	// with its id, output index and the text so far (the inside of a JSON
	// string token: the insides of valid tokens concatenate to a valid one).
	open     openKind
	openID   string
	openText []byte
}

type openKind int

const (
	openNone openKind = iota
	openReasoning
	openMessage
)

// NewResponsesStream returns a converter for the stream answering a
// request that ResponsesRequest translated into info.
func NewResponsesStream(info ResponsesInfo, opts ResponseOptions) *ResponsesStream {
	return &ResponsesStream{info: info, opts: opts}
}

// event starts an SSE event of type typ: "event: typ\ndata: {"type":typ,
// "sequence_number":n". The caller appends the other members and ends it
// with endEvent.
func (s *ResponsesStream) event(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = jsonscan.AppendInt(dst, s.seq)
	s.seq++
	return dst
}

func endEvent(dst []byte) []byte { return append(dst, "}\n\n"...) }

// itemRef appends ,"item_id":…,"output_index":n.
func (s *ResponsesStream) itemRef(dst []byte) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = jsonscan.AppendString(dst, s.openID)
	dst = append(dst, `,"output_index":`...)
	return jsonscan.AppendInt(dst, int64(s.items))
}

// Append converts one line of Ollama's stream and appends the events for
// it to dst. A blank line, or any line after the stream ended, adds
// nothing. A line that is not a JSON object returns an error and adds
// nothing: the proxy should stop reading and call Finish.
func (s *ResponsesStream) Append(dst, line []byte) ([]byte, error) {
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
	if s.model == nil {
		s.id = s.opts.responseID()
		s.created = r.created(&s.opts)
		s.model = append([]byte(nil), r.modelToken(&s.info.Info)...)
		for _, typ := range []string{"response.created", "response.in_progress"} {
			dst = s.event(dst, typ)
			dst = append(dst, `,"response":`...)
			dst = s.info.appendResponseObject(dst, s.id, s.created, s.model, "in_progress", []byte("[]"), nil)
			dst = endEvent(dst)
		}
	}
	if hasText(r.thinking) {
		dst = s.openItem(dst, openReasoning)
		dst = s.event(dst, "response.reasoning_summary_text.delta")
		dst = s.itemRef(dst)
		dst = append(dst, `,"summary_index":0,"delta":`...)
		dst = append(dst, r.thinking...)
		dst = endEvent(dst)
		s.openText = append(s.openText, inside(r.thinking)...)
	}
	if hasText(r.content) {
		dst = s.openItem(dst, openMessage)
		dst = s.event(dst, "response.output_text.delta")
		dst = s.itemRef(dst)
		dst = append(dst, `,"content_index":0,"delta":`...)
		dst = append(dst, r.content...)
		dst = append(dst, `,"logprobs":[]`...)
		dst = endEvent(dst)
		s.openText = append(s.openText, inside(r.content)...)
	}
	for _, c := range replyCalls(r.toolCalls, &s.opts) {
		dst = s.closeItem(dst)
		dst = s.appendCall(dst, &c)
	}
	if !r.done {
		return dst, nil
	}
	dst = s.closeItem(dst)
	s.state = done
	status := responseStatus(r.doneReason)
	dst = s.event(dst, "response."+status)
	dst = append(dst, `,"response":`...)
	output := append(append([]byte{'['}, s.output...), ']')
	dst = s.info.appendResponseObject(dst, s.id, s.created, s.model, status, output, r.appendResponsesUsage(nil))
	return endEvent(dst), nil
}

// openItem makes kind the open item, closing another one first.
func (s *ResponsesStream) openItem(dst []byte, kind openKind) []byte {
	if s.open == kind {
		return dst
	}
	dst = s.closeItem(dst)
	s.open, s.openText = kind, s.openText[:0]
	dst = s.event(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = jsonscan.AppendInt(dst, int64(s.items))
	dst = append(dst, `,"item":`...)
	if kind == openReasoning {
		s.openID = s.opts.newID("rs_")
		dst = append(dst, `{"id":`...)
		dst = jsonscan.AppendString(dst, s.openID)
		dst = append(dst, `,"type":"reasoning","summary":[]}`...)
		dst = endEvent(dst)
		dst = s.event(dst, "response.reasoning_summary_part.added")
		dst = s.itemRef(dst)
		dst = append(dst, `,"summary_index":0,"part":{"type":"summary_text","text":""}`...)
		return endEvent(dst)
	}
	s.openID = s.opts.newID("msg_")
	dst = appendMessageItem(dst, s.openID, "in_progress", nil, false)
	dst = endEvent(dst)
	dst = s.event(dst, "response.content_part.added")
	dst = s.itemRef(dst)
	dst = append(dst, `,"content_index":0,"part":`...)
	dst = appendOutputText(dst, nil)
	return endEvent(dst)
}

// closeItem finishes the open item, if any, with its done events, and
// adds it to the output.
func (s *ResponsesStream) closeItem(dst []byte) []byte {
	var item []byte
	switch s.open {
	case openNone:
		return dst
	case openReasoning:
		dst = s.event(dst, "response.reasoning_summary_text.done")
		dst = s.itemRef(dst)
		dst = append(dst, `,"summary_index":0,"text":"`...)
		dst = append(dst, s.openText...)
		dst = endEvent(append(dst, '"'))
		dst = s.event(dst, "response.reasoning_summary_part.done")
		dst = s.itemRef(dst)
		dst = append(dst, `,"summary_index":0,"part":{"type":"summary_text","text":"`...)
		dst = append(dst, s.openText...)
		dst = endEvent(append(dst, `"}`...))
		item = appendReasoningItem(nil, s.openID, s.openText)
	case openMessage:
		dst = s.event(dst, "response.output_text.done")
		dst = s.itemRef(dst)
		dst = append(dst, `,"content_index":0,"text":"`...)
		dst = append(dst, s.openText...)
		dst = endEvent(append(dst, `","logprobs":[]`...))
		dst = s.event(dst, "response.content_part.done")
		dst = s.itemRef(dst)
		dst = append(dst, `,"content_index":0,"part":`...)
		dst = endEvent(appendOutputText(dst, s.openText))
		item = appendMessageItem(nil, s.openID, "completed", s.openText, true)
	}
	dst = s.event(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = jsonscan.AppendInt(dst, int64(s.items))
	dst = append(dst, `,"item":`...)
	dst = append(dst, item...)
	s.addOutput(item)
	s.open = openNone
	s.items++
	return endEvent(dst)
}

// addOutput appends a finished item to the final output.
func (s *ResponsesStream) addOutput(item []byte) {
	if len(s.output) > 0 {
		s.output = append(s.output, ',')
	}
	s.output = append(s.output, item...)
}

// appendCall writes the events of one whole function call: Ollama sends
// each call complete, so its arguments are one delta.
func (s *ResponsesStream) appendCall(dst []byte, c *replyCall) []byte {
	s.openID = s.opts.newID("fc_")
	dst = s.event(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = jsonscan.AppendInt(dst, int64(s.items))
	dst = append(dst, `,"item":`...)
	dst = appendFunctionCallItem(dst, s.openID, "in_progress", c, []byte(`""`))
	dst = endEvent(dst)
	dst = s.event(dst, "response.function_call_arguments.delta")
	dst = s.itemRef(dst)
	dst = append(dst, `,"delta":`...)
	dst = endEvent(append(dst, c.args...))
	dst = s.event(dst, "response.function_call_arguments.done")
	dst = s.itemRef(dst)
	dst = append(dst, `,"name":`...)
	dst = append(dst, c.name...)
	dst = append(dst, `,"arguments":`...)
	dst = endEvent(append(dst, c.args...))
	item := appendFunctionCallItem(nil, s.openID, "completed", c, c.args)
	s.addOutput(item)
	dst = s.event(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = jsonscan.AppendInt(dst, int64(s.items))
	dst = append(dst, `,"item":`...)
	s.items++
	return endEvent(append(dst, item...))
}

// appendError writes an "error" event: {"type":"error","code","message",
// "param"}, which OpenAI's SDKs raise as an error.
func (s *ResponsesStream) appendError(dst []byte, e *Error) []byte {
	dst = s.event(dst, "error")
	dst = append(dst, `,"code":`...)
	dst = appendNullable(dst, e.Code)
	dst = append(dst, `,"message":`...)
	dst = jsonscan.AppendString(dst, e.Message)
	dst = append(dst, `,"param":`...)
	dst = appendNullable(dst, e.Param)
	return endEvent(dst)
}

// Finish ends the conversion once Ollama's stream has ended, as
// Stream.Finish does: nil after the final line, ErrIncomplete (with an
// "error" event, code "stream_incomplete", appended) when the stream broke
// off before it, or the *Error of an Ollama error line.
func (s *ResponsesStream) Finish(dst []byte) ([]byte, error) {
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
func (s *ResponsesStream) Copy(w io.Writer, r io.Reader) error { return copyLines(w, r, s) }
