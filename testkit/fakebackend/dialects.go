package fakebackend

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// The OpenAI fake also serves OpenAI's Responses API (/v1/responses) and
// Anthropic's Messages API (/v1/messages), the way those servers answer:
// a whole object, or typed SSE events. Their input_tokens count the
// request body's bytes (TrueTokens of the body), a stand-in for a real
// tokenizer.

func (b *Fake) dialectChat(w http.ResponseWriter, r *http.Request, body []byte, o Options) {
	var req struct {
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, 400, openaiError("We could not parse the JSON body of your request.", "invalid_request_error", ""))
		return
	}
	if o.ReplyFunc != nil {
		o.Reply = o.ReplyFunc(body)
	}
	in, out := o.Tokenize(string(body)), o.Tokenize(o.Reply)
	anthropic := r.URL.Path == "/v1/messages"
	var whole map[string]any
	if anthropic {
		content := []any{map[string]any{"type": "text", "text": o.Reply}}
		for _, tc := range o.ToolCalls {
			content = append(content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": tc.Arguments})
		}
		whole = map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": "fake",
			"content": content, "stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out}}
	} else {
		output := []any{map[string]any{"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": o.Reply, "annotations": []any{}}}}}
		for _, tc := range o.ToolCalls {
			args, _ := json.Marshal(tc.Arguments)
			output = append(output, map[string]any{"type": "function_call", "id": "fc_" + tc.ID, "call_id": tc.ID,
				"name": tc.Name, "arguments": string(args), "status": "completed"})
		}
		whole = map[string]any{"id": "resp_fake", "object": "response", "status": "completed", "model": "fake",
			"output": output, "usage": map[string]any{"input_tokens": in, "output_tokens": out, "total_tokens": in + out}}
	}
	if !req.Stream {
		writeJSON(w, 200, whole)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	s := &streamer{w: w, r: r, o: o, b: b}
	event := func(typ string, v map[string]any) bool {
		v["type"] = typ
		data, _ := json.Marshal(v)
		return s.chunk(fmt.Sprintf("event: %s\ndata: %s\n\n", typ, data))
	}
	if anthropic {
		start := map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "content": []any{},
			"usage": map[string]any{"input_tokens": in, "output_tokens": 1}}
		_ = event("message_start", map[string]any{"message": start}) &&
			event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) &&
			event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": o.Reply}}) &&
			event("content_block_stop", map[string]any{"index": 0}) &&
			event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": "end_turn"},
				"usage": map[string]any{"output_tokens": out}}) &&
			event("message_stop", map[string]any{})
		return
	}
	created := map[string]any{"id": "resp_fake", "object": "response", "status": "in_progress", "output": []any{}}
	_ = event("response.created", map[string]any{"response": created}) &&
		event("response.output_text.delta", map[string]any{"delta": o.Reply}) &&
		event("response.completed", map[string]any{"response": whole})
}

// ollamaGenerate answers /api/generate (not streamed: the fake's one
// response object either way) with prompt_eval_count as Ollama counts a
// raw or templated prompt, cut silently at num_ctx as Ollama does.
func (b *Fake) ollamaGenerate(w http.ResponseWriter, body []byte, o Options) {
	var g struct {
		Model   string `json:"model"`
		Prompt  string `json:"prompt"`
		System  string `json:"system"`
		Raw     bool   `json:"raw"`
		Options struct {
			NumCtx int `json:"num_ctx"`
		} `json:"options"`
	}
	if err := json.Unmarshal(body, &g); err != nil {
		writeJSON(w, 400, map[string]any{"error": "invalid request body"})
		return
	}
	numCtx := g.Options.NumCtx
	if numCtx <= 0 {
		numCtx = o.DefaultNumCtx
	}
	prompt := o.Tokenize(g.Prompt)
	if o.Model != nil {
		prompt = o.Model.generateTokens(g.Prompt, g.System, g.Raw)
	}
	writeJSON(w, 200, map[string]any{"model": g.Model, "created_at": "2026-11-21T12:00:00Z", "response": o.Reply,
		"done": true, "done_reason": "stop", "prompt_eval_count": min(prompt, numCtx), "eval_count": o.Tokenize(o.Reply)})
}
