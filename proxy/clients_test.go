package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	ollama "github.com/ollama/ollama/api"
	openai "github.com/sashabaranov/go-openai"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// These tests point the real client libraries that users run at ctxproxy,
// unchanged but for the base URL.

func TestGoOpenAIClient(t *testing.T) {
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{Reply: "Hi there, from the model."})
	_, px := newProxy(t, be.URL, Config{})
	cfg := openai.DefaultConfig("sk-test-key")
	cfg.BaseURL = px.URL + "/v1"
	client := openai.NewClientWithConfig(cfg)
	ctx := context.Background()
	req := openai.ChatCompletionRequest{
		Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "Be brief."},
			{Role: openai.ChatMessageRoleUser, Content: "Hello?"},
		},
	}

	t.Run("chat", func(t *testing.T) {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := resp.Choices[0].Message.Content, "Hi there, from the model."; g != w {
			t.Errorf("content = %q, want %q", g, w)
		}
		if resp.Usage.PromptTokens == 0 {
			t.Errorf("usage lost: %+v", resp.Usage)
		}
		got, _ := be.Last("/v1/chat/completions")
		if g := got.Header.Get("Authorization"); g != "Bearer sk-test-key" {
			t.Errorf("Authorization = %q: the API key must reach the backend", g)
		}
	})

	t.Run("stream", func(t *testing.T) {
		sreq := req
		sreq.Stream = true
		sreq.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		stream, err := client.CreateChatCompletionStream(ctx, sreq)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var sb strings.Builder
		var usage *openai.Usage
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range chunk.Choices {
				sb.WriteString(c.Delta.Content)
			}
			if chunk.Usage != nil {
				usage = chunk.Usage
			}
		}
		if g, w := sb.String(), "Hi there, from the model."; g != w {
			t.Errorf("streamed content = %q, want %q", g, w)
		}
		if usage == nil || usage.PromptTokens == 0 {
			t.Errorf("usage chunk lost")
		}
	})

	t.Run("error passes through", func(t *testing.T) {
		be.SetOptions(fakebackend.Options{Status: 401, ErrorMessage: "Incorrect API key provided"})
		defer be.SetOptions(fakebackend.Options{Reply: "Hi there, from the model."})
		_, err := client.CreateChatCompletion(ctx, req)
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 401 || apiErr.Message != "Incorrect API key provided" {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("models", func(t *testing.T) {
		models, err := client.ListModels(ctx)
		if err != nil || len(models.Models) == 0 {
			t.Errorf("ListModels: %v %+v", err, models)
		}
	})
}

func TestOllamaClient(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "Ollama says hello."})
	_, px := newProxy(t, be.URL, Config{})
	u, _ := url.Parse(px.URL)
	client := ollama.NewClient(u, http.DefaultClient)
	ctx := context.Background()
	msgs := []ollama.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello?"}}

	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "no stream"}[stream]
		t.Run(name, func(t *testing.T) {
			var sb strings.Builder
			var final ollama.ChatResponse
			chunks := 0
			err := client.Chat(ctx, &ollama.ChatRequest{Model: "llama3.1:8b", Messages: msgs, Stream: &stream},
				func(r ollama.ChatResponse) error {
					chunks++
					sb.WriteString(r.Message.Content)
					if r.Done {
						final = r
					}
					return nil
				})
			if err != nil {
				t.Fatal(err)
			}
			if g, w := sb.String(), "Ollama says hello."; g != w {
				t.Errorf("content = %q, want %q", g, w)
			}
			if !final.Done || final.PromptEvalCount == 0 {
				t.Errorf("final chunk: %+v", final)
			}
			if stream && chunks < 2 {
				t.Errorf("stream arrived in %d chunk(s)", chunks)
			}
		})
	}

	t.Run("list and show", func(t *testing.T) {
		list, err := client.List(ctx)
		if err != nil || len(list.Models) == 0 {
			t.Fatalf("List: %v", err)
		}
		show, err := client.Show(ctx, &ollama.ShowRequest{Model: "llama3.1:8b"})
		if err != nil || show.ModelInfo["llama.context_length"] == nil {
			t.Fatalf("Show: %v %+v", err, show)
		}
	})
}
