package translate

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The files in testdata/real were recorded from a real Ollama v0.17.4
// (a tiny generated model as scripts/realollama makes it, temperature 0): for one request per
// dialect, Ollama's own /v1/responses or /v1/messages answer (*_v1.json,
// *_v1.sse) and its /api/chat answer to this package's translation of the
// same request (*_api_chat.json, *_api_chat.ndjson). Both ran the same
// prompt (equal input token counts) and so produced the same text. These
// tests hold the translations back to the shapes Ollama's own endpoints
// send, which the SDKs were measured to accept.

func realFile(t *testing.T, name string) []byte {
	t.Helper()
	return read(t, filepath.Join("testdata", "real", name))
}

// keys returns the sorted top-level keys of a JSON object.
func keys(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sseEvents splits an SSE body into event names and data objects.
func sseEvents(t *testing.T, b []byte) ([]string, []map[string]any) {
	t.Helper()
	var names []string
	var data []map[string]any
	for _, ev := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		name, d, ok := strings.Cut(ev, "\ndata: ")
		if !ok {
			t.Fatalf("malformed event %q", ev)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			t.Fatal(err)
		}
		names = append(names, strings.TrimPrefix(name, "event: "))
		data = append(data, v)
	}
	return names, data
}

func TestRealResponsesWhole(t *testing.T) {
	_, info, err := ResponsesRequest(realFile(t, "responses_request.json"), RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := ResponsesResponse(realFile(t, "responses_api_chat.json"), info, testResponseOptions())
	if err != nil {
		t.Fatal(err)
	}
	real := realFile(t, "responses_v1.json")
	if diff := cmp.Diff(keys(t, real), keys(t, mine)); diff != "" {
		t.Errorf("response members (-Ollama's /v1 +translation):\n%s", diff)
	}
	var a, b struct {
		Output []struct {
			Type    string
			Content []struct{ Type, Text string }
		}
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
			TotalTokens  int `json:"total_tokens"`
		}
	}
	_ = json.Unmarshal(real, &a)
	_ = json.Unmarshal(mine, &b)
	if diff := cmp.Diff(a.Output, b.Output); diff != "" {
		t.Errorf("output (-Ollama's /v1 +translation):\n%s", diff)
	}
	if a.Usage != b.Usage {
		t.Errorf("usage %+v, Ollama's /v1 %+v", b.Usage, a.Usage)
	}
}

func TestRealResponsesStream(t *testing.T) {
	_, info, err := ResponsesRequest(realFile(t, "responses_request.json"), RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := NewResponsesStream(info, testResponseOptions()).Copy(&buf, bytes.NewReader(realFile(t, "responses_api_chat.ndjson"))); err != nil {
		t.Fatal(err)
	}
	realNames, realData := sseEvents(t, realFile(t, "responses_v1.sse"))
	names, data := sseEvents(t, buf.Bytes())
	// Ollama's /v1 reports a reply cut at max_output_tokens as completed,
	// and so does the translation: Codex stops on an incomplete one.
	if diff := cmp.Diff(realNames, names); diff != "" {
		t.Errorf("event order (-Ollama's /v1 +translation):\n%s", diff)
	}
	for i := range min(len(data), len(realData)) {
		if diff := cmp.Diff(sortedKeys(realData[i]), sortedKeys(data[i])); diff != "" {
			t.Errorf("event %d %s members (-Ollama's /v1 +translation):\n%s", i, names[i], diff)
		}
	}
	lastReal := realData[len(realData)-1]["response"].(map[string]any)
	last := data[len(data)-1]["response"].(map[string]any)
	if diff := cmp.Diff(lastReal["usage"], last["usage"]); diff != "" {
		t.Errorf("final usage (-Ollama's /v1 +translation):\n%s", diff)
	}
	if diff := cmp.Diff(outputTexts(lastReal), outputTexts(last)); diff != "" {
		t.Errorf("final text (-Ollama's /v1 +translation):\n%s", diff)
	}
}

func sortedKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func outputTexts(resp map[string]any) []string {
	var out []string
	for _, it := range resp["output"].([]any) {
		for _, c := range it.(map[string]any)["content"].([]any) {
			out = append(out, c.(map[string]any)["text"].(string))
		}
	}
	return out
}

func TestRealMessages(t *testing.T) {
	_, info, err := MessagesRequest(realFile(t, "messages_request.json"), RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := MessagesResponse(realFile(t, "messages_api_chat.json"), info, testResponseOptions())
	if err != nil {
		t.Fatal(err)
	}
	real := realFile(t, "messages_v1.json")
	// stop_sequence is in Anthropic's message object; Ollama's leaves it out.
	if diff := cmp.Diff(append(keys(t, real), "stop_sequence"), keys(t, mine), cmp.Transformer("sort", func(s []string) []string {
		s = slices.Clone(s)
		sort.Strings(s)
		return s
	})); diff != "" {
		t.Errorf("message members (-Ollama's /v1 +translation):\n%s", diff)
	}
	var a, b map[string]any
	_ = json.Unmarshal(real, &a)
	_ = json.Unmarshal(mine, &b)
	for _, k := range []string{"content", "stop_reason", "usage", "model", "role", "type"} {
		if diff := cmp.Diff(a[k], b[k]); diff != "" {
			t.Errorf("%s (-Ollama's /v1 +translation):\n%s", k, diff)
		}
	}

	var buf bytes.Buffer
	if err := NewMessagesStream(info, testResponseOptions()).Copy(&buf, bytes.NewReader(realFile(t, "messages_api_chat.ndjson"))); err != nil {
		t.Fatal(err)
	}
	realNames, realData := sseEvents(t, realFile(t, "messages_v1.sse"))
	names, data := sseEvents(t, buf.Bytes())
	// The translation adds the ping Anthropic sends after message_start.
	want := append([]string{realNames[0], "ping"}, realNames[1:]...)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("event order (-Ollama's /v1 +translation):\n%s", diff)
	}
	text := func(evs []map[string]any) string {
		var s string
		for _, e := range evs {
			if d, ok := e["delta"].(map[string]any); ok && d["type"] == "text_delta" {
				s += d["text"].(string)
			}
		}
		return s
	}
	if text(realData) != text(data) {
		t.Errorf("streamed text %q, Ollama's /v1 %q", text(data), text(realData))
	}
	if diff := cmp.Diff(realData[len(realData)-2], data[len(data)-2], cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == `["delta"]`
	}, cmp.Ignore())); diff != "" {
		t.Errorf("message_delta (-Ollama's /v1 +translation):\n%s", diff)
	}
}
