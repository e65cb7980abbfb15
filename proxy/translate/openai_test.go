package translate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ollama/ollama/api"
	openai "github.com/sashabaranov/go-openai"
)

// These tests hold the translation to what a real OpenAI client sends and
// accepts: go-openai talks to an httptest server that records its request
// or serves a translated answer.

// serve starts a server that records the request body and answers with
// status and body.
func serve(t *testing.T, status int, contentType string, body []byte) (*openai.Client, *[]byte) {
	t.Helper()
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	cfg := openai.DefaultConfig("test-key")
	cfg.BaseURL = srv.URL + "/v1"
	return openai.NewClientWithConfig(cfg), &got
}

// sent returns the body go-openai sends for req, translated, as Ollama
// decodes it.
func sent(t *testing.T, req openai.ChatCompletionRequest, opts RequestOptions) (api.ChatRequest, Info) {
	t.Helper()
	answer, err := Response(read(t, filepath.Join("testdata", "response", "plain.json")), Info{}, ResponseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client, got := serve(t, http.StatusOK, "application/json", answer)
	if _, err := client.CreateChatCompletion(context.Background(), req); err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	body, info, err := Request(*got, opts)
	if err != nil {
		t.Fatalf("Request(%s): %v", *got, err)
	}
	var chat api.ChatRequest
	if err := json.Unmarshal(body, &chat); err != nil {
		t.Fatalf("Ollama cannot decode %s: %v", body, err)
	}
	return chat, info
}

func TestOpenAIClientRequest(t *testing.T) {
	img := "iVBORw0KGgo="
	weather := openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
		Name:       "get_weather",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
	}}
	seed := 7
	chat, info := sent(t, openai.ChatCompletionRequest{
		Model: "qwen3",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "Be brief."},
			{Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{
				{Type: openai.ChatMessagePartTypeText, Text: "Weather here?"},
				{Type: openai.ChatMessagePartTypeImageURL, ImageURL: &openai.ChatMessageImageURL{URL: "data:image/png;base64," + img}},
			}},
			{Role: openai.ChatMessageRoleAssistant, ReasoningContent: "Need the tool.", ToolCalls: []openai.ToolCall{{
				ID: "call_1", Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`},
			}}},
			{Role: openai.ChatMessageRoleTool, ToolCallID: "call_1", Content: "sunny"},
		},
		MaxCompletionTokens: 300,
		Temperature:         0.25,
		TopP:                0.5,
		Stop:                []string{"END"},
		Seed:                &seed,
		PresencePenalty:     0.5,
		FrequencyPenalty:    0.75,
		Tools:               []openai.Tool{weather},
		ToolChoice:          "auto",
		ReasoningEffort:     "low",
		User:                "u1",
	}, RequestOptions{NumCtx: 32768})

	if got, want := chat.Model, "qwen3"; got != want {
		t.Errorf("model = %q, want %q", got, want)
	}
	if chat.Stream == nil || *chat.Stream {
		t.Errorf("stream = %v, want explicit false", chat.Stream)
	}
	wantOptions := map[string]any{
		"num_ctx":           float64(32768),
		"num_predict":       float64(300),
		"temperature":       float64(float32(0.25)),
		"top_p":             float64(float32(0.5)),
		"presence_penalty":  float64(float32(0.5)),
		"frequency_penalty": float64(float32(0.75)),
		"seed":              float64(7),
		"stop":              []any{"END"},
	}
	if diff := cmp.Diff(wantOptions, chat.Options); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	if chat.Think == nil || chat.Think.Value != "low" {
		t.Errorf("think = %v, want low", chat.Think)
	}
	if len(chat.Tools) != 1 || chat.Tools[0].Function.Name != "get_weather" {
		t.Errorf("tools = %v", chat.Tools)
	}
	if len(chat.Messages) != 4 {
		t.Fatalf("got %d messages, want 4", len(chat.Messages))
	}
	user := chat.Messages[1]
	if user.Content != "Weather here?" || len(user.Images) != 1 || string(user.Images[0]) != "\x89PNG\r\n\x1a\n" {
		t.Errorf("user message = %q with images %q", user.Content, user.Images)
	}
	asst := chat.Messages[2]
	if asst.Thinking != "Need the tool." || len(asst.ToolCalls) != 1 {
		t.Fatalf("assistant message = %+v", asst)
	}
	if tc := asst.ToolCalls[0]; tc.ID != "call_1" || tc.Function.Name != "get_weather" {
		t.Errorf("tool call = %+v", tc)
	} else if city, _ := tc.Function.Arguments.Get("city"); city != "Paris" {
		t.Errorf("tool call arguments city = %v, want Paris", city)
	}
	if tool := chat.Messages[3]; tool.Role != "tool" || tool.ToolCallID != "call_1" || tool.ToolName != "get_weather" || tool.Content != "sunny" {
		t.Errorf("tool message = %+v", tool)
	}
	if diff := cmp.Diff([]Drop{{Field: "user", Reason: dropReasons["user"]}}, info.Dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
}

func TestOpenAIClientRequestJSONMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format *openai.ChatCompletionResponseFormat
		want   string
	}{
		{"json_object", &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}, `"json"`},
		{"json_schema", &openai.ChatCompletionResponseFormat{
			Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
				Name: "p", Strict: true, Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
			},
		}, `{"type":"object","properties":{"n":{"type":"integer"}}}`},
		{"text", &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeText}, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chat, _ := sent(t, openai.ChatCompletionRequest{
				Model:          "llama3",
				Messages:       []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}},
				ResponseFormat: tc.format,
			}, RequestOptions{})
			if got := string(chat.Format); got != tc.want {
				t.Errorf("format = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestOpenAIClientRequestStream(t *testing.T) {
	var got []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	cfg := openai.DefaultConfig("k")
	cfg.BaseURL = srv.URL + "/v1"
	stream, err := openai.NewClientWithConfig(cfg).CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model:    "llama3",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}},
		//lint:ignore SA1019 clients still send max_tokens, so the translation must map it.
		MaxTokens:     10,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	stream.Close()

	body, info, err := Request(got, RequestOptions{NumCtx: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Stream || !info.IncludeUsage {
		t.Errorf("info = %+v, want stream with usage", info)
	}
	var chat api.ChatRequest
	if err := json.Unmarshal(body, &chat); err != nil {
		t.Fatal(err)
	}
	if chat.Stream == nil || !*chat.Stream || chat.Options["num_predict"] != float64(10) || chat.Options["num_ctx"] != float64(4096) {
		t.Errorf("stream = %v, options = %v", chat.Stream, chat.Options)
	}
}

func TestOpenAIClientResponse(t *testing.T) {
	cases := []struct {
		file      string
		content   string
		reasoning string
		finish    openai.FinishReason
		calls     []openai.ToolCall
		usage     openai.Usage
	}{
		{file: "plain", content: "Hello! How can I help?", finish: openai.FinishReasonStop, usage: openai.Usage{PromptTokens: 26, CompletionTokens: 12, TotalTokens: 38}},
		{file: "length", content: "Once upon a time there", finish: openai.FinishReasonLength, usage: openai.Usage{PromptTokens: 26, CompletionTokens: 12, TotalTokens: 38}},
		{file: "thinking", content: "4", reasoning: "Two plus two is four.", finish: openai.FinishReasonStop, usage: openai.Usage{PromptTokens: 26, CompletionTokens: 12, TotalTokens: 38}},
		{file: "tool_calls", finish: openai.FinishReasonToolCalls, calls: []openai.ToolCall{
			{ID: "call_x1y2z3w4", Type: "function", Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris", "unit": "c"}`}},
			{ID: "call_test0002", Type: "function", Function: openai.FunctionCall{Name: "get_time", Arguments: `{}`}},
		}, usage: openai.Usage{PromptTokens: 26, CompletionTokens: 12, TotalTokens: 38}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			out, err := Response(read(t, filepath.Join("testdata", "response", tc.file+".json")), Info{}, testResponseOptions())
			if err != nil {
				t.Fatal(err)
			}
			client, _ := serve(t, http.StatusOK, "application/json", out)
			resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "llama3.1:8b", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}})
			if err != nil {
				t.Fatalf("CreateChatCompletion: %v", err)
			}
			if resp.ID != "chatcmpl-test0001" || resp.Object != "chat.completion" || resp.Model != "llama3.1:8b" || resp.Created != 1748779200 {
				t.Errorf("envelope = %q %q %q %d", resp.ID, resp.Object, resp.Model, resp.Created)
			}
			if len(resp.Choices) != 1 {
				t.Fatalf("got %d choices", len(resp.Choices))
			}
			c := resp.Choices[0]
			if c.Message.Role != "assistant" || c.Message.Content != tc.content || c.Message.ReasoningContent != tc.reasoning || c.FinishReason != tc.finish {
				t.Errorf("choice = %+v", c)
			}
			if diff := cmp.Diff(tc.calls, c.Message.ToolCalls); diff != "" {
				t.Errorf("tool calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.usage, resp.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

// streamed is what a go-openai client puts together from a stream.
type streamed struct {
	Content, Reasoning string
	Roles              []string
	Finish             openai.FinishReason
	Calls              map[int]openai.ToolCall
	Usage              *openai.Usage
	Chunks             int
	ErrCode            any
}

func TestOpenAIClientStream(t *testing.T) {
	usage := &openai.Usage{PromptTokens: 26, CompletionTokens: 3, TotalTokens: 29}
	cases := []struct {
		name         string
		includeUsage bool
		want         streamed
	}{
		{name: "plain", want: streamed{Content: "Hello!", Roles: []string{"assistant"}, Finish: "stop", Chunks: 4}},
		{name: "usage", includeUsage: true, want: streamed{Content: "Hi", Roles: []string{"assistant"}, Finish: "stop", Usage: usage, Chunks: 3}},
		{name: "length", want: streamed{Content: "Once upon", Roles: []string{"assistant"}, Finish: "length", Chunks: 3}},
		{name: "thinking", includeUsage: true, want: streamed{Content: "4", Reasoning: "Two plus two.", Roles: []string{"assistant"}, Finish: "stop", Usage: usage, Chunks: 5}},
		{name: "tool_calls", includeUsage: true, want: streamed{Roles: []string{"assistant"}, Finish: "tool_calls", Usage: usage, Chunks: 5, Calls: map[int]openai.ToolCall{
			0: {ID: "call_aaaa1111", Type: "function", Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris"}`}},
			1: {ID: "call_test0002", Type: "function", Function: openai.FunctionCall{Name: "get_time", Arguments: `{}`}},
			2: {ID: "call_cccc3333", Type: "function", Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city": "Oslo"}`}},
		}}},
		{name: "cut_off", want: streamed{Content: "Hello", Roles: []string{"assistant"}, Chunks: 2, ErrCode: codeIncomplete}},
		// go-openai reads a null code as the integer 0.
		{name: "error_line", want: streamed{Content: "Hel", Roles: []string{"assistant"}, Chunks: 1, ErrCode: 0}},
		{name: "error_context_length", want: streamed{ErrCode: codeContextLength}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := convertStream(t, read(t, filepath.Join("testdata", "stream", tc.name+".ndjson")), Info{Model: "llama3.1:8b", Stream: true, IncludeUsage: tc.includeUsage})
			client, _ := serve(t, http.StatusOK, "text/event-stream", out)
			stream, err := client.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{Model: "llama3.1:8b", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}})
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			var got streamed
			for {
				chunk, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					var apiErr *openai.APIError
					if !errors.As(err, &apiErr) {
						t.Fatalf("Recv: %v, want an *openai.APIError", err)
					}
					got.ErrCode = apiErr.Code
					if apiErr.Message == "" {
						t.Errorf("error without a message: %v", err)
					}
					break
				}
				got.Chunks++
				if chunk.ID != "chatcmpl-test0001" || chunk.Object != "chat.completion.chunk" {
					t.Errorf("chunk envelope = %q %q", chunk.ID, chunk.Object)
				}
				if chunk.Usage != nil {
					got.Usage = chunk.Usage
				}
				for _, c := range chunk.Choices {
					d := c.Delta
					if d.Role != "" {
						got.Roles = append(got.Roles, d.Role)
					}
					got.Content += d.Content
					got.Reasoning += d.ReasoningContent
					if c.FinishReason != "" {
						got.Finish = c.FinishReason
					}
					for _, call := range d.ToolCalls {
						if call.Index == nil {
							t.Fatalf("tool call delta without index: %+v", call)
						}
						if got.Calls == nil {
							got.Calls = map[int]openai.ToolCall{}
						}
						acc := got.Calls[*call.Index]
						if call.ID != "" {
							acc.ID = call.ID
						}
						if call.Type != "" {
							acc.Type = call.Type
						}
						acc.Function.Name += call.Function.Name
						acc.Function.Arguments += call.Function.Arguments
						got.Calls[*call.Index] = acc
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("client saw (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOpenAIClientErrors(t *testing.T) {
	cases := []struct {
		status     int
		body       string
		wantStatus int
		wantType   string
		wantCode   any
	}{
		{404, `{"error":"model \"nope\" not found, try pulling it first"}`, 404, "invalid_request_error", "model_not_found"},
		{400, `{"error":"the input length exceeds the context length"}`, 400, "invalid_request_error", "context_length_exceeded"},
		// go-openai reads a null code as the integer 0.
		{500, `{"error":"llama runner process has terminated"}`, 500, "api_error", 0},
		{400, `{"error":"invalid options"}`, 400, "invalid_request_error", 0},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.body, "/", "_"), func(t *testing.T) {
			e := BackendError(tc.status, []byte(tc.body))
			client, _ := serve(t, e.Status, "application/json", e.JSON())
			_, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}})
			var apiErr *openai.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *openai.APIError", err)
			}
			if apiErr.HTTPStatusCode != tc.wantStatus || apiErr.Type != tc.wantType || apiErr.Code != tc.wantCode || apiErr.Message == "" {
				t.Errorf("got status %d type %q code %v message %q", apiErr.HTTPStatusCode, apiErr.Type, apiErr.Code, apiErr.Message)
			}
		})
	}
}
