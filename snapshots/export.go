package snapshots

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Export is a session in ctxproxy's portable format, what /export writes
// and /import reads:
//
//	{"session_id": "…", "metadata": {…},
//	 "messages": [{"role", "content", "timestamp" (ISO 8601 UTC),
//	               "importance", "metadata", "raw"}]}
//
// "raw", when present, is the message object as the client sent it, so
// that images, tool calls and unknown keys survive a round trip; tools that
// know only the other keys ignore it.
type Export struct {
	SessionID string         `json:"session_id"`
	Model     string         `json:"model,omitempty"`
	Created   time.Time      `json:"created,omitzero"`
	Updated   time.Time      `json:"updated,omitzero"`
	Metadata  map[string]any `json:"metadata"`
	Messages  []Message      `json:"messages"`
}

// DefaultImportance is the importance of a message the client did not
// mark: the neutral weight ctxproxy's importance strategy uses.
const DefaultImportance = 0.5

// EncodeExport writes s in the export format: indented, one message per
// line, each Raw verbatim.
func EncodeExport(s *Session) ([]byte, error) {
	var b bytes.Buffer
	field := func(name string, v any) error {
		j, err := marshal(v)
		if err != nil {
			return fmt.Errorf("snapshots: export %s: %w", name, err)
		}
		fmt.Fprintf(&b, "  %q: %s,\n", name, j)
		return nil
	}
	b.WriteString("{\n")
	if err := field("session_id", s.ID); err != nil {
		return nil, err
	}
	if s.Model != "" {
		field("model", s.Model)
	}
	if !s.Created.IsZero() {
		field("created", s.Created.UTC())
	}
	if !s.Updated.IsZero() {
		field("updated", s.Updated.UTC())
	}
	md := s.Metadata
	if md == nil {
		md = map[string]any{}
	}
	if err := field("metadata", md); err != nil {
		return nil, err
	}
	b.WriteString(`  "messages": [`)
	for i := range s.Messages {
		m := s.Messages[i]
		if m.Importance == nil {
			// An export gives every message an importance; an
			// unmarked one is exported with the weight ctxproxy's
			// importance strategy gives it.
			imp := DefaultImportance
			m.Importance = &imp
		}
		line, err := appendMessages(nil, []Message{m})
		if err != nil {
			return nil, fmt.Errorf("snapshots: export: %w", err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		b.Write(line[1 : len(line)-1])
	}
	if len(s.Messages) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("]\n}\n")
	return b.Bytes(), nil
}

// ErrMalformed reports an import that is not one of the accepted shapes;
// the error says where and why.
var ErrMalformed = errors.New("snapshots: malformed import")

// DecodeImport reads an import: an export (Export), a bare JSON array of
// messages, or a chat request body (an object with "messages", Ollama or
// OpenAI shape, content a string or an array of parts). Each
// message keeps its raw JSON. Anything else fails with ErrMalformed and
// the reason.
func DecodeImport(data []byte) (*Export, error) {
	data = trimSpace(data)
	bad := func(format string, args ...any) (*Export, error) {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(data) == 0 {
		return bad("empty")
	}
	exp := new(Export)
	var list json.RawMessage
	switch data[0] {
	case '[':
		list = data
	case '{':
		var top struct {
			SessionID string          `json:"session_id"`
			Model     string          `json:"model"`
			Created   time.Time       `json:"created"`
			Updated   time.Time       `json:"updated"`
			Metadata  map[string]any  `json:"metadata"`
			Messages  json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(data, &top); err != nil {
			return bad("%v", err)
		}
		if top.Messages == nil || string(top.Messages) == "null" {
			return bad(`no "messages" array`)
		}
		exp.SessionID, exp.Model, exp.Metadata = top.SessionID, top.Model, top.Metadata
		exp.Created, exp.Updated = top.Created.UTC(), top.Updated.UTC()
		list = top.Messages
	default:
		return bad("want a JSON object or array")
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(list, &raws); err != nil {
		return bad(`"messages" is not an array of messages: %v`, err)
	}
	exp.Messages = make([]Message, len(raws))
	for i, r := range raws {
		m, err := importMessage(r)
		if err != nil {
			return bad("messages[%d]: %v", i, err)
		}
		exp.Messages[i] = m
	}
	return exp, nil
}

// annotations are the keys that describe a message rather than being part
// of it: Export's message keys and ctxproxy's request annotations. They
// are taken out of the raw message (a backend would refuse them).
var annotations = []string{"timestamp", "importance", "metadata", "preserve", "_importance", "_preserve"}

// importRoles are the roles an imported message may have: the ones the
// chat APIs ctxproxy speaks send (developer is OpenAI's system). A
// history is forwarded as imported, so a role no backend knows would
// fail every later turn of the session instead of the import.
var importRoles = []string{"system", "developer", "user", "assistant", "tool"}

// CheckRole refuses a role that none of the chat APIs sends, for
// messages stored outside a chat (an import, an appended message).
func CheckRole(role string) error {
	if !slices.Contains(importRoles, strings.ToLower(role)) {
		return fmt.Errorf(`"role" %q is not one of %s`, role, strings.Join(importRoles, ", "))
	}
	return nil
}

// hasAny reports whether f has one of keys, not null.
func hasAny(f map[string]json.RawMessage, keys ...string) bool {
	for _, k := range keys {
		if v, ok := f[k]; ok && string(v) != "null" {
			return true
		}
	}
	return false
}

func importMessage(r json.RawMessage) (Message, error) {
	var f map[string]json.RawMessage
	if len(r) == 0 || r[0] != '{' || json.Unmarshal(r, &f) != nil {
		return Message{}, errors.New("not a JSON object")
	}
	var m Message
	if err := json.Unmarshal(f["role"], &m.Role); err != nil || m.Role == "" {
		return Message{}, errors.New(`"role" missing or not a string`)
	}
	if err := CheckRole(m.Role); err != nil {
		return Message{}, err
	}
	if !hasAny(f, "content", "tool_calls", "images", "raw") {
		return Message{}, errors.New(`no "content" (nor "tool_calls" or "images")`)
	}
	text, err := contentText(f["content"])
	if err != nil {
		return Message{}, err
	}
	m.Content = text
	if v, ok := f["timestamp"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &m.Timestamp); err != nil {
			return Message{}, fmt.Errorf(`"timestamp" is not an ISO 8601 time: %s`, v)
		}
		m.Timestamp = m.Timestamp.UTC()
	}
	for _, name := range []string{"importance", "_importance"} {
		v, ok := f[name]
		if !ok || string(v) == "null" {
			continue
		}
		var imp float64
		if err := json.Unmarshal(v, &imp); err != nil || imp < 0 || imp > 1 {
			return Message{}, fmt.Errorf("%q is not a number in [0, 1]: %s", name, v)
		}
		m.Importance = &imp
	}
	if v, ok := f["metadata"]; ok {
		if err := json.Unmarshal(v, &m.Metadata); err != nil {
			return Message{}, errors.New(`"metadata" is not an object`)
		}
	}
	for _, name := range []string{"preserve", "_preserve"} {
		if v, ok := f[name]; ok && string(v) != "null" {
			if err := json.Unmarshal(v, &m.Preserve); err != nil {
				return Message{}, fmt.Errorf("%q is not a boolean", name)
			}
		}
	}
	if raw, ok := f["raw"]; ok && string(raw) != "null" {
		if raw[0] != '{' {
			return Message{}, errors.New(`"raw" is not a JSON object`)
		}
		m.Raw = raw
		return m, nil
	}
	stripped := false
	for _, name := range annotations {
		if _, ok := f[name]; ok {
			delete(f, name)
			stripped = true
		}
	}
	switch {
	case !stripped:
		// A chat request's message: keep its bytes.
		m.Raw = r
	case onlyRoleAndText(f):
		// An exported message: role and content say it all.
	default:
		if m.Raw, err = json.Marshal(f); err != nil {
			return Message{}, err
		}
	}
	return m, nil
}

// onlyRoleAndText reports whether a message's keys are just role and a
// string content, so that it can be rebuilt from Role and Content.
func onlyRoleAndText(f map[string]json.RawMessage) bool {
	for k, v := range f {
		if k != "role" && (k != "content" || len(v) == 0 || v[0] != '"') {
			return false
		}
	}
	return true
}

// contentText returns a message content's text: the string, or the text
// of an array of parts (OpenAI) joined with "\n"; missing or null content
// (an assistant message with only tool calls) is empty.
func contentText(v json.RawMessage) (string, error) {
	if len(v) == 0 || string(v) == "null" {
		return "", nil
	}
	switch v[0] {
	case '"':
		var s string
		err := json.Unmarshal(v, &s)
		return s, err
	case '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(v, &parts); err != nil {
			return "", errors.New(`"content" is neither a string nor an array of parts`)
		}
		var texts []string
		for _, p := range parts {
			if p.Text != nil && (p.Type == "" || p.Type == "text" || p.Type == "input_text") {
				texts = append(texts, *p.Text)
			}
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", errors.New(`"content" is neither a string nor an array of parts`)
}

// Import loads an import (see DecodeImport) into session id: its messages
// replace the session's, its metadata keys are set over the session's, and
// messages without a timestamp get the time of the import. The token
// count and usage are left at zero for the next request to measure.
//
// Nothing changes when the data is malformed. Otherwise the conversation
// it replaces is first saved as a ReasonImport snapshot, returned as undo
// (zero when there was none), so an import can be undone like a restore.
func Import(ctx context.Context, st Store, id string, data []byte) (n int, undo adminapi.SnapshotInfo, err error) {
	if err := CheckID(id); err != nil {
		return 0, undo, err
	}
	exp, err := DecodeImport(data)
	if err != nil {
		return 0, undo, err
	}
	cur, err := st.Get(ctx, id)
	switch {
	case err == nil && len(cur.Messages) > 0:
		if undo, err = st.SaveSnapshot(ctx, NewSnapshot(cur, ReasonImport)); err != nil {
			return 0, undo, fmt.Errorf("snapshots: import: save the current state first: %w", err)
		}
	case err != nil && !errors.Is(err, ErrNotFound):
		return 0, undo, err
	}
	now := time.Now().UTC()
	for i := range exp.Messages {
		if exp.Messages[i].Timestamp.IsZero() {
			exp.Messages[i].Timestamp = now
		}
	}
	err = st.Update(ctx, id, func(s *Session) error {
		s.Messages = exp.Messages
		if len(exp.Metadata) > 0 {
			if s.Metadata == nil {
				s.Metadata = make(map[string]any, len(exp.Metadata))
			}
			maps.Copy(s.Metadata, exp.Metadata)
		}
		if exp.Model != "" {
			s.Model = exp.Model
		}
		s.Stats = Stats{
			Limit:          s.Stats.Limit,
			Requests:       s.Stats.Requests,
			Truncations:    s.Stats.Truncations,
			LastTruncation: s.Stats.LastTruncation,
		}
		return nil
	})
	return len(exp.Messages), undo, err
}
