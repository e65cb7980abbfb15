package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ollama/ollama/api"
	"github.com/sashabaranov/go-openai"
)

// The chat side of the client: one turn sent in accumulate mode, its reply
// read as it streams (Ollama's NDJSON or OpenAI's SSE).

// The chat dialects Request.Dialect names.
const (
	DialectOllama = "ollama"
	DialectOpenAI = "openai"
)

// Message is one chat message of a turn, in Ollama's own shape.
type Message = api.Message

// Request is one turn. In accumulate mode ctxproxy prepends the
// session's stored history, so messages holds only what is new.
type Request struct {
	// Dialect is DialectOllama (/api/chat) or DialectOpenAI
	// (/v1/chat/completions).
	Dialect  string
	Model    string
	Session  string
	Messages []Message
}

// Reply is what came back for a turn.
type Reply struct {
	Content string
	// Header is the answer's header, with ctxproxy's X-Ctxproxy-* fields.
	Header http.Header
	// PromptTokens and CompletionTokens are the backend's own counts, 0
	// when it sent none.
	PromptTokens, CompletionTokens int
}

// errBrokenReply says that a stream ended before the backend finished it.
var errBrokenReply = errors.New("the reply broke off before its end")

// maxEvent bounds one NDJSON line or SSE event, so a backend that never
// ends a line cannot exhaust memory.
const maxEvent = 16 << 20

// Send posts one turn and calls show with each piece of the reply as it
// arrives (thinking pieces flagged). It returns what arrived even when the
// stream breaks, with the error.
func (c *Client) Send(ctx context.Context, r Request, show func(text string, thinking bool)) (Reply, error) {
	path, accept := "/api/chat", "application/x-ndjson"
	stream := true
	var body any = api.ChatRequest{Model: r.Model, Messages: r.Messages, Stream: &stream}
	if r.Dialect == DialectOpenAI {
		path, accept = "/v1/chat/completions", "text/event-stream"
		msgs := make([]openai.ChatCompletionMessage, len(r.Messages))
		for i, m := range r.Messages {
			msgs[i] = openai.ChatCompletionMessage{Role: m.Role, Content: m.Content}
		}
		body = openai.ChatCompletionRequest{Model: r.Model, Messages: msgs, Stream: true,
			StreamOptions: &openai.StreamOptions{IncludeUsage: true}}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return Reply{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(data))
	if err != nil {
		return Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	req.Header.Set("X-Session-ID", r.Session)
	req.Header.Set("X-Ctxproxy-Accumulate", "1")
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := c.chat.Do(req)
	if err != nil {
		return Reply{}, c.transportErr(ctx, err)
	}
	defer resp.Body.Close()
	reply := Reply{Header: resp.Header}
	if resp.StatusCode >= 300 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return reply, errorFrom(resp.StatusCode, data)
	}
	var sb strings.Builder
	collect := func(text string, thinking bool) {
		if !thinking {
			sb.WriteString(text)
		}
		if show != nil && text != "" {
			show(text, thinking)
		}
	}
	switch ct := resp.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "text/event-stream"):
		err = readSSE(resp.Body, &reply, collect)
	case r.Dialect == DialectOpenAI:
		err = readCompletion(resp.Body, &reply, collect)
	default:
		// NDJSON, or one JSON object when the backend did not stream.
		err = readNDJSON(resp.Body, &reply, collect)
	}
	reply.Content = sb.String()
	// Read to the end so that the connection can serve the next turn.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return reply, err
}

// streamError is an error reported inside a stream, in either shape.
func streamError(raw json.RawMessage) error {
	var e *Error
	if errors.As(errorFrom(0, []byte(`{"error":`+string(raw)+`}`)), &e) && e.Message != "" {
		return e
	}
	return &Error{Message: "the backend reported an error"}
}

// readNDJSON reads Ollama's stream: one JSON object per line, the last
// with "done": true; an {"error": ...} object ends it early.
func readNDJSON(r io.Reader, reply *Reply, show func(string, bool)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	understood := false
	for {
		line, err := readLine(br)
		if err == io.EOF {
			if !understood {
				return errors.New("unreadable reply: no chat answer in it")
			}
			return errBrokenReply
		}
		if err != nil {
			return readErr(err)
		}
		var chunk struct {
			Message struct {
				Content  string `json:"content"`
				Thinking string `json:"thinking"`
			} `json:"message"`
			Done            bool            `json:"done"`
			Error           json.RawMessage `json:"error"`
			PromptEvalCount int             `json:"prompt_eval_count"`
			EvalCount       int             `json:"eval_count"`
		}
		if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &chunk) != nil {
			// A line of a shape this client does not know (a newer
			// Ollama): skip it rather than lose the reply.
			continue
		}
		understood = true
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			return streamError(chunk.Error)
		}
		show(chunk.Message.Thinking, true)
		show(chunk.Message.Content, false)
		if chunk.Done {
			reply.PromptTokens, reply.CompletionTokens = chunk.PromptEvalCount, chunk.EvalCount
			return nil
		}
	}
}

// readErr names a failure while reading a reply.
func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.Canceled) {
		return errBrokenReply
	}
	return fmt.Errorf("%w: %v", errBrokenReply, err)
}

// openAIChunk is one SSE event of an OpenAI stream, or (with message
// instead of delta) a whole completion.
type openAIChunk struct {
	Choices []struct {
		Delta   openAIDelta `json:"delta"`
		Message openAIDelta `json:"message"`
		Finish  *string     `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type openAIDelta struct {
	Content string `json:"content"`
	// ReasoningContent (DeepSeek, vLLM) and Reasoning (Ollama's OpenAI
	// layer) carry a thinking model's thoughts.
	ReasoningContent string `json:"reasoning_content"`
	Reasoning        string `json:"reasoning"`
}

// readSSE reads an OpenAI stream: "data:" events ending with "[DONE]".
func readSSE(r io.Reader, reply *Reply, show func(string, bool)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	hasData, finished := false, false
	dispatch := func() (bool, error) {
		defer func() { data, hasData = data[:0], false }()
		if !hasData {
			return false, nil
		}
		if string(data) == "[DONE]" {
			return true, nil
		}
		var c openAIChunk
		if json.Unmarshal(data, &c) != nil {
			return false, nil
		}
		if len(c.Error) > 0 && string(c.Error) != "null" {
			return true, streamError(c.Error)
		}
		for _, ch := range c.Choices {
			show(ch.Delta.ReasoningContent+ch.Delta.Reasoning, true)
			show(ch.Delta.Content, false)
			if ch.Finish != nil {
				finished = true
			}
		}
		if c.Usage != nil {
			reply.PromptTokens, reply.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
		return false, nil
	}
	for {
		line, err := readLine(br)
		if err != nil {
			if err != io.EOF {
				return readErr(err)
			}
			if done, derr := dispatch(); done || derr != nil {
				return derr
			}
			if finished {
				// Some OpenAI-compatible servers end without [DONE].
				return nil
			}
			return errBrokenReply
		}
		if len(line) == 0 {
			if done, err := dispatch(); done || err != nil {
				return err
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment, e.g. a keep-alive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // event:, id:, retry: say nothing about the reply
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if hasData {
			data = append(data, '\n')
		}
		if len(data)+len(value) > maxEvent {
			return fmt.Errorf("a reply event is larger than %d bytes", maxEvent)
		}
		data, hasData = append(data, value...), true
	}
}

// readLine reads one line without its end (LF or CRLF), up to maxEvent.
// The line is valid until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		if line == nil && err != bufio.ErrBufferFull {
			line = part // the common case: the whole line was buffered
		} else {
			line = append(line, part...)
		}
		if len(line) > maxEvent {
			return nil, fmt.Errorf("a reply line is larger than %d bytes", maxEvent)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			err = nil
		}
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
}

// readCompletion reads an OpenAI answer that was not streamed.
func readCompletion(r io.Reader, reply *Reply, show func(string, bool)) error {
	data, err := io.ReadAll(io.LimitReader(r, MaxAnswer))
	if err != nil {
		return readErr(err)
	}
	var c openAIChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("unreadable reply: %v", err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return streamError(c.Error)
	}
	for _, ch := range c.Choices {
		show(ch.Message.ReasoningContent+ch.Message.Reasoning, true)
		show(ch.Message.Content, false)
	}
	if c.Usage != nil {
		reply.PromptTokens, reply.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
	}
	return nil
}
