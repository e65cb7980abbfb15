package plan

import (
	"encoding/json"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ollama/ollama/api"
)

// Counter counts one request's prompt: budget's estimate (tiktoken
// corrected by calibration) or the model's own tokenizer.
type Counter interface {
	rewrite.Counter
	// Prompt counts a whole prompt, messages and tools.
	Prompt(msgs []rewrite.Message, tools json.RawMessage) budget.Estimate
	// Overhead is what of the last counted prompt belongs to no message.
	Overhead(tools json.RawMessage) int
}

var (
	_ Counter = (*budget.MessageCounter)(nil)
	_ Counter = (*ExactCounter)(nil)
)

// ExactCounter counts one request bound for Ollama exactly: its messages
// rendered with the model's chat template and tokenized with the model's
// vocabulary (package exact). It is used for one request only, so it
// keeps the request's tools, think value and last counted messages.
type ExactCounter struct {
	model *exact.Tokenizer
	tools api.Tools
	think *api.ThinkValue
	// names maps a tool_call_id to the function called, for OpenAI tool
	// messages (Ollama's template sees their tool_name).
	names map[string]string
	// last is the last prompt counted, as the template saw it, and total
	// its count: Overhead is derived from them without rendering again.
	last  []api.Message
	total int
	// images are the sizes of last's images, message by message.
	images [][]chat.Image
	// err is the first counting error; the request is then counted by
	// budget's estimate instead (countExactly).
	err error
	// render renders a prompt on the server, for a model whose prompts
	// only the server renders exactly (exact.Tokenizer.ServerRenders);
	// nil renders with ctxproxy's own, not exactly.
	render func(exact.Prompt) (string, error)
	// approx: the last prompt's count is not exact (images for a
	// vision model whose image cost the server decides at run time: all
	// but Gemma 3 on Ollama's engine); it is not compared with the
	// backend's.
	approx bool
}

// NewExact returns a counter of req's prompt for model; err when
// the request's tools or think value do not decode as Ollama would.
func NewExact(model *exact.Tokenizer, req *wire.Request) *ExactCounter {
	c := &ExactCounter{model: model}
	if len(req.Tools) > 0 {
		if err := json.Unmarshal(req.Tools, &c.tools); err != nil {
			c.err = err
		}
	}
	switch {
	case len(req.Think) > 0:
		var t api.ThinkValue
		if err := json.Unmarshal(req.Think, &t); err == nil {
			c.think = &t
		}
	case req.Effort != "":
		// The translation's mapping of reasoning_effort to think.
		switch req.Effort {
		case "none":
			c.think = &api.ThinkValue{Value: false}
		case "minimal", "low":
			c.think = &api.ThinkValue{Value: "low"}
		case "medium":
			c.think = &api.ThinkValue{Value: "medium"}
		case "high", "xhigh":
			c.think = &api.ThinkValue{Value: "high"}
		}
	}
	for _, m := range req.Messages {
		for _, tc := range m.ToolCalls {
			if tc.ID != "" {
				if c.names == nil {
					c.names = map[string]string{}
				}
				c.names[tc.ID] = tc.Name
			}
		}
	}
	return c
}

// Prompt counts msgs exactly. Every field of the Estimate is the exact
// count, marked Exact, so nothing calibrates from it.
func (c *ExactCounter) Prompt(msgs []rewrite.Message, _ json.RawMessage) budget.Estimate {
	c.last = c.messages(msgs)
	c.images = c.images[:0]
	for i := range msgs {
		c.images = append(c.images, msgs[i].Images)
	}
	n, whole, err := c.count(c.prompt())
	if err != nil && c.err == nil {
		c.err = err
	}
	c.approx = !whole
	c.total = n
	return budget.Estimate{Tokens: n, Raw: n, Chars: n, Exact: true}
}

// count counts p as the server renders it: on the server for a model
// whose renderer only it has right (its images placed where the
// renderer writes their tags), else with ctxproxy's own rendering.
func (c *ExactCounter) count(p exact.Prompt) (int, bool, error) {
	if c.render == nil || !c.model.ServerRenders() {
		return c.model.Count(p)
	}
	text, err := c.render(p)
	if err != nil {
		n, _, _ := c.model.Count(p)
		return n, false, nil // counted, not exactly: the reply calibrates it
	}
	return c.model.CountRendered(text, p.Sizes())
}

// useServer makes c render on the server what only it renders exactly.
func (c *ExactCounter) useServer(render func(exact.Prompt) (string, error)) { c.render = render }

// Overhead is the part of the last counted prompt that is no message's
// share: BOS, the reply priming, the model's SYSTEM, the tools.
func (c *ExactCounter) Overhead(json.RawMessage) int {
	n := c.total
	for i, m := range c.last {
		share, err := c.model.Share(m, c.images[i])
		if err != nil && c.err == nil {
			c.err = err
		}
		n -= share
	}
	return max(0, n)
}

// CountMessage returns m's share of a prompt, cached in m.Tokens.
func (c *ExactCounter) CountMessage(m *rewrite.Message) int {
	if m.Tokens > 0 {
		return m.Tokens
	}
	n, err := c.model.Share(c.message(m), m.Images)
	if err != nil && c.err == nil {
		c.err = err
	}
	m.Tokens = max(n, 1)
	return m.Tokens
}

// CountText returns the tokens of plain text.
func (c *ExactCounter) CountText(s string) int {
	n, err := c.model.CountText(s)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n
}

func (c *ExactCounter) messages(msgs []rewrite.Message) []api.Message {
	out := make([]api.Message, len(msgs))
	for i := range msgs {
		out[i] = c.message(&msgs[i])
	}
	return out
}

// message is m as Ollama's server decodes it, in either dialect: the
// fields a chat template can print. OpenAI messages get what the
// translation writes (text parts joined by newlines, reasoning as
// thinking, tool_name from the call a result answers).
func (c *ExactCounter) message(m *rewrite.Message) api.Message {
	am := api.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
	for _, tc := range m.ToolCalls {
		args := api.NewToolCallFunctionArguments()
		if tc.Arguments != "" {
			_ = json.Unmarshal([]byte(tc.Arguments), &args)
		}
		am.ToolCalls = append(am.ToolCalls, api.ToolCall{ID: tc.ID, Function: api.ToolCallFunction{Name: tc.Name, Arguments: args}})
	}
	if len(m.Images) > 0 {
		// Placeholders: the template sees how many; Count reads the
		// sizes from the prompt's Images.
		am.Images = make([]api.ImageData, len(m.Images))
	}
	if m.Raw != nil {
		if ms, err := wire.Members(m.Raw); err == nil {
			for _, mem := range ms {
				v := m.Raw[mem.ValueStart:mem.End]
				switch mem.Key {
				case "thinking", "reasoning_content", "reasoning":
					if am.Thinking == "" && v[0] == '"' && m.Role == "assistant" {
						am.Thinking, _ = wire.DecodeString(v)
					}
				case "tool_name":
					if v[0] == '"' {
						am.ToolName, _ = wire.DecodeString(v)
					}
				}
			}
		}
	}
	if am.ToolName == "" && m.ToolCallID != "" {
		am.ToolName = c.names[m.ToolCallID]
	}
	return am
}

// Err is the first error in counting with c; the request is then
// counted by estimate.
func (c *ExactCounter) Err() error { return c.err }

// Approximate reports that the last prompt's count was not exact.
func (c *ExactCounter) Approximate() bool { return c.approx }

// Counted is the last prompt counted, as the server renders it.
func (c *ExactCounter) Counted() (exact.Prompt, bool) { return c.prompt(), true }
