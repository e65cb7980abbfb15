package snapshots

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// decodeBoth decodes an append record's body with the fast decoder and
// with encoding/json. ok is the fast decoder's verdict; when it is true,
// the two must agree.
func decodeBoth(body []byte) (fast, slow delta, slowErr error, ok bool) {
	st, hasStats, ok := fastDelta(body, &fast)
	if hasStats {
		fast.Stats = &st
	}
	slowErr = json.Unmarshal(body, &slow)
	return fast, slow, slowErr, ok
}

// checkFast fails t when the fast decoders accept data and differ from
// encoding/json on it: another result, or no error where encoding/json
// has one.
func checkFast(t *testing.T, data []byte) {
	t.Helper()
	fast, slow, err, ok := decodeBoth(data)
	if ok {
		if err != nil {
			t.Fatalf("fast decoder accepts %q, encoding/json: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast decoder (-json +fast):\n%s", data, diffExact(slow, fast))
		}
	}
	var info struct {
		ID string `json:"session_id"`
	}
	infoErr := json.Unmarshal(data, &info)
	for _, id := range []string{"", "golden", info.ID} {
		match, ok := fastInfoIs(data, id)
		if !ok {
			continue
		}
		if infoErr != nil {
			t.Fatalf("fastInfoIs accepts %q, encoding/json: %v", data, infoErr)
		}
		if match != (info.ID == id) {
			t.Fatalf("fastInfoIs(%q, %q) = %v, encoding/json finds %q", data, id, match, info.ID)
		}
	}
}

// diffExact shows how two deltas differ, nil and empty apart.
func diffExact(want, got delta) string {
	w, _ := json.MarshalIndent(want, "", " ")
	g, _ := json.MarshalIndent(got, "", " ")
	return fmt.Sprintf("json: %s\nfast: %s\n(raw: %#v vs %#v)", w, g, want, got)
}

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
			s.Stats.Budget = &Allocation{Total: 8192, System: 10, Tools: 20, Reserve: 512, Conversation: 7000}
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

// Random changes, encoded as stores encode them, take the fast path and
// decode to what encoding/json decodes; applied, they give the session.
func TestFastDeltaRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	appends := 0
	for i := range 1000 {
		old, s := randomChange(r)
		p, err := encodeChange(old, s)
		if err != nil {
			t.Fatal(err)
		}
		_, ib, body, _ := splitPayload(p)
		if match, ok := fastInfoIs(ib, "golden"); !ok || !match {
			t.Fatalf("change %d: fastInfoIs(%s) = %v, %v", i, ib, match, ok)
		}
		if p[0] != kindAppend {
			continue
		}
		appends++
		checkFast(t, body)
		if _, _, _, ok := decodeBoth(body); !ok {
			t.Fatalf("change %d: the fast decoder leaves its own encoder's record to encoding/json: %s", i, body)
		}
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
func mustEncode(t *testing.T, s *Session) []byte {
	t.Helper()
	b, err := encodeSession(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The fast decoder leaves what it is not sure of to encoding/json, and
// agrees with it on the rest.
func TestFastDeltaFallsBack(t *testing.T) {
	for _, c := range []struct {
		body string
		fast bool
	}{
		{`{"at":1,"updated":"2026-01-02T15:04:05Z","messages":[{"role":"user","content":"a\nb"}]}`, true},
		{`{"at":1,"At":2}`, false},
		{`{"at":1,"at":2}`, false},
		{`{"\u0061t":1}`, false},
		{`{"at":1.0}`, false},
		{`{"at":1e2}`, false},
		{`{"at":null}`, false},
		{`{"at":"1"}`, false},
		{`{"at":123456789012345678901}`, false},
		{`{"at":1,"extra":true}`, false},
		{`{"messages":null}`, false},
		{`{"messages":[null]}`, false},
		{`{"messages":[{"role":"a","role":"b"}]}`, false},
		{`{"messages":[{"content":"\xff"}]}`, false},
		{`{"messages":[{"content":"\ud800x"}]}`, true},
		{`{"messages":[{"raw":null}]}`, true},
		{`{"messages":[{"importance":1e400}]}`, false},
		{`{"messages":[{"timestamp":"2026-01-02T15:04:05+01:00"}]}`, true},
		{`{"messages":[{"timestamp":"2026-01-02 15:04:05Z"}]}`, false},
		{`{"messages":[{"metadata":{"a":[1,{"b":null}]}}]}`, true},
		{`{"stats":{"tokens":1,"budget":{"total":2}},"stats":{"limit":3}}`, false},
		{`{"stats":{"budget":{"total":2,"Total":3}}}`, false},
		{`{"metadata":null,"summaries":[{"key":"k"}]}`, true},
		{`{"at":1,}`, false},
		{`[]`, false},
		{`null`, false},
	} {
		_, _, _, ok := decodeBoth([]byte(c.body))
		if ok != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.body, ok, c.fast)
		}
		checkFast(t, []byte(c.body))
	}
	for _, ib := range []string{`{"session_id":"a","Session_ID":"b"}`, `{"session_id":"a","ſession_id":"b"}`,
		`{"session_id":"a","session_id":"b"}`, `{"session_id":null}`, `{"session_id":"\xff"}`} {
		if _, ok := fastInfoIs([]byte(ib), "a"); ok {
			t.Errorf("fastInfoIs(%s) is sure", ib)
		}
		checkFast(t, []byte(ib))
	}
}

// Applying a turn's record takes the fast path: a fall back to
// encoding/json would show as three times the allocations.
func TestApplyAppendAllocs(t *testing.T) {
	old, p := turnRecord(t)
	s := old.Clone()
	n := testing.AllocsPerRun(100, func() {
		if _, err := apply(s, "bench", p); err != nil {
			t.Fatal(err)
		}
	})
	if n > 10 {
		t.Errorf("apply of a turn: %v allocations, want at most 10 (7 when written)", n)
	}
}

// FuzzDeltaDecode holds the fast decoders, and the fast encoders, to
// encoding/json on any input (checkCodec).
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
	f.Fuzz(checkCodec)
}
