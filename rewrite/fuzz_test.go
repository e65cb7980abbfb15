package rewrite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// byteReader hands out fuzz bytes, then zeros.
type byteReader struct{ b []byte }

func (r *byteReader) next() int {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return int(v)
}

func (r *byteReader) more() bool { return len(r.b) > 0 }

// conversation builds a conversation from fuzz bytes, with tool units of
// every shape Units handles (parallel calls, results out of order or
// separated from their call, missing results, orphans, Ollama runs without
// ids), images, annotations and system messages in the middle. The first
// byte picks a strict conversation, whose roles alternate, or a free one.
// The last byte of the returned pair is the target as a share of the total.
func conversation(data []byte) ([]Message, int) {
	r := &byteReader{data}
	strict := r.next()%2 == 0
	var msgs []Message
	add := func(m Message) {
		m.Content = fmt.Sprintf("m%d %s", len(msgs), strings.Repeat("abcdefgh ", r.next()%24))
		if r.next()%7 == 0 {
			m.Preserve = true
		}
		if v := r.next(); v%3 == 0 {
			m.Importance, m.HasImportance = float64(v%11)/10, true
		}
		m.Raw = raw(len(msgs))
		msgs = append(msgs, m)
	}
	for range r.next() % 3 {
		add(Message{Role: "system"})
	}
	id := 0
	newID := func() string { id++; return fmt.Sprintf("c%d", id) }
	calls := func(k int, ids bool) (Message, []string) {
		m := Message{Role: "assistant"}
		var out []string
		for range k {
			c := ToolCall{Name: "f", Arguments: `{"q":1}`}
			if ids {
				c.ID = newID()
			}
			out = append(out, c.ID)
			m.ToolCalls = append(m.ToolCalls, c)
		}
		return m, out
	}
	for len(msgs) < 80 && r.more() {
		if strict {
			add(Message{Role: "user", Images: make([]chat.Image, r.next()%4/3)})
			rounds := 0
			for r.more() && r.next()%3 == 0 { // tool rounds
				m, ids := calls(1+r.next()%3, r.next()%4 != 0)
				add(m)
				for _, id := range ids {
					add(Message{Role: "tool", ToolCallID: id})
				}
				rounds++
			}
			// The reply; only the last turn may lack one.
			if rounds > 0 || r.next()%5 != 0 || r.more() {
				add(Message{Role: "assistant"})
			}
			if r.next()%9 == 0 {
				add(Message{Role: "system"})
			}
			continue
		}
		switch op := r.next() % 16; {
		case op < 4:
			add(Message{Role: "user", Images: make([]chat.Image, op/3)})
		case op < 8:
			add(Message{Role: "assistant"})
		case op < 11: // calls with ids, results in some order, maybe split
			m, ids := calls(1+r.next()%3, true)
			add(m)
			if r.next()%2 == 0 {
				rand.New(rand.NewPCG(uint64(r.next()), 0)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			}
			for k, id := range ids {
				if k > 0 && r.next()%4 == 0 {
					add(Message{Role: "user"})
				}
				if r.next()%6 != 0 { // some results missing
					add(Message{Role: "tool", ToolCallID: id})
				}
			}
		case op < 12: // Ollama: no ids, consecutive results
			m, _ := calls(1+r.next()%3, false)
			add(m)
			for range r.next() % 4 {
				add(Message{Role: "tool"})
			}
		case op < 13: // orphan
			tid := ""
			if r.next()%2 == 0 {
				tid = "orphan"
			}
			add(Message{Role: "tool", ToolCallID: tid})
		case op < 14:
			add(Message{Role: "system"})
		case op < 15: // calls never answered
			m, _ := calls(1, true)
			add(m)
		default: // a long tool result
			m, ids := calls(1, true)
			add(m)
			add(Message{Role: "tool", ToolCallID: ids[0]})
			msgs[len(msgs)-1].Content += strings.Repeat("log line\n", 40+r.next())
		}
	}
	total := Total(msgs, counter)
	return msgs, total * r.next() / 255
}

type subject struct {
	s Strategy
	// fits: the result fits the target whenever the strategy's own
	// minimum (its result for target 0) does.
	fits bool
	// systemOnly: TokenBudget without KeepTurn, which keeps only the
	// system messages when they alone exceed the target.
	systemOnly bool
}

func subjects(t testing.TB) []subject {
	out := []subject{
		{s: SlidingWindow{WindowSize: 5, PreserveSystem: true}},
		{s: SlidingWindow{WindowSize: 3}},
		{s: TokenBudget{KeepTurn: true}, fits: true},
		{s: TokenBudget{}, systemOnly: true},
		{s: Smart{PreserveFirst: 2, PreserveLast: 5}},
		{s: Smart{PreserveFirst: 2, PreserveLast: 5, Fill: true}, fits: true},
		{s: Smart{PreserveFirst: -1, PreserveLast: 3, Fill: true}, fits: true},
		{s: Selective{}, fits: true},
		{s: Selective{PreserveRoles: []string{}, PreserveMarked: true}, fits: true},
		{s: Importance{}, fits: true},
		{s: Importance{PreserveAbove: 0.5, PreserveRecent: -1}, fits: true},
		{s: ToolResults{MaxTokens: 40}},
		{s: Shrink{}},
	}
	for _, mode := range modes {
		s, err := strategyFor(mode, Config{Composite: []string{"tool_results", "sliding_window", "importance"}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, subject{s: s, fits: mode != "none"})
	}
	return out
}

func FuzzStrategies(f *testing.F) {
	f.Add([]byte{0, 2, 5, 200, 3, 1, 4, 9, 100, 2, 3, 0, 7, 1, 1, 1, 128})
	f.Add([]byte{1, 1, 9, 3, 10, 4, 2, 11, 3, 12, 13, 14, 15, 5, 6, 7, 8, 9, 40})
	f.Add([]byte("strict conversations alternate their roles; free ones do not"))
	f.Add([]byte{1, 0, 11, 2, 2, 0, 11, 1, 1, 12, 0, 12, 1, 9, 0, 0, 0, 255})
	subs := subjects(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, target := conversation(data)
		for _, sub := range subs {
			checkInvariants(t, sub, msgs, target)
		}
		checkTrimmer(t, msgs, target)
	})
}

// TestProperties runs the invariants over random conversations, so that
// they hold on every `go test`, not only under -fuzz.
func TestProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	subs := subjects(t)
	n := 400
	if testing.Short() {
		n = 50
	}
	for range n {
		data := make([]byte, 20+rng.IntN(200))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		msgs, target := conversation(data)
		for _, sub := range subs {
			checkInvariants(t, sub, msgs, target)
		}
		checkTrimmer(t, msgs, target)
		if t.Failed() {
			t.Logf("input bytes: %v", data)
			return
		}
	}
}

func describe(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  %d %s", idOf(m), m.Role)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, " call(%s)", c.ID)
		}
		if m.ToolCallID != "" {
			fmt.Fprintf(&b, " for(%s)", m.ToolCallID)
		}
		if m.Synthetic || m.Preserve {
			fmt.Fprintf(&b, " %q preserve=%v", m.Content, m.Preserve)
		}
		fmt.Fprintf(&b, " tokens=%d", m.Tokens)
	}
	return b.String()
}

func checkInvariants(t *testing.T, sub subject, msgs []Message, target int) {
	t.Helper()
	ctx := context.Background()
	name := sub.s.Name()
	res, err := sub.s.Apply(ctx, Input{Messages: msgs, Target: target, Counter: counter})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := res.Messages
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s (%T %+v), target %d: %s\ninput:%s\noutput:%s", name, sub.s, sub.s, target,
			fmt.Sprintf(format, args...), describe(msgs), describe(out))
	}

	// Order kept, nothing invented but markers.
	pos := map[int]bool{}
	last := -1
	for _, m := range out {
		if m.Synthetic {
			if m.Raw != nil {
				fail("synthetic message with raw JSON")
			}
			continue
		}
		id := idOf(m)
		if id <= last {
			fail("order not kept")
			return
		}
		last = id
		pos[id] = true
		if !m.Edited && m.Content != msgs[id].Content {
			fail("content of %d changed without Edited", id)
		}
	}
	if got, want := res.Dropped, len(msgs)-len(pos); got != want {
		fail("Dropped = %d, want %d", got, want)
	}
	changed := len(out) != len(msgs) || res.Dropped > 0
	for _, m := range out {
		changed = changed || m.Edited
	}
	if changed != (res.Notice != "") {
		fail("changed = %v but notice %q", changed, res.Notice)
	}

	// Tool units whole; no new orphans.
	for _, u := range Units(msgs) {
		n := 0
		for _, i := range u.Messages {
			if pos[i] {
				n++
			}
		}
		if n != 0 && n != len(u.Messages) {
			fail("unit %v split", u.Messages)
		}
	}
	inOrphan := orphanTools(msgs)
	for i, o := range orphanTools(out) {
		if id := idOf(out[i]); o && id >= 0 && !inOrphan[id] {
			fail("message %d became an orphan", id)
		}
	}

	// Always kept: leading system messages; newest user message and the
	// last message, but for TokenBudget without KeepTurn when the system
	// messages alone exceed the target.
	sysTotal, newestUser := 0, -1
	for i, m := range msgs {
		if isSystem(&m) {
			sysTotal += counter.CountMessage(&msgs[i])
		}
		if m.Role == "user" {
			newestUser = i
		}
	}
	for i := range msgs {
		if !isSystem(&msgs[i]) {
			break
		}
		if !pos[i] {
			fail("leading system message %d dropped", i)
		}
	}
	if !(sub.systemOnly && sysTotal > target) && len(msgs) > 0 {
		if newestUser >= 0 && !pos[newestUser] {
			fail("newest user message %d dropped", newestUser)
		}
		if !pos[len(msgs)-1] {
			fail("last message dropped")
		}
	}

	// Fits whenever the always-kept part does.
	if sub.fits {
		least, err := sub.s.Apply(ctx, Input{Messages: msgs, Target: 0, Counter: counter})
		if err != nil {
			t.Fatal(err)
		}
		if Total(least.Messages, counter) <= target && Total(out, counter) > target {
			fail("total %d > target, though %d is possible", Total(out, counter), Total(least.Messages, counter))
		}
	}
	if sub.systemOnly && sysTotal <= target {
		pinnedOnly, _ := TokenBudget{KeepTurn: true}.Apply(ctx, Input{Messages: msgs, Target: 0, Counter: counter})
		if Total(pinnedOnly.Messages, counter) <= target && Total(out, counter) > target {
			fail("total %d > target", Total(out, counter))
		}
	}

	// Roles alternate if they did.
	if alternates(msgs) && !alternates(out) {
		fail("roles no longer alternate: %s", rolesOf(out))
	}

	// Idempotent on its own output.
	again, err := sub.s.Apply(ctx, Input{Messages: out, Target: target, Counter: counter})
	if err != nil {
		t.Fatal(err)
	}
	// cmp.Diff only to explain a difference: it is slow.
	if !reflect.DeepEqual(out, again.Messages) {
		if diff := cmp.Diff(out, again.Messages, cmpopts.EquateEmpty()); diff != "" {
			fail("second pass changed the result (-first +second):\n%s", diff)
		}
	}
	if again.Dropped != 0 || again.Notice != "" {
		fail("second pass: dropped %d, notice %q", again.Dropped, again.Notice)
	}
}

// alternates reports whether the messages other than system messages go
// user, assistant, user, … (tool results standing on the user side, runs
// of tool results counting as one), starting with a user message.
func alternates(msgs []Message) bool {
	prev := sideAssistant
	prevTool := false
	for i := range msgs {
		m := &msgs[i]
		if isSystem(m) {
			continue
		}
		s, tool := sideOf(m), isToolResult(m)
		if s == prev && !(tool && prevTool) {
			return false
		}
		prev, prevTool = s, tool
	}
	return true
}

func checkTrimmer(t *testing.T, msgs []Message, limit int) {
	t.Helper()
	for _, policy := range []string{OverflowShrink, OverflowReject, OverflowForward} {
		tr, err := NewTrimmer(Config{OnOverflow: policy, ToolResults: ToolResultsConfig{MaxTokens: 50}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := tr.Trim(context.Background(), Request{}, msgs, limit, counter)
		switch {
		case limit <= 0: // no known window: forwarded as sent
			if err != nil || len(res.Messages) != len(msgs) || res.Notice != "" {
				t.Errorf("limit %d: %v, notice %q", limit, err, res.Notice)
			}
		case errors.Is(err, ErrOverflow):
			if policy == OverflowForward {
				t.Errorf("forward: %v", err)
			}
		case err != nil:
			t.Fatalf("Trim: %v", err)
		case policy != OverflowForward && Total(res.Messages, counter) > limit:
			t.Errorf("%s: %d tokens > limit %d", policy, Total(res.Messages, counter), limit)
		}
	}
}
