package translate

import (
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// responseID is the response id: opts.ID, else resp_<random>.
func (o *ResponseOptions) responseID() string {
	if o.ID != "" {
		return o.ID
	}
	return o.newID("resp_")
}

// orDefault returns tok, or def when tok is absent.
func orDefault(tok []byte, def string) []byte {
	if tok == nil {
		return []byte(def)
	}
	return tok
}

// appendResponseObject writes a Responses "response" object. output is the
// JSON array of output items, usage the usage object or nil (null while
// the response is in progress). The request values the object repeats are
// echoed as the client sent them, with OpenAI's defaults when absent.
func (info *ResponsesInfo) appendResponseObject(dst []byte, id string, created int64, model []byte, status string, output, usage []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, id)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = jsonscan.AppendInt(dst, created)
	dst = append(dst, `,"completed_at":`...)
	if status == "in_progress" {
		dst = append(dst, "null"...)
	} else {
		dst = jsonscan.AppendInt(dst, created)
	}
	dst = append(dst, `,"status":`...)
	dst = jsonscan.AppendString(dst, status)
	dst = append(dst, `,"error":null,"incomplete_details":`...)
	if status == "incomplete" {
		dst = append(dst, `{"reason":"max_output_tokens"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"instructions":`...)
	dst = append(dst, orDefault(info.instructions, "null")...)
	dst = append(dst, `,"max_output_tokens":`...)
	dst = append(dst, orDefault(info.maxOutputTokens, "null")...)
	dst = append(dst, `,"model":`...)
	dst = append(dst, model...)
	dst = append(dst, `,"output":`...)
	dst = append(dst, output...)
	dst = append(dst, `,"parallel_tool_calls":`...)
	dst = append(dst, orDefault(info.parallelToolCalls, "true")...)
	dst = append(dst, `,"previous_response_id":null,"reasoning":`...)
	dst = append(dst, orDefault(info.reasoning, `{"effort":null,"summary":null}`)...)
	dst = append(dst, `,"store":false,"temperature":`...)
	dst = append(dst, orDefault(info.temperature, "1")...)
	dst = append(dst, `,"text":{"format":`...)
	dst = append(dst, orDefault(info.format, `{"type":"text"}`)...)
	dst = append(dst, `},"tool_choice":`...)
	dst = append(dst, orDefault(info.toolChoice, `"auto"`)...)
	dst = append(dst, `,"tools":`...)
	dst = append(dst, orDefault(info.tools, "[]")...)
	dst = append(dst, `,"top_p":`...)
	dst = append(dst, orDefault(info.topP, "1")...)
	// The members OpenAI's response object always has, at the values
	// that mean "not used", as Ollama's own Responses layer sends them.
	dst = append(dst, `,"background":false,"frequency_penalty":0,"presence_penalty":0,"max_tool_calls":null,`+
		`"prompt_cache_key":null,"safety_identifier":null,"service_tier":"default","top_logprobs":0`...)
	dst = append(dst, `,"truncation":"disabled","usage":`...)
	dst = append(dst, orDefault(usage, "null")...)
	dst = append(dst, `,"metadata":`...)
	dst = append(dst, orDefault(info.metadata, "{}")...)
	return append(dst, '}')
}

// appendResponsesUsage writes the Responses usage object.
func (r *reply) appendResponsesUsage(dst []byte) []byte {
	in, out := count(r.promptEvalCount), count(r.evalCount)
	dst = append(dst, `{"input_tokens":`...)
	dst = jsonscan.AppendInt(dst, in)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":0},"output_tokens":`...)
	dst = jsonscan.AppendInt(dst, out)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	dst = jsonscan.AppendInt(dst, in+out)
	return append(dst, '}')
}

// responseStatus is "completed", also when Ollama stopped at num_predict:
// Ollama's own /v1/responses never reports a reply incomplete, and Codex,
// which stops with an error on "incomplete", must run on ctxproxy as on
// Ollama.
func responseStatus([]byte) string { return "completed" }

// appendReasoningItem writes a reasoning output item; text is the inside
// of a JSON string token.
func appendReasoningItem(dst []byte, id string, text []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, id)
	dst = append(dst, `,"type":"reasoning","summary":[{"type":"summary_text","text":"`...)
	dst = append(dst, text...)
	return append(dst, `"}]}`...)
}

// appendMessageItem writes an assistant message output item; text is the
// inside of a JSON string token.
func appendMessageItem(dst []byte, id, status string, text []byte, parts bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, id)
	dst = append(dst, `,"type":"message","status":`...)
	dst = jsonscan.AppendString(dst, status)
	dst = append(dst, `,"role":"assistant","content":[`...)
	if parts {
		dst = appendOutputText(dst, text)
	}
	return append(dst, "]}"...)
}

// appendOutputText writes an output_text content part.
func appendOutputText(dst, text []byte) []byte {
	dst = append(dst, `{"type":"output_text","text":"`...)
	dst = append(dst, text...)
	return append(dst, `","annotations":[],"logprobs":[]}`...)
}

// appendFunctionCallItem writes a function_call output item; args is a
// JSON string token of the arguments.
func appendFunctionCallItem(dst []byte, id, status string, c *replyCall, args []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendString(dst, id)
	dst = append(dst, `,"type":"function_call","status":`...)
	dst = jsonscan.AppendString(dst, status)
	dst = append(dst, `,"call_id":`...)
	dst = append(dst, c.id...)
	dst = append(dst, `,"name":`...)
	dst = append(dst, c.name...)
	dst = append(dst, `,"arguments":`...)
	dst = append(dst, args...)
	return append(dst, '}')
}

// replyCall is one tool call of an Ollama reply: id and name as JSON
// string tokens (an id made up when Ollama sent none), args as a JSON
// string token holding the arguments object.
type replyCall struct{ id, name, args, object []byte }

// replyCalls reads an Ollama reply's tool calls.
func replyCalls(raw []byte, opts *ResponseOptions) []replyCall {
	var out []replyCall
	if !hasToolCalls(raw) {
		return nil
	}
	_ = jsonscan.Elements(raw, func(_ int, tc []byte) error {
		if jsonscan.KindOf(tc) != jsonscan.KindObject {
			return nil
		}
		f := fields(tc)
		var c replyCall
		c.id = f["id"]
		if !hasText(c.id) {
			c.id = jsonscan.AppendString(nil, opts.newID("call_"))
		}
		c.name, c.object = []byte(`""`), []byte("{}")
		if fn := f["function"]; jsonscan.KindOf(fn) == jsonscan.KindObject {
			ff := fields(fn)
			if jsonscan.KindOf(ff["name"]) == jsonscan.KindString {
				c.name = ff["name"]
			}
			if a := ff["arguments"]; a != nil {
				c.object = a
			}
		}
		c.args = jsonscan.AppendStringBytes(nil, c.object)
		out = append(out, c)
		return nil
	})
	return out
}

// inside returns the inside of a JSON string token ("" for anything else).
func inside(tok []byte) []byte {
	if jsonscan.KindOf(tok) != jsonscan.KindString {
		return nil
	}
	return tok[1 : len(tok)-1]
}

// ResponsesResponse translates a whole (non-stream) Ollama /api/chat answer
// into a Responses API response object: a reasoning item for Ollama's
// thinking, a message item with the text, then one function_call item per
// tool call. The proxy calls it on a 2xx answer; for a non-2xx answer it
// calls BackendError. Errors are *Error, as Response's.
func ResponsesResponse(body []byte, info ResponsesInfo, opts ResponseOptions) ([]byte, error) {
	r, err := parseReply(body)
	if err != nil {
		return nil, errUnreadable
	}
	if r.errorMessage != nil {
		return nil, BackendError(0, body)
	}
	calls := replyCalls(r.toolCalls, &opts)
	id := opts.responseID()
	output := make([]byte, 0, len(body)+256)
	output = append(output, '[')
	n := 0
	sep := func() {
		if n > 0 {
			output = append(output, ',')
		}
		n++
	}
	if hasText(r.thinking) {
		sep()
		output = appendReasoningItem(output, opts.newID("rs_"), inside(r.thinking))
	}
	if hasText(r.content) || len(calls) == 0 {
		sep()
		output = appendMessageItem(output, opts.newID("msg_"), "completed", inside(r.content), true)
	}
	for i := range calls {
		sep()
		output = appendFunctionCallItem(output, opts.newID("fc_"), "completed", &calls[i], calls[i].args)
	}
	output = append(output, ']')
	usage := r.appendResponsesUsage(nil)
	return info.appendResponseObject(nil, id, r.created(&opts), r.modelToken(&info.Info), responseStatus(r.doneReason), output, usage), nil
}
