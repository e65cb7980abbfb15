package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// flushRecorder records what was written between flushes.
type flushRecorder struct {
	bytes.Buffer
	flushed []string
	last    int
}

func (f *flushRecorder) Flush() {
	f.flushed = append(f.flushed, f.String()[f.last:])
	f.last = f.Len()
}

func TestCopyFlushesEachLine(t *testing.T) {
	in := read(t, filepath.Join("testdata", "stream", "plain.ndjson"))
	var w flushRecorder
	s := NewStream(Info{Model: "llama3.1:8b", Stream: true}, testResponseOptions())
	if err := s.Copy(&w, bytes.NewReader(in)); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	want, _ := convertStream(t, in, Info{Model: "llama3.1:8b", Stream: true})
	if diff := cmp.Diff(string(want), w.String()); diff != "" {
		t.Errorf("Copy output differs from Append's (-want +got):\n%s", diff)
	}
	// Four lines in, four flushes out: the last one carries the finish
	// chunk and [DONE].
	if len(w.flushed) != 4 || !strings.HasSuffix(w.flushed[3], "data: [DONE]\n\n") {
		t.Errorf("flushes = %q", w.flushed)
	}
}

func TestCopyCutOff(t *testing.T) {
	in := read(t, filepath.Join("testdata", "stream", "cut_off.ndjson"))
	var w bytes.Buffer
	err := NewStream(Info{Stream: true}, testResponseOptions()).Copy(&w, bytes.NewReader(in))
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Copy: %v, want ErrIncomplete", err)
	}
	if out := w.String(); strings.Contains(out, "[DONE]") || strings.Contains(out, `"finish_reason":"stop"`) ||
		!strings.HasSuffix(out, `"code":"stream_incomplete"}}`+"\n\n") {
		t.Errorf("a cut-off stream must end in an error event, without finish or [DONE]:\n%s", out)
	}
}

func TestCopyReadError(t *testing.T) {
	in := read(t, filepath.Join("testdata", "stream", "plain.ndjson"))
	first, _, _ := bytes.Cut(in, []byte("\n"))
	boom := errors.New("connection reset")
	r := io.MultiReader(bytes.NewReader(append(first, '\n')), iotest.ErrReader(boom))
	var w bytes.Buffer
	err := NewStream(Info{Stream: true}, testResponseOptions()).Copy(&w, r)
	if !errors.Is(err, ErrIncomplete) || !errors.Is(err, boom) {
		t.Fatalf("Copy: %v, want ErrIncomplete and the read error", err)
	}
}

func TestCopyBadLine(t *testing.T) {
	var w bytes.Buffer
	err := NewStream(Info{Stream: true}, testResponseOptions()).Copy(&w, strings.NewReader("not json\n"))
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Copy: %v, want ErrIncomplete", err)
	}
	if !strings.Contains(w.String(), "stream_incomplete") {
		t.Errorf("no error event: %s", w.String())
	}
}

// TestCopyLongLine feeds a line longer than Copy's read buffer.
func TestCopyLongLine(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	in := `{"model":"m","created_at":"2025-06-01T12:00:00Z","message":{"role":"assistant","content":"` + long + `"},"done":false}` + "\n" +
		`{"model":"m","created_at":"2025-06-01T12:00:01Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}`
	var w bytes.Buffer
	if err := NewStream(Info{Stream: true}, testResponseOptions()).Copy(&w, strings.NewReader(in)); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if !strings.Contains(w.String(), `"content":"`+long+`"`) || !strings.HasSuffix(w.String(), "data: [DONE]\n\n") {
		t.Errorf("long line lost (%d bytes out)", w.Len())
	}
}

func TestStreamAfterEnd(t *testing.T) {
	s := NewStream(Info{Stream: true}, testResponseOptions())
	done := []byte(`{"model":"m","message":{"role":"assistant","content":"hi"},"done":true,"done_reason":"stop"}`)
	out, err := s.Append(nil, done)
	if err != nil || !bytes.HasSuffix(out, []byte("data: [DONE]\n\n")) {
		t.Fatalf("Append = %s, %v", out, err)
	}
	if more, err := s.Append(nil, done); len(more) != 0 || err != nil {
		t.Errorf("a line after done gave %q, %v; want nothing", more, err)
	}
	for range 2 {
		if out, err := s.Finish(nil); len(out) != 0 || err != nil {
			t.Errorf("Finish after done = %q, %v; want nothing", out, err)
		}
	}
}

func TestStreamFinishTwice(t *testing.T) {
	s := NewStream(Info{Stream: true}, ResponseOptions{})
	out, err := s.Finish(nil)
	if !errors.Is(err, ErrIncomplete) || len(out) == 0 {
		t.Fatalf("Finish = %q, %v", out, err)
	}
	out, err = s.Finish(nil)
	if !errors.Is(err, ErrIncomplete) || len(out) != 0 {
		t.Errorf("second Finish = %q, %v; want the error and nothing appended", out, err)
	}
}

func TestStreamDefaults(t *testing.T) {
	// No NewID, no Now, no created_at, no model: random ids, the clock,
	// and the requested model.
	s := NewStream(Info{Model: "asked", Stream: true}, ResponseOptions{})
	out, err := s.Append(nil, []byte(`{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":true}`))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(out), "\n\n")
	var chunk struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Delta struct {
				ToolCalls []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(first, "data: ")), &chunk); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(chunk.ID, "chatcmpl-") || len(chunk.ID) < 20 || chunk.Created < 1700000000 || chunk.Model != "asked" {
		t.Errorf("chunk = %+v", chunk)
	}
	if len(chunk.Choices) != 1 || len(chunk.Choices[0].Delta.ToolCalls) != 1 || !strings.HasPrefix(chunk.Choices[0].Delta.ToolCalls[0].ID, "call_") {
		t.Errorf("tool call id missing: %s", first)
	}
}

func TestResponseRejects(t *testing.T) {
	var e *Error
	for _, body := range []string{`[1]`, `{"model":`, ``} {
		if _, err := Response([]byte(body), Info{}, ResponseOptions{}); !errors.As(err, &e) || e.Status != 502 {
			t.Errorf("Response(%q) = %v, want a 502 *Error", body, err)
		}
	}
	_, err := Response([]byte(`{"error":"model runner crashed"}`), Info{}, ResponseOptions{})
	if !errors.As(err, &e) || e.Status != 500 || e.Message != "model runner crashed" {
		t.Errorf("Response of an error body = %v", err)
	}
}

func TestResponseFixedID(t *testing.T) {
	out, err := Response([]byte(`{"model":"m","message":{"role":"assistant","content":"x"},"done":true}`), Info{}, ResponseOptions{ID: "chatcmpl-given"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, []byte(`{"id":"chatcmpl-given",`)) {
		t.Errorf("id not used: %s", out)
	}
}

// FuzzStream checks that no backend line panics the converter and that
// every event it writes is valid JSON.
func FuzzStream(f *testing.F) {
	for _, tc := range streamCases {
		if b, err := readFileLines(filepath.Join("testdata", "stream", tc.name+".ndjson")); err == nil {
			for _, l := range b {
				f.Add(l)
			}
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		s := NewStream(Info{Stream: true, IncludeUsage: true}, testResponseOptions())
		out, _ := s.Append(nil, line)
		out, _ = s.Finish(out)
		for ev := range strings.SplitSeq(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
			data, ok := strings.CutPrefix(ev, "data: ")
			if !ok || (data != "[DONE]" && !json.Valid([]byte(data))) {
				t.Fatalf("bad event %q from %q", ev, line)
			}
		}
	})
}

func readFileLines(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return bytes.Split(b, []byte("\n")), nil
}
