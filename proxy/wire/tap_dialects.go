package wire

import (
	"bytes"
	"encoding/json"
)

// What the tap reads of a Responses or Messages answer that a backend
// sent in the client's own dialect (not translated from Ollama's): the
// usage, the reply's text, reasoning and tool calls, and the end.

// dialectEvent is one SSE data payload or a whole body of the Responses
// or Messages API.
type dialectEvent struct {
	Type string `json:"type"`
	// Responses: a whole response object, or an event carrying one
	// (response.completed, response.incomplete).
	Object   string            `json:"object"`
	Status   string            `json:"status"`
	Output   []responsesOutput `json:"output"`
	Usage    *dialectUsage     `json:"usage"`
	Response *struct {
		Status string            `json:"status"`
		Output []responsesOutput `json:"output"`
		Usage  *dialectUsage     `json:"usage"`
	} `json:"response"`
	// Messages: a whole message, or its stream's events.
	Content      []anthropicBlock `json:"content"`
	StopReason   string           `json:"stop_reason"`
	Message      *dialectMessage  `json:"message"`
	Index        int              `json:"index"`
	ContentBlock *anthropicBlock  `json:"content_block"`
	Delta        json.RawMessage  `json:"delta"`
	Error        json.RawMessage  `json:"error"`
}

type dialectUsage struct {
	InputTokens  *int `json:"input_tokens"`
	OutputTokens int  `json:"output_tokens"`
	// Anthropic's prompt cache reads; the Responses API's cached tokens.
	CacheReadInputTokens *int `json:"cache_read_input_tokens"`
	InputTokensDetails   *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

type dialectMessage struct {
	Usage *dialectUsage `json:"usage"`
}

type responsesOutput struct {
	Type    string `json:"type"`
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Args    string `json:"arguments"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

type anthropicBlock struct {
	Type        string          `json:"type"`
	Text        string          `json:"text"`
	Thinking    string          `json:"thinking"`
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Input       json.RawMessage `json:"input"`
	PartialJSON string          `json:"partial_json"`
	StopReason  string          `json:"stop_reason"`
}

func (t *Tap) dialectEvent(data []byte, whole bool) {
	var e dialectEvent
	if json.Unmarshal(data, &e) != nil {
		return
	}
	if len(e.Error) > 0 && !bytes.Equal(e.Error, []byte("null")) || e.Type == "error" {
		return // an error: the response is not a complete reply
	}
	switch {
	case e.Object == "response" && whole:
		t.responsesOutput(e.Status, e.Output, e.Usage)
	case e.Type == "response.completed" || e.Type == "response.incomplete":
		if r := e.Response; r != nil {
			t.responsesOutput(r.Status, r.Output, r.Usage)
		}
	case e.Type == "message" && whole:
		for _, b := range e.Content {
			t.anthropicBlock(b, len(t.calls))
		}
		t.usage(e.Usage)
		t.r.FinishReason = e.StopReason
		t.r.Complete = true
	case e.Type == "message_start" && e.Message != nil:
		t.usage(e.Message.Usage)
	case e.Type == "content_block_start" && e.ContentBlock != nil:
		t.anthropicBlock(*e.ContentBlock, e.Index)
	case e.Type == "content_block_delta":
		var d anthropicBlock
		if json.Unmarshal(e.Delta, &d) == nil {
			t.appendContent(&t.content, d.Text)
			t.appendContent(&t.think, d.Thinking)
			if d.PartialJSON != "" {
				t.call(e.Index).Arguments += d.PartialJSON
			}
		}
	case e.Type == "message_delta":
		var d anthropicBlock
		if json.Unmarshal(e.Delta, &d) == nil && d.StopReason != "" {
			t.r.FinishReason = d.StopReason
		}
		t.usage(e.Usage)
	case e.Type == "message_stop":
		t.r.Complete = true
	}
}

// usage records a reply's token counts.
func (t *Tap) usage(u *dialectUsage) {
	if u == nil {
		return
	}
	if u.InputTokens != nil {
		t.r.PromptTokens = *u.InputTokens
	}
	switch {
	case u.CacheReadInputTokens != nil:
		t.r.CachedTokens = *u.CacheReadInputTokens
	case u.InputTokensDetails != nil && u.InputTokensDetails.CachedTokens != nil:
		t.r.CachedTokens = *u.InputTokensDetails.CachedTokens
	}
	t.r.OutputTokens = u.OutputTokens
}

// responsesOutput reads a whole response's output items: the complete
// reply, streamed or not.
func (t *Tap) responsesOutput(status string, output []responsesOutput, u *dialectUsage) {
	for _, it := range output {
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				t.appendContent(&t.content, c.Text)
			}
		case "reasoning":
			for _, s := range it.Summary {
				t.appendContent(&t.think, s.Text)
			}
		case "function_call":
			c := t.call(len(t.calls))
			c.ID, c.Name, c.Arguments = it.CallID, it.Name, it.Args
		}
	}
	t.usage(u)
	t.r.FinishReason = status
	t.r.Complete = status == "completed" || status == "incomplete"
}

// anthropicBlock reads one content block (whole, or a stream's start).
func (t *Tap) anthropicBlock(b anthropicBlock, index int) {
	switch b.Type {
	case "text":
		t.appendContent(&t.content, b.Text)
	case "thinking":
		t.appendContent(&t.think, b.Thinking)
	case "tool_use":
		c := t.call(index)
		c.ID, c.Name = b.ID, b.Name
		if len(b.Input) > 0 && !bytes.Equal(b.Input, []byte("{}")) {
			c.Arguments = string(b.Input)
		}
	}
}
