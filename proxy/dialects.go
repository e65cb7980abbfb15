package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// The two conversation dialects beside chat: the OpenAI Responses API
// (POST /v1/responses) and the Anthropic Messages API (POST /v1/messages).
// Their requests are read as a translate.Conversation: the messages are
// counted, trimmed and recorded as the chat routes' are, and
// Conversation.Encode writes the body back with only input / messages
// (and instructions / system) changed. Bound for Ollama, the encoded body
// is translated to /api/chat (num_ctx, truncate:false) and the answer
// back; bound for any other backend it is forwarded in its own dialect.

// decodeBody validates body, nested at most depth levels deep, and decodes
// it as a request of dialect d, its member names read by rules. Its error
// is jsonscan's when body is not valid JSON within depth (ErrDepth among
// them), an *ambiguousError, or one wrapping errNotChat; ErrDepth and an
// ambiguous body are refused, any other error means the request should be
// forwarded unchanged.
func decodeBody(d Dialect, body []byte, depth int, rules keyRules) (*chatRequest, error) {
	if d != Responses && d != Messages {
		return decodeChatDepth(d, body, depth, rules)
	}
	ms, err := validMembers(body, depth)
	if err != nil {
		return nil, err
	}
	if ms == nil {
		return nil, fmt.Errorf("%w: %v", errNotChat, errNotObject)
	}
	if body, err = resolveConversation(d, body, ms, rules); err != nil {
		return nil, err
	}
	return decodeConversation(d, body)
}

// resolveConversation returns a Responses or Messages body with the names
// of its top level, and of each item of its conversation, resolved by
// rules (resolveNames); body itself when none needed it. The decoders of
// package translate then read exact names.
func resolveConversation(d Dialect, body []byte, ms []member, rules keyRules) ([]byte, error) {
	resolved, err := resolveNames(body, ms, requestFields(d), rules)
	if err != nil {
		return nil, err
	}
	if resolved != nil {
		body = resolved
		if ms, err = members(body); err != nil {
			return nil, err
		}
	}
	list := "messages"
	if d == Responses {
		list = "input"
	}
	m, ok := findMember(ms, list)
	if !ok || body[m.valueStart] != '[' {
		return body, nil
	}
	arr := body[m.valueStart:m.end]
	var items [][]byte
	changed := false
	err = jsonscan.Elements(arr, func(_ int, item []byte) error {
		if jsonscan.KindOf(item) == jsonscan.KindObject {
			ims, err := members(item)
			if err != nil {
				return err
			}
			fixed, err := resolveNames(item, ims, messageFields(d), rules)
			if err != nil {
				return err
			}
			if fixed != nil {
				item, changed = fixed, true
			}
		}
		items = append(items, item)
		return nil
	})
	if err != nil || !changed {
		return body, err
	}
	out := append([]byte{'['}, bytes.Join(items, []byte{','})...)
	return replaceValue(body, m, append(out, ']')), nil
}

// decodeConversation reads a Responses or Messages request: the
// conversation from package translate, and the few top-level members
// that shape the prompt (think, reasoning, thinking, options) or name
// state the backend keeps.
func decodeConversation(d Dialect, body []byte) (*chatRequest, error) {
	var conv *translate.Conversation
	var err error
	if d == Responses {
		conv, err = translate.DecodeResponses(body)
	} else {
		conv, err = translate.DecodeMessages(body)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotChat, err)
	}
	req := &chatRequest{dialect: d, body: body, model: conv.Model, stream: conv.Stream, messages: conv.Messages,
		annotated: conv.Annotated, tools: conv.Tools, maxOutput: conv.MaxOutput,
		firstSystem: conv.FirstSystem, firstUser: conv.FirstUser, conv: conv}
	ms, err := members(body) // DecodeResponses / DecodeMessages validated it
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotChat, err)
	}
	for _, m := range ms {
		v := body[m.valueStart:m.end]
		if bytes.Equal(v, []byte("null")) {
			continue
		}
		switch m.key {
		case "options":
			maxOut := req.maxOutput
			req.decodeOptions(v)
			if maxOut > 0 {
				req.maxOutput = maxOut
			}
		case "think":
			req.think = v
		case "reasoning": // Responses: {"effort": …}
			var r struct {
				Effort string `json:"effort"`
			}
			if json.Unmarshal(v, &r) == nil {
				req.effort = r.Effort
			}
		case "thinking": // Messages: {"type": "enabled" | "adaptive" | "disabled"}
			var t struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(v, &t) == nil && req.think == nil {
				switch t.Type {
				case "enabled", "adaptive":
					req.think = json.RawMessage("true")
				case "disabled":
					req.think = json.RawMessage("false")
				}
			}
		case "conversation", "prompt":
			if d == Responses {
				req.serverState = m.key
			}
		}
	}
	if conv.PreviousResponseID != "" {
		req.serverState = "previous_response_id"
	}
	if d == Responses && req.serverState == "" {
		for _, msg := range req.messages {
			if isItemReference(msg.Raw) {
				req.serverState = "item_reference"
				break
			}
		}
	}
	return req, nil
}

// isItemReference reports whether raw is a Responses item_reference item.
func isItemReference(raw []byte) bool {
	if len(raw) == 0 || raw[0] != '{' || !bytes.Contains(raw, []byte("item_reference")) {
		return false
	}
	ms, err := members(raw)
	if err != nil {
		return false
	}
	t, ok := findMember(ms, "type")
	return ok && string(raw[t.valueStart:t.end]) == `"item_reference"`
}

// encodeConversation writes the conversation p forwards back into the
// request's own dialect; the body as sent when nothing changed.
func encodeConversation(log *slog.Logger, req *chatRequest, p *plan) []byte {
	if !p.changed && !req.annotated {
		return req.body
	}
	body, err := req.conv.Encode(p.messages)
	if err != nil {
		log.Error("re-encoding the request failed; forwarding it as sent", "err", err)
		return req.body
	}
	return body
}

// lineConverter turns Ollama NDJSON lines into the client's stream
// (translate.Stream, ResponsesStream, MessagesStream).
type lineConverter interface {
	Append(dst, line []byte) ([]byte, error)
	Finish(dst []byte) ([]byte, error)
}

// replyTranslator carries Ollama's answer to a translated request back
// into the client's dialect.
type replyTranslator interface {
	streamed() bool
	dropped() []translate.Drop
	// errorJSON is a translation error in the dialect's error shape.
	errorJSON(e *translate.Error) []byte
	// whole translates a whole /api/chat answer.
	whole(body []byte) ([]byte, error)
	// lines returns a converter for a streamed answer.
	lines() lineConverter
}

type openaiReply struct{ info translate.Info }

func (r openaiReply) streamed() bool                      { return r.info.Stream }
func (r openaiReply) dropped() []translate.Drop           { return r.info.Dropped }
func (r openaiReply) errorJSON(e *translate.Error) []byte { return e.JSON() }
func (r openaiReply) whole(body []byte) ([]byte, error) {
	return translate.Response(body, r.info, translate.ResponseOptions{})
}
func (r openaiReply) lines() lineConverter {
	return translate.NewStream(r.info, translate.ResponseOptions{})
}

type responsesReply struct{ info translate.ResponsesInfo }

func (r responsesReply) streamed() bool                      { return r.info.Stream }
func (r responsesReply) dropped() []translate.Drop           { return r.info.Dropped }
func (r responsesReply) errorJSON(e *translate.Error) []byte { return e.JSON() }
func (r responsesReply) whole(body []byte) ([]byte, error) {
	return translate.ResponsesResponse(body, r.info, translate.ResponseOptions{})
}
func (r responsesReply) lines() lineConverter {
	return translate.NewResponsesStream(r.info, translate.ResponseOptions{})
}

type messagesReply struct{ info translate.MessagesInfo }

func (r messagesReply) streamed() bool                      { return r.info.Stream }
func (r messagesReply) dropped() []translate.Drop           { return r.info.Dropped }
func (r messagesReply) errorJSON(e *translate.Error) []byte { return e.AnthropicJSON() }
func (r messagesReply) whole(body []byte) ([]byte, error) {
	return translate.MessagesResponse(body, r.info, translate.ResponseOptions{})
}
func (r messagesReply) lines() lineConverter {
	return translate.NewMessagesStream(r.info, translate.ResponseOptions{})
}

// toOllamaChat translates a request body of dialect d (OpenAI chat,
// Responses or Messages) into an Ollama /api/chat body with numCtx.
// inputTokens is ctxproxy's count of the prompt, which a Messages stream
// shows in message_start. The replyTranslator is usable even with an
// error, for its error shape.
func toOllamaChat(d Dialect, body []byte, numCtx, inputTokens int) ([]byte, replyTranslator, error) {
	opts := translate.RequestOptions{NumCtx: numCtx}
	switch d {
	case Responses:
		out, info, err := translate.ResponsesRequest(body, opts)
		return out, responsesReply{info}, err
	case Messages:
		out, info, err := translate.MessagesRequest(body, opts)
		info.InputTokens = inputTokens
		return out, messagesReply{info}, err
	}
	out, info, err := translate.Request(body, opts)
	return out, openaiReply{info}, err
}

// translationError is a translation failure as the client's error.
func translationError(rt replyTranslator, err error) *apiError {
	var te *translate.Error
	if errors.As(err, &te) {
		return &apiError{status: te.Status, message: te.Message, code: te.Code, raw: rt.errorJSON(te)}
	}
	return &apiError{status: http.StatusBadRequest, message: err.Error()}
}

// exactPrompt is an exact counter of one request's prompt.
type exactPrompt interface {
	promptCounter
	failed() error
}

func (c *exactCounter) failed() error { return c.err }

// exactFor returns the exact counter of req's prompt for model: for chat
// the messages as sent, for the conversation dialects the messages of
// the /api/chat body they are translated to, which is what Ollama
// renders and evaluates.
func exactFor(model *exact.Model, req *chatRequest) exactPrompt {
	if req.conv == nil {
		return newExactCounter(model, req)
	}
	c := &dialectCounter{req: req}
	oreq, err := c.ollama(req.body)
	if err != nil {
		c.exactCounter = &exactCounter{model: model, err: err}
		return c
	}
	c.exactCounter = newExactCounter(model, oreq)
	return c
}

// dialectCounter counts a Responses or Messages prompt exactly: each
// prompt it is asked about is encoded, translated to /api/chat and
// counted as Ollama will render it. A message's own share (what the
// strategies weigh) is counted from its dialect-neutral fields; the cut
// loop checks the whole prompt, so the two need only be close.
type dialectCounter struct {
	*exactCounter
	req *chatRequest
}

func (c *dialectCounter) ollama(body []byte) (*chatRequest, error) {
	out, _, err := toOllamaChat(c.req.dialect, body, 0, 0)
	if err != nil {
		return nil, err
	}
	return decodeChat(Ollama, out)
}

// Prompt counts msgs as the translated request's messages.
func (c *dialectCounter) Prompt(msgs []rewrite.Message, tools json.RawMessage) budget.Estimate {
	body, err := c.req.conv.Encode(msgs)
	var oreq *chatRequest
	if err == nil {
		oreq, err = c.ollama(body)
	}
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return budget.Estimate{Exact: true}
	}
	return c.exactCounter.Prompt(oreq.messages, tools)
}

// storedMessages converts what a session records. The conversation
// dialects' messages are stored as Ollama chat messages (role, content,
// tool_calls, tool_call_id), with the dialect in the metadata: the
// session's export, compress and restore read every session alike.
func storedMessages(d Dialect, msgs []rewrite.Message) []snapshots.Message {
	if d != Responses && d != Messages {
		return toStored(msgs)
	}
	out := toStored(chatShaped(msgs))
	for i := range out {
		out[i].Metadata = map[string]any{"dialect": d.String()}
	}
	return out
}

// chatShaped returns msgs with Raw in Ollama's chat shape.
func chatShaped(msgs []rewrite.Message) []rewrite.Message {
	out := make([]rewrite.Message, len(msgs))
	for i, m := range msgs {
		m.Edited = false
		if m.Raw != nil {
			m.Raw = chatMessage(&m)
		}
		out[i] = m
	}
	return out
}

func chatMessage(m *rewrite.Message) json.RawMessage {
	out := append([]byte(`{"role":`), jsonscan.AppendString(nil, m.Role)...)
	out = append(out, `,"content":`...)
	out = jsonscan.AppendString(out, m.Content)
	if len(m.ToolCalls) > 0 {
		out = append(out, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"id":`...)
			out = jsonscan.AppendString(out, tc.ID)
			out = append(out, `,"function":{"name":`...)
			out = jsonscan.AppendString(out, tc.Name)
			out = append(out, `,"arguments":`...)
			args := []byte(tc.Arguments)
			if v, err := jsonscan.Valid(args); err != nil || jsonscan.KindOf(v) != jsonscan.KindObject {
				args = []byte("{}")
			}
			out = append(out, args...)
			out = append(out, "}}"...)
		}
		out = append(out, ']')
	}
	if m.ToolCallID != "" {
		out = append(out, `,"tool_call_id":`...)
		out = jsonscan.AppendString(out, m.ToolCallID)
	}
	return append(out, '}')
}

// writeDialectAnswer writes text as the assistant's complete answer (an
// in-band command's) in a conversation dialect's shape, streamed or not,
// by translating an Ollama answer as a backend reply is translated.
func writeDialectAnswer(w http.ResponseWriter, req *chatRequest, text string) {
	_, rt, err := toOllamaChat(req.dialect, req.body, 0, 0)
	if err != nil {
		info := translate.Info{Model: req.model, Stream: req.stream}
		if req.dialect == Responses {
			rt = responsesReply{translate.ResponsesInfo{Info: info}}
		} else {
			rt = messagesReply{translate.MessagesInfo{Info: info}}
		}
	}
	line := func(content string, done bool) []byte {
		l := map[string]any{"model": req.model, "created_at": time.Now().UTC().Format(time.RFC3339Nano),
			"message": map[string]string{"role": "assistant", "content": content}, "done": done}
		if done {
			l["done_reason"], l["prompt_eval_count"], l["eval_count"] = "stop", 0, 0
		}
		b, _ := json.Marshal(l)
		return b
	}
	h := w.Header()
	if !rt.streamed() {
		out, err := rt.whole(line(text, true))
		if err != nil {
			writeError(w, req.dialect, apiError{status: http.StatusInternalServerError, message: "ctxproxy could not write its answer"})
			return
		}
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		return
	}
	lc := rt.lines()
	out, _ := lc.Append(nil, line(text, false))
	out, _ = lc.Append(out, line("", true))
	out, _ = lc.Finish(out)
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// continueServerState handles a Responses request that continues state
// the backend keeps (previous_response_id, conversation, prompt,
// item_reference). Bound for Ollama, which keeps none and would answer as
// if the conversation were new, it is refused with the translation's 400
// unsupported_parameter. Bound for another backend it is forwarded as
// sent and not trimmed: the window holds context ctxproxy cannot count.
// The session records it as a turn appended to what it holds.
func continueServerState(log *slog.Logger, ex *exchange, req *chatRequest, p *plan, ollama bool) ([]byte, *apiError) {
	if p.translate || ollama {
		if _, rt, err := toOllamaChat(req.dialect, req.body, 0, 0); err != nil {
			return nil, translationError(rt, err)
		}
		return nil, &apiError{status: http.StatusBadRequest, code: "unsupported_parameter",
			message: req.serverState + " refers to state kept by the server, and Ollama keeps none: send the whole conversation in input"}
	}
	p.accum, p.newTurn = true, req.messages
	ex.headers.Set("X-Ctxproxy-Notice", "Not counted or trimmed: "+req.serverState+
		" continues a conversation the backend keeps, which ctxproxy cannot see.")
	return encodeConversation(log, req, p), nil
}
