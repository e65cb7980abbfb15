package proxy

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// The two conversation dialects beside chat: the OpenAI Responses API
// (POST /v1/responses) and the Anthropic Messages API (POST /v1/messages).
// Their requests are read as a translate.Conversation: the messages are
// counted, trimmed and recorded as the chat routes' are, and
// Conversation.Encode writes the body back with only input / messages
// (and instructions / system) changed. Bound for Ollama, the encoded body
// is translated to /api/chat (num_ctx, truncate:false) and the answer
// back; bound for any other backend it is forwarded in its own dialect.

// encodeConversation writes the conversation p forwards back into the
// request's own dialect; the body as sent when nothing changed.
func encodeConversation(log *slog.Logger, req *wire.Request, p *plan) []byte {
	if !p.changed && !req.Annotated {
		return req.Body
	}
	body, err := req.Conv.Encode(p.messages)
	if err != nil {
		log.Error("re-encoding the request failed; forwarding it as sent", "err", err)
		return req.Body
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
func toOllamaChat(d wire.Dialect, body []byte, numCtx, inputTokens int) ([]byte, replyTranslator, error) {
	opts := translate.RequestOptions{NumCtx: numCtx}
	switch d {
	case wire.Responses:
		out, info, err := translate.ResponsesRequest(body, opts)
		return out, responsesReply{info}, err
	case wire.Messages:
		out, info, err := translate.MessagesRequest(body, opts)
		info.InputTokens = inputTokens
		return out, messagesReply{info}, err
	}
	out, info, err := translate.Request(body, opts)
	return out, openaiReply{info}, err
}

// translationError is a translation failure as the client's error.
func translationError(rt replyTranslator, err error) *wire.Error {
	var te *translate.Error
	if errors.As(err, &te) {
		return &wire.Error{Status: te.Status, Message: te.Message, Code: te.Code, Raw: rt.errorJSON(te)}
	}
	return &wire.Error{Status: http.StatusBadRequest, Message: err.Error()}
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
func exactFor(model *exact.Model, req *wire.Request) exactPrompt {
	if req.Conv == nil {
		return newExactCounter(model, req)
	}
	c := &dialectCounter{req: req}
	oreq, err := c.ollama(req.Body)
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
	req *wire.Request
}

func (c *dialectCounter) ollama(body []byte) (*wire.Request, error) {
	out, _, err := toOllamaChat(c.req.Dialect, body, 0, 0)
	if err != nil {
		return nil, err
	}
	return wire.DecodeChat(wire.Ollama, out)
}

// Prompt counts msgs as the translated request's messages.
func (c *dialectCounter) Prompt(msgs []rewrite.Message, tools json.RawMessage) budget.Estimate {
	body, err := c.req.Conv.Encode(msgs)
	var oreq *wire.Request
	if err == nil {
		oreq, err = c.ollama(body)
	}
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return budget.Estimate{Exact: true}
	}
	return c.exactCounter.Prompt(oreq.Messages, tools)
}

// writeDialectAnswer writes text as the assistant's complete answer (an
// in-band command's) in a conversation dialect's shape, streamed or not,
// by translating an Ollama answer as a backend reply is translated.
func writeDialectAnswer(w http.ResponseWriter, req *wire.Request, text string) {
	_, rt, err := toOllamaChat(req.Dialect, req.Body, 0, 0)
	if err != nil {
		info := translate.Info{Model: req.Model, Stream: req.Stream}
		if req.Dialect == wire.Responses {
			rt = responsesReply{translate.ResponsesInfo{Info: info}}
		} else {
			rt = messagesReply{translate.MessagesInfo{Info: info}}
		}
	}
	line := func(content string, done bool) []byte {
		l := map[string]any{"model": req.Model, "created_at": time.Now().UTC().Format(time.RFC3339Nano),
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
			wire.WriteError(w, req.Dialect, wire.Error{Status: http.StatusInternalServerError, Message: "ctxproxy could not write its answer"})
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
func continueServerState(log *slog.Logger, ex *exchange, req *wire.Request, p *plan, ollama bool) ([]byte, *wire.Error) {
	if p.translate || ollama {
		if _, rt, err := toOllamaChat(req.Dialect, req.Body, 0, 0); err != nil {
			return nil, translationError(rt, err)
		}
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: "unsupported_parameter",
			Message: req.ServerState + " refers to state kept by the server, and Ollama keeps none: send the whole conversation in input"}
	}
	p.accum, p.newTurn = true, req.Messages
	ex.headers.Set("X-Ctxproxy-Notice", "Not counted or trimmed: "+req.ServerState+
		" continues a conversation the backend keeps, which ctxproxy cannot see.")
	return encodeConversation(log, req, p), nil
}
