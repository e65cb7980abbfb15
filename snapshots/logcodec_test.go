package snapshots

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// randomText returns text of the kinds chat holds: words, markup, escapes
// and control characters, quotes, non-ASCII letters, emoji and, now and
// then, invalid UTF-8 (which the encoder writes as U+FFFD).
func randomText(r *rand.Rand) string {
	parts := []string{"the", "quick", " ", "\n", "\t", `"`, `\`, "<b>", "&amp;", "é", "日本語", "🙂",
		"\u2028", "\x01", "\x7f", "\xff", "\u00a0", "{}", "[1,2]", "/", "\r\n", "\ufffd"}
	var b strings.Builder
	for range r.IntN(30) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}

// randomMessage returns a message with any of the fields a stored one has.
func randomMessage(r *rand.Rand) Message {
	roles := []string{"user", "assistant", "system", "tool", "Developer", "ünïcode"}
	m := Message{Role: roles[r.IntN(len(roles))], Content: randomText(r)}
	if r.IntN(4) > 0 {
		m.Timestamp = t0.Add(time.Duration(r.Int64N(1e15)) - 5e14)
		if r.IntN(3) == 0 {
			m.Timestamp = m.Timestamp.In(time.FixedZone("", 3600*(r.IntN(20)-10)))
		}
	}
	if r.IntN(3) == 0 {
		m.Importance = ptr([]float64{0, 1, 0.5, 1e-9, 0.123456789, 2.5e-7}[r.IntN(6)])
	}
	if r.IntN(5) == 0 {
		m.Metadata = map[string]any{"type": randomText(r), "n": float64(r.IntN(100)), "list": []any{true, nil}}
	}
	m.Preserve = r.IntN(4) == 0
	if r.IntN(3) > 0 {
		raw, _ := json.Marshal(map[string]any{"role": m.Role, "content": m.Content, "images": []string{"aGk="}})
		if r.IntN(2) == 0 {
			raw = []byte(`{ "role" : "user", "content": "x\u00e9\n<>" , "n": [1, 2.5e3, {"a": null}] }`)
		}
		m.Raw = raw
	}
	return m
}

// randomChange returns a session and a changed copy, as an Update makes.
func randomChange(r *rand.Rand) (old, s *Session) {
	old = &Session{ID: "golden", Created: t0, Updated: t0}
	for range r.IntN(6) {
		old.Messages = append(old.Messages, randomMessage(r))
	}
	// As stored: text in valid UTF-8, times in UTC.
	b, err := encodeSession(old)
	if err != nil {
		panic(err)
	}
	if old, err = decodeSession(b); err != nil {
		panic(err)
	}
	s = old.Clone()
	s.Messages = s.Messages[:r.IntN(len(s.Messages)+1)]
	for range r.IntN(4) {
		s.Messages = append(s.Messages, randomMessage(r))
	}
	s.Updated = t0.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
	if r.IntN(3) == 0 {
		s.Model = randomText(r)
	}
	if r.IntN(4) == 0 {
		s.Created = t0.Add(-time.Hour)
	}
	if r.IntN(3) > 0 {
		s.Stats = Stats{Tokens: r.IntN(1e6), Limit: 8192, Usage: r.Float64(), Sent: r.IntN(9000), NumCtx: 4096,
			Dropped: r.IntN(3), Summarized: r.IntN(3), PromptTokens: 7, CompletionTokens: 9, Requests: r.IntN(100),
			Truncations: r.IntN(2), OverflowRetries: r.IntN(2)}
		if r.IntN(2) == 0 {
			s.Stats.LastTruncation = t0
			s.Stats.Budget = &adminapi.Budget{Total: 8192, SystemPrompt: 10, Tools: 20, ResponseReserve: 512, Conversation: 7000}
		}
	}
	if r.IntN(4) == 0 {
		s.Metadata = map[string]any{"agent": randomText(r)}
	}
	if r.IntN(5) == 0 {
		s.Summaries = []Summary{{Key: "k", Covers: 2, Text: randomText(r), Created: t0}}
	}
	return old, s
}

// Random changes, encoded as stores encode them, decode and apply to the
// session they were made from.
func TestDeltaRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	appends := 0
	for i := range 1000 {
		old, s := randomChange(r)
		p, err := encodeChange(old, s)
		if err != nil {
			t.Fatal(err)
		}
		_, ib, _, _ := splitPayload(p)
		if match, err := infoIs(ib, "golden"); err != nil || !match {
			t.Fatalf("change %d: infoIs(%s) = %v, %v", i, ib, match, err)
		}
		if p[0] != kindAppend {
			continue
		}
		appends++
		got, err := apply(old.Clone(), "golden", p)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := decodeSession(mustEncode(t, s))
		if d := diff(want, got); d != "" {
			t.Fatalf("change %d: applied (-want +got):\n%s", i, d)
		}
	}
	if appends < 500 {
		t.Errorf("only %d of 1000 changes were appends", appends)
	}
}

// mustEncode returns the body of a session record of s.
func mustEncode(t testing.TB, s *Session) []byte {
	t.Helper()
	b, err := encodeSession(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// oddBodies are append record bodies that ctxproxy does not write: keys
// twice or in another case, values of other types, numbers and strings
// at the edges of what encoding/json takes, and input that is not JSON.
var oddBodies = []string{
	`{"at":1,"updated":"2026-01-02T15:04:05Z","messages":[{"role":"user","content":"a\nb"}]}`,
	`{"at":1,"At":2}`,
	`{"at":1,"at":2}`,
	`{"\u0061t":1}`,
	`{"at":1.0}`,
	`{"at":1e2}`,
	`{"at":null}`,
	`{"at":"1"}`,
	`{"at":123456789012345678901}`,
	`{"at":1,"extra":true}`,
	`{"messages":null}`,
	`{"messages":[null]}`,
	`{"messages":[{"role":"a","role":"b"}]}`,
	`{"messages":[{"content":"\xff"}]}`,
	`{"messages":[{"content":"\ud800x"}]}`,
	`{"messages":[{"raw":null}]}`,
	`{"messages":[{"importance":1e400}]}`,
	`{"messages":[{"timestamp":"2026-01-02T15:04:05+01:00"}]}`,
	`{"messages":[{"timestamp":"2026-01-02 15:04:05Z"}]}`,
	`{"messages":[{"metadata":{"a":[1,{"b":null}]}}]}`,
	`{"stats":{"tokens":1,"budget":{"total":2}},"stats":{"limit":3}}`,
	`{"stats":{"budget":{"total":2,"Total":3}}}`,
	`{"metadata":null,"summaries":[{"key":"k"}]}`,
	`{"at":1,}`,
	`[]`,
	`null`,
	`{"session_id":"a","Session_ID":"b"}`,
	`{"session_id":"a","ſession_id":"b"}`,
	`{"session_id":"a","session_id":"b"}`,
	`{"session_id":null}`,
	`{"session_id":"\xff"}`,
}

// Odd bodies and listing entries decode or fail as corrupt records, and
// what decodes is stored again as it was read (checkDecode).
func TestDeltaDecodeOdd(t *testing.T) {
	old := decodeTarget(t)
	for _, body := range oddBodies {
		checkDecode(t, old, []byte(body))
	}
}

// decodeTarget returns the session that checkDecode applies records to:
// three messages, in the form they are stored.
func decodeTarget(tb testing.TB) *Session {
	s := &Session{ID: "golden", Created: t0, Updated: t0, Messages: conversation(3, 40, "decode")}
	s, err := decodeSession(mustEncode(tb, s))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// checkDecode applies data, as an append record's body, to old and reads
// it as a listing entry. Either fails only with ErrCorrupt; a record that
// applies is encoded again as a store would store the result, and that
// record applies to the same session.
func checkDecode(t *testing.T, old *Session, data []byte) {
	t.Helper()
	if _, err := infoIs(data, "golden"); err != nil && !isCorrupt(err) {
		t.Fatalf("infoIs(%q): %v does not wrap ErrCorrupt", data, err)
	}
	p := append([]byte("A{\"session_id\":\"golden\"}\n"), data...)
	got, err := apply(old.Clone(), "golden", p)
	if err != nil {
		if !isCorrupt(err) {
			t.Fatalf("apply(%q): %v does not wrap ErrCorrupt", data, err)
		}
		return
	}
	p2, err := encodeChange(old, got)
	if err != nil {
		// What a store refuses to write (an importance outside [0, 1],
		// a raw message that is not an object) may still be read.
		return
	}
	again, err := apply(old.Clone(), "golden", p2)
	if err != nil {
		t.Fatalf("%q: the record written again does not apply: %v\n%s", data, err, p2)
	}
	if d := diff(got, again); d != "" {
		t.Fatalf("%q: the record written again applies otherwise (-read +again):\n%s", data, d)
	}
}

// FuzzDeltaDecode holds apply to checkDecode on any append record body
// and listing entry.
func FuzzDeltaDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 1))
	for range 40 {
		old, s := randomChange(r)
		p, err := encodeChange(old, s)
		if err != nil {
			f.Fatal(err)
		}
		_, ib, body, _ := splitPayload(p)
		f.Add(ib)
		if p[0] == kindAppend {
			f.Add(body)
		}
	}
	_, p := turnRecord(f)
	_, ib, body, _ := splitPayload(p)
	f.Add(ib)
	f.Add(body)
	for _, body := range oddBodies {
		f.Add([]byte(body))
	}
	old := decodeTarget(f)
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, old, data) })
}
