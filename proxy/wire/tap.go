package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// Reply is what ctxproxy learned from a chat response as it streamed by:
// the backend's token counts (the truth calibration needs), the assistant's
// message (what a session records), and whether the response was complete.
type Reply struct {
	Status int
	// Complete: the stream ended with its end marker ("done": true,
	// "data: [DONE]" or a finish_reason) or the JSON body was whole.
	Complete bool
	// PromptTokens is prompt_eval_count / usage.prompt_tokens; -1 when the
	// backend did not say.
	PromptTokens int
	// CachedTokens are the prompt tokens the backend reused from its
	// prompt cache (Ollama 0.30 and later: prompt_eval_cached_count;
	// OpenAI: usage.prompt_tokens_details.cached_tokens; Anthropic:
	// cache_read_input_tokens); -1 when it did not say.
	CachedTokens int
	OutputTokens int
	Content      string
	Thinking     string
	ToolCalls    []ReplyCall
	FinishReason string
	// Truncated reports that the reply was longer than the tap keeps:
	// its content (or, for a whole JSON body, all of it) is not stored
	// whole.
	Truncated bool
}

// Whole reports that the backend answered 200 and the reply came to its
// end.
func (r Reply) Whole() bool { return r.Status == http.StatusOK && r.Complete }

// NoModel reports that the backend answered 404: a chat route answers it
// for a model the backend does not have, and for nothing else.
func (r Reply) NoModel() bool { return r.Status == http.StatusNotFound }

// ReplyCall is a tool call of the reply, its arguments as they came.
type ReplyCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// maxCapture bounds the reply text kept for the session when the server
// sets no bound of its own (it keeps up to max_body); the client still
// gets every byte.
const maxCapture = 32 << 20

// Tap wraps a response body: every byte goes to the client unchanged while
// a parser reads the stream's events on the side. Reply says what it read.
type Tap struct {
	rc      io.ReadCloser
	dialect Dialect
	kind    string // "ndjson", "sse" or "json"
	buf     []byte // an incomplete line, or the whole JSON body
	r       Reply
	calls   map[int]*ReplyCall
	content strings.Builder
	think   strings.Builder
	once    sync.Once
	// rested: the end of the body was read (rest), once.
	rested bool
	// limit is the most reply bytes kept.
	limit int
}

// NewTap returns a tap of rc that keeps up to limit bytes of the reply
// (maxCapture when limit is 0).
func NewTap(rc io.ReadCloser, d Dialect, status int, contentType string, limit int) *Tap {
	kind := "json"
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		switch mt {
		case "application/x-ndjson", "application/jsonl":
			kind = "ndjson"
		case "text/event-stream":
			kind = "sse"
		}
	}
	if limit <= 0 {
		limit = maxCapture
	}
	return &Tap{rc: rc, dialect: d, kind: kind, r: Reply{Status: status, PromptTokens: -1, CachedTokens: -1}, limit: limit}
}

func (t *Tap) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if n > 0 {
		t.feed(p[:n])
	}
	if err == io.EOF {
		t.rest()
		t.finish()
	}
	return n, err
}

// Ended reports whether the reply is known to be over before its body
// ends: the stream's end marker has passed, or the body is one JSON value,
// of which a client can use nothing before its last byte.
func (t *Tap) Ended() bool { return t.kind == "json" || t.r.Complete }

func (t *Tap) Close() error {
	err := t.rc.Close()
	t.finish()
	return err
}

func (t *Tap) feed(b []byte) {
	if t.kind == "json" {
		if len(t.buf)+len(b) <= t.limit {
			t.buf = append(t.buf, b...)
		} else {
			t.r.Truncated = true
		}
		return
	}
	t.buf = append(t.buf, b...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.line(bytes.TrimRight(t.buf[:i], "\r"))
		t.buf = t.buf[i+1:]
	}
	if len(t.buf) > t.limit { // a line without end: stop looking at it
		t.buf = t.buf[:0]
	}
}

// rest reads what is left at the end of the body: the whole JSON body, or
// a last NDJSON line without a newline.
func (t *Tap) rest() {
	if t.rested {
		return
	}
	t.rested = true
	if t.kind == "json" {
		if !t.r.Truncated {
			t.event(t.buf, true)
		}
		return
	}
	if len(bytes.TrimSpace(t.buf)) > 0 {
		last := t.buf
		t.buf = nil
		t.line(last)
	}
}

// Complete reports that the reply is over: the stream's end marker has
// passed, or the whole JSON body was read.
func (t *Tap) Complete() bool { return t.r.Complete }

// Reply is what the tap read of the reply, which ends here: all of it
// once every byte of the body has passed (the caller knows: its EOF, its
// known length, or Complete), what came until now before that (a body
// closed early).
func (t *Tap) Reply() Reply {
	t.rest()
	t.finish()
	return t.r
}

// finish completes what was learned, once: at EOF, when the body is
// closed, or when Reply is asked for.
func (t *Tap) finish() {
	t.once.Do(func() {
		t.r.Content = t.content.String()
		t.r.Thinking = t.think.String()
		if len(t.calls) > 0 {
			idx := make([]int, 0, len(t.calls))
			for i := range t.calls {
				idx = append(idx, i)
			}
			sort.Ints(idx)
			for _, i := range idx {
				t.r.ToolCalls = append(t.r.ToolCalls, *t.calls[i])
			}
		}
	})
}

func (t *Tap) line(l []byte) {
	if t.kind == "sse" {
		data, ok := bytes.CutPrefix(l, []byte("data:"))
		if !ok {
			return
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			t.r.Complete = true
		} else {
			t.event(data, false)
		}
	} else if len(bytes.TrimSpace(l)) > 0 {
		t.event(l, false)
	}
	if t.r.Complete {
		// The end marker has passed: record the turn now rather than at
		// EOF, so a client that stops reading at the marker and asks the
		// admin API at once sees it.
		t.finish()
	}
}

// event is one NDJSON line, one SSE data payload, or a whole JSON body.
type event struct {
	// Ollama
	Message *struct {
		Content   string `json:"content"`
		Thinking  string `json:"thinking"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Index     *int            `json:"index"`
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Done            bool   `json:"done"`
	DoneReason      string `json:"done_reason"`
	PromptEvalCount *int   `json:"prompt_eval_count"`
	// PromptEvalCachedCount: Ollama 0.30 and later.
	PromptEvalCachedCount *int `json:"prompt_eval_cached_count"`
	EvalCount             int  `json:"eval_count"`
	// OpenAI
	Choices []struct {
		Index        int             `json:"index"`
		Message      *openaiDelta    `json:"message"`
		Delta        *openaiDelta    `json:"delta"`
		FinishReason json.RawMessage `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type openaiDelta struct {
	Content          *string `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
	Reasoning        *string `json:"reasoning"`
	ToolCalls        []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (t *Tap) call(i int) *ReplyCall {
	if t.calls == nil {
		t.calls = map[int]*ReplyCall{}
	}
	c, ok := t.calls[i]
	if !ok {
		c = &ReplyCall{}
		t.calls[i] = c
	}
	return c
}

func (t *Tap) appendContent(sb *strings.Builder, s string) {
	if sb.Len()+len(s) > t.limit {
		t.r.Truncated = true
		return
	}
	sb.WriteString(s)
}

func (t *Tap) event(data []byte, whole bool) {
	switch t.dialect {
	case Responses, Messages:
		t.dialectEvent(data, whole)
	default:
		t.decodeEvent(data, whole)
	}
}

// decodeEvent reads an Ollama or OpenAI event in full.
func (t *Tap) decodeEvent(data []byte, whole bool) {
	var e event
	if json.Unmarshal(data, &e) != nil {
		return
	}
	if len(e.Error) > 0 && !bytes.Equal(e.Error, []byte("null")) {
		return // an error event: the response is not a complete reply
	}
	if m := e.Message; m != nil {
		t.appendContent(&t.content, m.Content)
		t.appendContent(&t.think, m.Thinking)
		for _, tc := range m.ToolCalls {
			// Without function.index (older Ollama) calls come in order:
			// each is the next one.
			idx := len(t.calls)
			if tc.Function.Index != nil {
				idx = *tc.Function.Index
			}
			c := t.call(idx)
			c.ID, c.Name = tc.ID, tc.Function.Name
			c.Arguments = string(tc.Function.Arguments)
		}
	}
	if e.PromptEvalCount != nil {
		t.r.PromptTokens = *e.PromptEvalCount
		t.r.OutputTokens = e.EvalCount
	}
	if e.PromptEvalCachedCount != nil {
		t.r.CachedTokens = *e.PromptEvalCachedCount
	}
	if e.Done || (whole && e.Message != nil) {
		t.r.Complete = true
		t.r.FinishReason = e.DoneReason
	}
	for _, ch := range e.Choices {
		if ch.Index != 0 {
			continue // ctxproxy records the first choice
		}
		d := ch.Delta
		if d == nil {
			d = ch.Message
		}
		if d != nil {
			if d.Content != nil {
				t.appendContent(&t.content, *d.Content)
			}
			if d.ReasoningContent != nil {
				t.appendContent(&t.think, *d.ReasoningContent)
			} else if d.Reasoning != nil {
				t.appendContent(&t.think, *d.Reasoning)
			}
			for i, tc := range d.ToolCalls {
				idx := i
				if tc.Index != nil {
					idx = *tc.Index
				}
				c := t.call(idx)
				if tc.ID != "" {
					c.ID = tc.ID
				}
				if tc.Function.Name != "" {
					c.Name = tc.Function.Name
				}
				c.Arguments += tc.Function.Arguments
			}
		}
		var fr string
		if json.Unmarshal(ch.FinishReason, &fr) == nil && fr != "" {
			t.r.FinishReason = fr
			if whole {
				t.r.Complete = true
			}
		}
	}
	if e.Usage != nil {
		t.r.PromptTokens = e.Usage.PromptTokens
		t.r.OutputTokens = e.Usage.CompletionTokens
		if d := e.Usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			t.r.CachedTokens = *d.CachedTokens
		}
		if whole {
			t.r.Complete = true
		}
	}
}
