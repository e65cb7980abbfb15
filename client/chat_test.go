package client

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/google/go-cmp/cmp"
)

// piece is one call of a reply's show function.
type piece struct {
	Text     string
	Thinking bool
}

func collect() (*[]piece, func(string, bool)) {
	var got []piece
	return &got, func(text string, thinking bool) {
		if text != "" {
			got = append(got, piece{text, thinking})
		}
	}
}

func TestReadNDJSON(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		want    []piece
		prompt  int
		wantErr string
	}{
		{"stream", `{"message":{"role":"assistant","content":"Hel"},"done":false}` + "\n" +
			`{"message":{"content":"lo"},"done":false}` + "\n" +
			`{"message":{"content":""},"done":true,"prompt_eval_count":12,"eval_count":3}` + "\n",
			[]piece{{"Hel", false}, {"lo", false}}, 12, ""},
		{"not streamed", `{"message":{"content":"whole"},"done":true,"prompt_eval_count":5}`,
			[]piece{{"whole", false}}, 5, ""},
		{"thinking first", `{"message":{"thinking":"hmm"},"done":false}` + "\n" + `{"message":{"content":"ok"},"done":true}`,
			[]piece{{"hmm", true}, {"ok", false}}, 0, ""},
		{"CRLF and blank lines", "{\"message\":{\"content\":\"a\"}}\r\n\r\n{\"done\":true}\r\n", []piece{{"a", false}}, 0, ""},
		{"unknown line shape skipped", `{"message":{"content":["parts"]}}` + "\n" + `{"message":{"content":"b"},"done":true}`,
			[]piece{{"b", false}}, 0, ""},
		{"error mid-stream", `{"message":{"content":"par"}}` + "\n" + `{"error":"model runner has unexpectedly stopped"}` + "\n",
			[]piece{{"par", false}}, 0, "model runner has unexpectedly stopped"},
		{"ends without done", `{"message":{"content":"cut"}}` + "\n", []piece{{"cut", false}}, 0, errBrokenReply.Error()},
		{"not JSON at all", "<html>502 Bad Gateway</html>", nil, 0, "unreadable reply"},
		{"empty", "", nil, 0, "unreadable reply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, show := collect()
			var reply Reply
			err := readNDJSON(iotest.OneByteReader(strings.NewReader(tt.stream)), &reply, show)
			checkErr(t, err, tt.wantErr)
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("pieces (-want +got):\n%s", diff)
			}
			if reply.PromptTokens != tt.prompt {
				t.Errorf("prompt tokens %d, want %d", reply.PromptTokens, tt.prompt)
			}
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("error %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestReadSSE(t *testing.T) {
	chunk := func(content string) string {
		return `data: {"choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]}` + "\n\n"
	}
	finish := `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	usage := `data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2}}` + "\n\n"
	tests := []struct {
		name    string
		stream  string
		want    []piece
		prompt  int
		wantErr string
	}{
		{"stream", chunk("Hel") + chunk("lo") + finish + usage + "data: [DONE]\n\n", []piece{{"Hel", false}, {"lo", false}}, 40, ""},
		{"no space after colon, CRLF", "data:{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata:[DONE]\r\n\r\n",
			[]piece{{"a", false}}, 0, ""},
		{"comments and other fields", ": keep-alive\nevent: message\nid: 1\n" + chunk("x") + "retry: 10\n\ndata: [DONE]\n\n", []piece{{"x", false}}, 0, ""},
		{"multi-line data", "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"joined\"}}]}\n\ndata: [DONE]\n\n", []piece{{"joined", false}}, 0, ""},
		{"reasoning", `data: {"choices":[{"delta":{"reasoning_content":"think"}}]}` + "\n\n" +
			`data: {"choices":[{"delta":{"reasoning":"more"}}]}` + "\n\n" + chunk("answer") + "data: [DONE]\n\n",
			[]piece{{"think", true}, {"more", true}, {"answer", false}}, 0, ""},
		{"finished without DONE", chunk("a") + finish, []piece{{"a", false}}, 0, ""},
		{"last event without blank line", chunk("a") + "data: [DONE]", []piece{{"a", false}}, 0, ""},
		{"error event", chunk("a") + `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n",
			[]piece{{"a", false}}, 0, "overloaded"},
		{"broken", chunk("a"), []piece{{"a", false}}, 0, errBrokenReply.Error()},
		{"undecodable data skipped", "data: {nope\n\n" + chunk("b") + "data: [DONE]\n\n", []piece{{"b", false}}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, show := collect()
			var reply Reply
			err := readSSE(iotest.OneByteReader(strings.NewReader(tt.stream)), &reply, show)
			checkErr(t, err, tt.wantErr)
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("pieces (-want +got):\n%s", diff)
			}
			if reply.PromptTokens != tt.prompt {
				t.Errorf("prompt tokens %d, want %d", reply.PromptTokens, tt.prompt)
			}
		})
	}
}

func TestReadCompletion(t *testing.T) {
	got, show := collect()
	var reply Reply
	err := readCompletion(strings.NewReader(`{"choices":[{"message":{"role":"assistant","content":"done"}}],"usage":{"prompt_tokens":7,"completion_tokens":1}}`), &reply, show)
	if err != nil || len(*got) != 1 || (*got)[0].Text != "done" || reply.PromptTokens != 7 {
		t.Errorf("got %v %+v %v", *got, reply, err)
	}
	if err := readCompletion(strings.NewReader("oops"), &reply, show); err == nil {
		t.Error("no error for a body that is not JSON")
	}
}

// TestReadLineBounded: a line without end cannot grow without bound.
func TestReadLineBounded(t *testing.T) {
	var reply Reply
	long := io.LimitReader(infinite('x'), maxEvent+1<<20)
	err := readNDJSON(long, &reply, func(string, bool) {})
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("error %v, want the line refused", err)
	}
}

type infinite byte

func (b infinite) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

func TestErrorFrom(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"ctxproxy and Ollama", 404, `{"error":"session \"x\" not found"}`, `session "x" not found (HTTP 404)`},
		{"OpenAI", 400, `{"error":{"message":"bad model","type":"invalid_request_error"}}`, "bad model (HTTP 400)"},
		{"text", 502, "backend unavailable\nmore", "backend unavailable (HTTP 502)"},
		{"HTML", 502, "<html><body>Bad Gateway</body></html>", "bad gateway (HTTP 502)"},
		{"empty", 503, "", "service unavailable (HTTP 503)"},
		{"unauthorized", 401, `{"error":"admin token required"}`, "admin token required (HTTP 401): set --token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := errorFrom(tt.status, []byte(tt.body))
			var ae *Error
			if !errors.As(err, &ae) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("errorFrom = %q, want %q", err, tt.want)
			}
		})
	}
}

// FuzzReadStreams: no stream, however malformed, panics a reader.
func FuzzReadStreams(f *testing.F) {
	f.Add(`{"message":{"content":"a"},"done":true}`)
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
	f.Add(`{"error":{"message":1}}`)
	f.Add("data: {\"error\":null}\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		show := func(string, bool) {}
		var r Reply
		_ = readNDJSON(strings.NewReader(s), &r, show)
		_ = readSSE(strings.NewReader(s), &r, show)
		_ = readCompletion(strings.NewReader(s), &r, show)
		_ = errorFrom(500, []byte(s))
		_ = adminapi.ParseHeaders(http.Header{"X-Ctxproxy-Warning": {s}, "X-Ctxproxy-Usage": {s}})
	})
}

// streamOf builds a reply stream of n chunks of one short token each.
func streamOf(n int, sse bool) string {
	var b strings.Builder
	for range n {
		if sse {
			b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}` + "\n\n")
		} else {
			b.WriteString(`{"model":"llama3.1","created_at":"2026-11-21T12:00:00Z","message":{"role":"assistant","content":" word"},"done":false}` + "\n")
		}
	}
	if sse {
		b.WriteString("data: [DONE]\n\n")
	} else {
		b.WriteString(`{"model":"llama3.1","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":10,"eval_count":1000}` + "\n")
	}
	return b.String()
}

// BenchmarkReadNDJSON and BenchmarkReadSSE measure reading a 1,000-chunk
// reply, the client's only per-token work.
func BenchmarkReadNDJSON(b *testing.B) {
	s := streamOf(1000, false)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		var r Reply
		if err := readNDJSON(strings.NewReader(s), &r, func(string, bool) {}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadSSE(b *testing.B) {
	s := streamOf(1000, true)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		var r Reply
		if err := readSSE(strings.NewReader(s), &r, func(string, bool) {}); err != nil {
			b.Fatal(err)
		}
	}
}
