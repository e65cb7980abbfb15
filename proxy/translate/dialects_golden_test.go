package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
)

// dialect bundles one client dialect's translations for the golden tests.
type dialect struct {
	dir     string
	request func(body []byte, opts RequestOptions) ([]byte, []Drop, error)
	// reply returns the whole answer, a stream converter and the error
	// body for the request body req.
	reply  func(t *testing.T, req, body []byte) ([]byte, error)
	stream func(t *testing.T, req []byte) LineConverter
	errors func(e *Error) []byte
}

var dialects = []dialect{
	{
		dir: "responses",
		request: func(body []byte, opts RequestOptions) ([]byte, []Drop, error) {
			out, info, err := ResponsesRequest(body, opts)
			return out, info.Dropped, err
		},
		reply: func(t *testing.T, req, body []byte) ([]byte, error) {
			return ResponsesResponse(body, responsesInfo(t, req), testResponseOptions())
		},
		stream: func(t *testing.T, req []byte) LineConverter {
			return NewResponsesStream(responsesInfo(t, req), testResponseOptions())
		},
		errors: (*Error).JSON,
	},
	{
		dir: "messages",
		request: func(body []byte, opts RequestOptions) ([]byte, []Drop, error) {
			out, info, err := MessagesRequest(body, opts)
			return out, info.Dropped, err
		},
		reply: func(t *testing.T, req, body []byte) ([]byte, error) {
			return MessagesResponse(body, messagesInfo(t, req), testResponseOptions())
		},
		stream: func(t *testing.T, req []byte) LineConverter {
			info := messagesInfo(t, req)
			info.InputTokens = 118 // the proxy's own count
			return NewMessagesStream(info, testResponseOptions())
		},
		errors: (*Error).AnthropicJSON,
	},
}

func responsesInfo(t *testing.T, req []byte) ResponsesInfo {
	t.Helper()
	_, info, err := ResponsesRequest(req, RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func messagesInfo(t *testing.T, req []byte) MessagesInfo {
	t.Helper()
	_, info, err := MessagesRequest(req, RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// inputs lists testdata/<dir>/<kind>/*.<ext>, less the shared request.json.
func inputs(t *testing.T, d dialect, kind, ext string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", d.dir, kind, "*."+ext))
	if err != nil || len(files) == 0 {
		t.Fatalf("no inputs in testdata/%s/%s: %v", d.dir, kind, err)
	}
	out := files[:0]
	for _, f := range files {
		if filepath.Base(f) != "request.json" {
			out = append(out, f)
		}
	}
	return out
}

func goldenPath(in string) string { return strings.TrimSuffix(in, filepath.Ext(in)) + ".golden" }

func TestDialectRequestGolden(t *testing.T) {
	for _, d := range dialects {
		for _, in := range inputs(t, d, "request", "json") {
			t.Run(d.dir+"/"+filepath.Base(in), func(t *testing.T) {
				body, dropped, err := d.request(read(t, in), RequestOptions{NumCtx: 8192})
				if err != nil {
					t.Fatalf("translate: %v", err)
				}
				var chat api.ChatRequest
				if err := json.Unmarshal(body, &chat); err != nil {
					t.Fatalf("Ollama cannot decode the translation: %v\n%s", err, body)
				}
				if chat.Options["num_ctx"] != float64(8192) {
					t.Errorf("options.num_ctx = %v, want 8192", chat.Options["num_ctx"])
				}
				golden(t, goldenPath(in), marshalGolden(t, struct {
					Ollama  json.RawMessage `json:"ollama"`
					Dropped []Drop          `json:"dropped"`
				}{indent(t, body), dropped}))
			})
		}
	}
}

func TestDialectReplyGolden(t *testing.T) {
	for _, d := range dialects {
		req := read(t, filepath.Join("testdata", d.dir, "reply", "request.json"))
		for _, in := range inputs(t, d, "reply", "json") {
			t.Run(d.dir+"/"+filepath.Base(in), func(t *testing.T) {
				out, err := d.reply(t, req, read(t, in))
				if err != nil {
					var e *Error
					if !errors.As(err, &e) {
						t.Fatalf("error is %T, want *Error", err)
					}
					out = d.errors(e)
				}
				golden(t, goldenPath(in), append(indent(t, out), '\n'))
			})
		}
	}
}

func TestDialectStreamGolden(t *testing.T) {
	for _, d := range dialects {
		req := read(t, filepath.Join("testdata", d.dir, "stream", "request.json"))
		for _, in := range inputs(t, d, "stream", "ndjson") {
			t.Run(d.dir+"/"+filepath.Base(in), func(t *testing.T) {
				s := d.stream(t, req)
				var buf bytes.Buffer
				err := copyLines(&buf, bytes.NewReader(read(t, in)), s)
				checkEvents(t, d.dir, buf.Bytes())
				ending := "finish: ok\n"
				if err != nil {
					ending = "finish: " + err.Error() + "\n"
				}
				golden(t, goldenPath(in), append(buf.Bytes(), ending...))
			})
		}
	}
}

// checkEvents checks the SSE framing every client parses: "event: T" then
// "data: {…}" whose type is T; Responses events count their
// sequence_number from 0.
func checkEvents(t *testing.T, dir string, sse []byte) {
	t.Helper()
	seq := 0
	for _, ev := range strings.Split(strings.TrimSuffix(string(sse), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(ev, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("malformed event %q", ev)
		}
		name = strings.TrimPrefix(name, "event: ")
		var v struct {
			Type string `json:"type"`
			Seq  *int   `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("event %s data is not JSON: %v\n%s", name, err, data)
		}
		if v.Type != name {
			t.Errorf("event %s has type %q", name, v.Type)
		}
		if dir == "responses" {
			if v.Seq == nil || *v.Seq != seq {
				t.Errorf("event %s sequence_number = %v, want %d", name, v.Seq, seq)
			}
			seq++
		}
	}
}
