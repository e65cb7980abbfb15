package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/ollama/ollama/api"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with the golden file, or rewrites it under -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// indent pretty-prints JSON for golden files, keeping key order.
func indent(t *testing.T, b []byte) json.RawMessage {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		t.Fatalf("output is not valid JSON: %v\n%s", err, b)
	}
	return buf.Bytes()
}

func marshalGolden(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// testResponseOptions gives deterministic ids and clock.
func testResponseOptions() ResponseOptions {
	n := 0
	return ResponseOptions{
		NewID: func(prefix string) string {
			n++
			return fmt.Sprintf("%stest%04d", prefix, n)
		},
		Now: func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) },
	}
}

// requestCases are the request goldens: testdata/request/<file>.json in,
// testdata/request/<name>.golden out.
var requestCases = []struct {
	name, file string
	opts       RequestOptions
}{
	{name: "all_options", opts: RequestOptions{NumCtx: 8192}},
	{name: "minimal", opts: RequestOptions{NumCtx: 8192}},
	{name: "minimal_model_sampling", file: "minimal", opts: RequestOptions{ModelSampling: true}},
	{name: "parts_images", opts: RequestOptions{NumCtx: 8192}},
	{name: "image_escaped", opts: RequestOptions{NumCtx: 8192}},
	{name: "tools", opts: RequestOptions{NumCtx: 16384}},
	{name: "tool_choice_none", opts: RequestOptions{NumCtx: 8192}},
	{name: "tool_choice_required", opts: RequestOptions{NumCtx: 8192}},
	{name: "tool_choice_named", opts: RequestOptions{NumCtx: 8192}},
	{name: "tool_choice_allowed", opts: RequestOptions{NumCtx: 8192}},
	{name: "json_object", opts: RequestOptions{NumCtx: 8192}},
	{name: "json_schema", opts: RequestOptions{NumCtx: 8192}},
	{name: "json_schema_without_schema", opts: RequestOptions{NumCtx: 8192}},
	{name: "stop_string", opts: RequestOptions{NumCtx: 8192}},
	{name: "stop_empty_array", opts: RequestOptions{NumCtx: 8192}},
	{name: "max_completion_tokens", opts: RequestOptions{NumCtx: 8192}},
	{name: "reasoning_history", opts: RequestOptions{NumCtx: 8192}},
	{name: "reasoning_object_none", opts: RequestOptions{NumCtx: 8192}},
	{name: "reasoning_minimal", opts: RequestOptions{NumCtx: 8192}},
	{name: "think_extra", opts: RequestOptions{NumCtx: 8192}},
	{name: "roles_and_names", opts: RequestOptions{NumCtx: 8192}},
	{name: "empty_content_parts", opts: RequestOptions{NumCtx: 8192}},
	{name: "stream_false_usage", opts: RequestOptions{NumCtx: 8192}},
}

func TestRequestGolden(t *testing.T) {
	for _, tc := range requestCases {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = tc.name
			}
			in := read(t, filepath.Join("testdata", "request", file+".json"))
			body, info, err := Request(in, tc.opts)
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			// What Ollama will decode.
			var chat api.ChatRequest
			if err := json.Unmarshal(body, &chat); err != nil {
				t.Fatalf("Ollama cannot decode the translation: %v\n%s", err, body)
			}
			if chat.Stream == nil || *chat.Stream != info.Stream {
				t.Errorf("stream = %v, want explicit %v", chat.Stream, info.Stream)
			}
			if tc.opts.NumCtx > 0 && chat.Options["num_ctx"] != float64(tc.opts.NumCtx) {
				t.Errorf("options.num_ctx = %v, want %d", chat.Options["num_ctx"], tc.opts.NumCtx)
			}
			golden(t, filepath.Join("testdata", "request", tc.name+".golden"), marshalGolden(t, struct {
				Ollama       json.RawMessage `json:"ollama"`
				Model        string          `json:"model"`
				Stream       bool            `json:"stream"`
				IncludeUsage bool            `json:"include_usage"`
				Dropped      []Drop          `json:"dropped"`
			}{indent(t, body), info.Model, info.Stream, info.IncludeUsage, info.Dropped}))
		})
	}
}

// streamCases are the stream goldens: testdata/stream/<name>.ndjson in,
// the SSE text and how Finish ended it out.
var streamCases = []struct {
	name         string
	includeUsage bool
}{
	{name: "plain"},
	{name: "usage", includeUsage: true},
	{name: "length"},
	{name: "thinking", includeUsage: true},
	{name: "tool_calls", includeUsage: true},
	{name: "cut_off", includeUsage: true},
	{name: "cut_mid_line"},
	{name: "error_line", includeUsage: true},
	{name: "error_context_length"},
	{name: "content_on_done"},
	{name: "empty"},
	{name: "blank_lines_and_logprobs"},
}

// convertStream feeds the lines one at a time, as the proxy does, and
// returns the events and Finish's error.
func convertStream(t *testing.T, in []byte, info Info) ([]byte, error) {
	t.Helper()
	s := NewStream(info, testResponseOptions())
	var out []byte
	for line := range bytes.Lines(in) {
		var err error
		if out, err = s.Append(out, line); err != nil {
			out, ferr := s.Finish(out)
			return out, fmt.Errorf("%w (after %v)", ferr, err)
		}
	}
	return s.Finish(out)
}

func TestStreamGolden(t *testing.T) {
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			in := read(t, filepath.Join("testdata", "stream", tc.name+".ndjson"))
			out, err := convertStream(t, in, Info{Model: "llama3.1:8b", Stream: true, IncludeUsage: tc.includeUsage})
			finish := "ok"
			if err != nil {
				finish = err.Error()
			}
			golden(t, filepath.Join("testdata", "stream", tc.name+".golden"), fmt.Appendf(out, "-- finish: %s\n", finish))

			// Every event is one data: line of valid JSON, or [DONE].
			for ev := range strings.SplitSeq(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
				if ev == "" {
					continue
				}
				data, ok := strings.CutPrefix(ev, "data: ")
				if !ok || strings.Contains(data, "\n") {
					t.Errorf("malformed event %q", ev)
				}
				if data != "[DONE]" && !json.Valid([]byte(data)) {
					t.Errorf("event is not JSON: %q", data)
				}
			}
		})
	}
}

func TestResponseGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "response", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no response inputs: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			out, err := Response(read(t, f), Info{Model: "llama3.1:8b"}, testResponseOptions())
			if err != nil {
				t.Fatalf("Response: %v", err)
			}
			golden(t, strings.TrimSuffix(f, ".json")+".golden", append(indent(t, out), '\n'))
		})
	}
}

func TestBackendErrorGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "error", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no error inputs: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			var in struct {
				Status int    `json:"status"`
				Body   string `json:"body"`
			}
			if err := json.Unmarshal(read(t, f), &in); err != nil {
				t.Fatal(err)
			}
			e := BackendError(in.Status, []byte(in.Body))
			golden(t, strings.TrimSuffix(f, ".json")+".golden", marshalGolden(t, struct {
				Status int             `json:"status"`
				Body   json.RawMessage `json:"body"`
			}{e.Status, indent(t, e.JSON())}))
		})
	}
}

// TestRequestErrorGolden covers a few rejected requests end to end: the
// *Error's status and body as the client gets them.
func TestRequestErrorGolden(t *testing.T) {
	cases := []struct{ name, body string }{
		{"reasoning_effort_unknown", `{"model":"m","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"turbo"}`},
		{"http_image", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`},
		{"malformed", `{"model":"m","messages":[`},
	}
	var out []byte
	for _, tc := range cases {
		_, _, err := Request([]byte(tc.body), RequestOptions{})
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%s: err = %v, want *Error", tc.name, err)
		}
		out = append(out, marshalGolden(t, struct {
			Case   string          `json:"case"`
			Status int             `json:"status"`
			Body   json.RawMessage `json:"body"`
		}{tc.name, e.Status, indent(t, e.JSON())})...)
	}
	golden(t, filepath.Join("testdata", "request_errors.golden"), out)
}
