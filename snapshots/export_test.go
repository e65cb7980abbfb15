package snapshots

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Each accepted import shape decodes to messages that export as the golden
// file next to it.
func TestDecodeImport(t *testing.T) {
	inputs, _ := filepath.Glob("testdata/import/*.json")
	if len(inputs) == 0 {
		t.Fatal("no testdata/import/*.json")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			exp, err := DecodeImport(data)
			if err != nil {
				t.Fatal(err)
			}
			out, err := EncodeExport(&Session{ID: "imported", Model: exp.Model, Metadata: exp.Metadata, Messages: exp.Messages})
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("import", name+".golden"), out)
		})
	}
}

// A chat request's messages keep their bytes exactly; ctxproxy's own
// annotations are taken out and become fields.
func TestDecodeImportRaw(t *testing.T) {
	body := `{"model":"m","messages":[` +
		`{ "role": "user",  "content": "a < b", "images": ["x"] },` +
		`{"role":"user","content":"pin me","_importance":0.9,"_preserve":true},` +
		`{"role":"assistant","content":"plain","timestamp":"2026-01-02T15:04:05Z","metadata":{"k":"v"}},` +
		`{"role":"user","content":"pinned picture","images":["x"],"_preserve":true}]}`
	exp, err := DecodeImport([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []Message{
		{Role: "user", Content: "a < b", Raw: []byte(`{ "role": "user",  "content": "a < b", "images": ["x"] }`)},
		// Once the annotations are out, role and content say it all.
		{Role: "user", Content: "pin me", Importance: ptr(0.9), Preserve: true},
		{Role: "assistant", Content: "plain", Timestamp: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), Metadata: map[string]any{"k": "v"}},
		// Other keys stay in the raw message.
		{Role: "user", Content: "pinned picture", Preserve: true, Raw: []byte(`{"content":"pinned picture","images":["x"],"role":"user"}`)},
	}
	if d := diff(want, exp.Messages); d != "" {
		t.Errorf("DecodeImport (-want +got):\n%s", d)
	}
}

func TestDecodeImportMalformed(t *testing.T) {
	tests := []struct {
		name, in, reason string
	}{
		{"empty", "  ", "empty"},
		{"null", "null", "object or array"},
		{"string", `"messages"`, "object or array"},
		{"number", `42`, "object or array"},
		{"not JSON", `{"messages": [`, "unexpected end"},
		{"trailing garbage", `[{"role":"user","content":"x"}] extra`, "invalid character"},
		{"two values", `{"messages":[]} {"messages":[]}`, "invalid character"},
		{"no messages", `{"session_id":"x"}`, `no "messages"`},
		{"messages null", `{"messages":null}`, `no "messages"`},
		{"messages object", `{"messages":{"role":"user"}}`, "not an array"},
		{"message not object", `[1]`, "messages[0]: not a JSON object"},
		{"no role", `[{"role":"user","content":"a"},{"content":"b"}]`, `messages[1]: "role" missing`},
		{"role not string", `[{"role":5}]`, `"role" missing or not a string`},
		{"unknown role", `[{"role":"wizard","content":"x"}]`, `messages[0]: "role" "wizard" is not one of system, developer, user, assistant, tool`},
		{"no content", `[{"role":"user"}]`, `messages[0]: no "content"`},
		{"content null", `[{"role":"user","content":null}]`, `no "content"`},
		{"content number", `[{"role":"user","content":5}]`, `"content" is neither`},
		{"content object", `[{"role":"user","content":{"text":"x"}}]`, `"content" is neither`},
		{"parts not objects", `[{"role":"user","content":["x"]}]`, `"content" is neither`},
		{"bad timestamp", `[{"role":"user","content":"x","timestamp":"yesterday"}]`, `"timestamp" is not an ISO 8601 time`},
		{"importance too high", `[{"role":"user","content":"x","importance":2}]`, `"importance" is not a number in [0, 1]`},
		{"importance string", `[{"role":"user","content":"x","importance":"high"}]`, `"importance" is not a number`},
		{"annotation too low", `[{"role":"user","content":"x","_importance":-0.1}]`, `"_importance" is not a number`},
		{"metadata array", `[{"role":"user","content":"x","metadata":[]}]`, `"metadata" is not an object`},
		{"preserve string", `[{"role":"user","content":"x","_preserve":"yes"}]`, `"_preserve" is not a boolean`},
		{"raw string", `[{"role":"user","content":"x","raw":"{}"}]`, `"raw" is not a JSON object`},
		{"session metadata array", `{"messages":[],"metadata":[1]}`, "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp, err := DecodeImport([]byte(tt.in))
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("DecodeImport(%s) = %+v, %v; want ErrMalformed saying %q", tt.in, exp, err, tt.reason)
			}
		})
	}
}

// Export, then import: the same conversation, raw bytes, timestamps,
// importance and metadata included.
func TestExportImportRoundTrip(t *testing.T) {
	s := fullSession("round trip/ü")
	s.Messages = append(s.Messages,
		Message{Role: "assistant", Content: "tool time", Timestamp: t0,
			Raw: []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`)},
		Message{Role: "user", Content: "line one\nline \"two\" <tag> \u2028", Timestamp: t0.In(time.FixedZone("X", 3600))},
	)
	data, err := EncodeExport(s)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := DecodeImport(data)
	if err != nil {
		t.Fatalf("the export does not import: %v\n%s", err, data)
	}
	want := s.Clone()
	want.Messages[len(want.Messages)-1].Timestamp = t0.UTC()
	withDefaultImportance(want.Messages)
	if d := diff(want.Messages, exp.Messages); d != "" {
		t.Errorf("messages after export and import (-want +got):\n%s", d)
	}
	if d := diff(s.Metadata, exp.Metadata); d != "" || exp.SessionID != s.ID || exp.Model != s.Model {
		t.Errorf("session fields after export and import: id %q model %q (-want +got metadata):\n%s", exp.SessionID, exp.Model, d)
	}
	// And exporting again gives the same bytes.
	again, _ := EncodeExport(&Session{ID: exp.SessionID, Model: exp.Model, Created: exp.Created, Updated: exp.Updated, Metadata: exp.Metadata, Messages: exp.Messages})
	if !bytes.Equal(data, again) {
		t.Errorf("export → import → export changed the file:\n%s\n---\n%s", data, again)
	}
}

func TestExportEmpty(t *testing.T) {
	data, err := EncodeExport(&Session{ID: "empty"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "export-empty.golden", data)
	if exp, err := DecodeImport(data); err != nil || len(exp.Messages) != 0 {
		t.Errorf("an empty export does not import: %+v, %v", exp, err)
	}
}

// withDefaultImportance gives unmarked messages the importance an export
// writes for them.
func withDefaultImportance(msgs []Message) {
	for i := range msgs {
		if msgs[i].Importance == nil {
			imp := DefaultImportance
			msgs[i].Importance = &imp
		}
	}
}

// The messages the chat APIs send import: an assistant turn with only
// tool calls, a tool result, a developer message, roles in any case.
func TestImportAcceptsEveryChatRole(t *testing.T) {
	in := `[{"role":"system","content":"s"},{"role":"Developer","content":"d"},{"role":"user","content":[{"type":"text","text":"u"}]},` +
		`{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{}}}]},{"role":"tool","content":"42"},` +
		`{"role":"user","images":["aGk="]}]`
	exp, err := DecodeImport([]byte(in))
	if err != nil || len(exp.Messages) != 6 {
		t.Fatalf("DecodeImport = %+v, %v", exp, err)
	}
}
