package plan

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ollama/ollama/api"
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
func encodeConversation(log *slog.Logger, p *Plan) []byte {
	req := p.req
	if !p.Changed && !req.Annotated {
		return req.Body
	}
	body, err := req.Conv.Encode(p.Messages)
	if err != nil {
		log.Error("re-encoding the request failed; forwarding it as sent", "err", err)
		return req.Body
	}
	return body
}

// exactPrompt is an exact counter of one request's prompt.
type exactPrompt interface {
	Counter
	Err() error
	// shape names what the last prompt counted had (ExactCounter.shape).
	shape() string
	Approximate() bool
	Counted() (exact.Prompt, bool)
	// useServer renders on the server what only it renders exactly.
	useServer(render func(exact.Prompt) (string, error))
}

func (c *ExactCounter) prompt() exact.Prompt {
	return exact.Prompt{Messages: c.last, Tools: c.tools, Think: c.think, Images: slices.Concat(c.images...)}
}

// shape names what the last prompt counted had that a model's template or
// renderer may treat apart: "tools", "thinking", "images", joined by "+",
// or "plain". Exact counts that disagree with the backend's are turned
// off for one shape at a time (backend.Details.Observe).
func (c *ExactCounter) shape() string {
	var parts []string
	if len(c.tools) > 0 {
		parts = append(parts, "tools")
	}
	if c.think != nil || slices.ContainsFunc(c.last, func(m api.Message) bool { return m.Thinking != "" }) {
		parts = append(parts, "thinking")
	}
	if slices.ContainsFunc(c.last, func(m api.Message) bool { return len(m.Images) > 0 }) {
		parts = append(parts, "images")
	}
	if len(parts) == 0 {
		return "plain"
	}
	return strings.Join(parts, "+")
}

// exactFor returns the exact counter of req's prompt for model: for chat
// the messages as sent, for the conversation dialects the messages of
// the /api/chat body they are translated to, which is what Ollama
// renders and evaluates.
func exactFor(model *exact.Tokenizer, req *wire.Request, opts translate.RequestOptions) exactPrompt {
	if req.Conv == nil {
		return NewExact(model, req)
	}
	c := &dialectCounter{req: req, opts: opts}
	oreq, err := c.ollama(req.Body)
	if err != nil {
		c.ExactCounter = &ExactCounter{model: model, err: err}
		return c
	}
	c.ExactCounter = NewExact(model, oreq)
	return c
}

// dialectCounter counts a Responses or Messages prompt exactly: each
// prompt it is asked about is encoded, translated to /api/chat and
// counted as Ollama will render it. A message's own share (what the
// strategies weigh) is counted from its dialect-neutral fields; the cut
// loop checks the whole prompt, so the two need only be close.
type dialectCounter struct {
	*ExactCounter
	req  *wire.Request
	opts translate.RequestOptions // as the request will be translated
}

func (c *dialectCounter) ollama(body []byte) (*wire.Request, error) {
	out, _, err := wire.ToOllama(c.req.Dialect, body, c.opts, 0)
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
	return c.ExactCounter.Prompt(oreq.Messages, tools)
}

// continueServerState handles a Responses request that continues state
// the backend keeps (previous_response_id, conversation, prompt,
// item_reference). Bound for Ollama, which keeps none and would answer as
// if the conversation were new, it is refused with the translation's 400
// unsupported_parameter. Bound for another backend it is forwarded as
// sent and not trimmed: the window holds context ctxproxy cannot count.
// The session records it as a turn appended to what it holds.
func continueServerState(log *slog.Logger, p *Plan, ollama bool) ([]byte, *wire.Error) {
	req := p.req
	if p.Translate || ollama {
		if _, rt, err := wire.ToOllama(req.Dialect, req.Body, translate.RequestOptions{}, 0); err != nil {
			return nil, wire.TranslationError(rt, err)
		}
		return nil, wire.BadRequest("unsupported_parameter",
			req.ServerState+" refers to state kept by the server, and Ollama keeps none: send the whole conversation in input")
	}
	p.Accumulated, p.NewTurn = true, req.Messages
	p.Notice = "Not counted or trimmed: " + req.ServerState + " continues a conversation the backend keeps, which ctxproxy cannot see."
	return encodeConversation(log, p), nil
}
