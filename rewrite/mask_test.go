package rewrite

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// agentLoop is a 60-turn agent loop: a task, then per turn one call and
// its result (about 500 tokens of output each), the client resending the
// whole history every time.
func agentLoop(turns int) [][]Message {
	msgs := []Message{sys("You are a coding agent."), user("Fix the failing test in pkg/x.")}
	var out [][]Message
	for k := range turns {
		id := fmt.Sprintf("call_%d", k)
		c := call(id)
		c.ToolCalls[0].Arguments = fmt.Sprintf(`{"cmd":"step %d"}`, k)
		msgs = append(msgs, c, result(id, strings.Repeat(fmt.Sprintf("output line %d of step %d\n", k%17, k), 80)))
		out = append(out, numbered(append([]Message(nil), msgs...)...))
	}
	return out
}

func samePrefix(prev, cur []Message) bool {
	if len(prev) > len(cur) {
		return false
	}
	for i := range prev {
		if prev[i].Role != cur[i].Role || prev[i].Content != cur[i].Content || idOf(prev[i]) != idOf(cur[i]) {
			return false
		}
	}
	return true
}

// TestMaskPrefixStability measures, over a 60-turn agent loop, the share
// of turns whose forwarded conversation extends the previous turn's
// unchanged (the backend's prompt cache hits all of it), and what is
// forwarded, for smart (the default) and mask.
func TestMaskPrefixStability(t *testing.T) {
	const limit = 12000
	tr := newTrimmer(t, Config{})
	loop := agentLoop(60)
	type stats struct {
		same, acted, tokens, dropped int
	}
	got := map[string]*stats{}
	for _, mode := range []string{"smart", "mask"} {
		st := &stats{}
		var prev []Message
		for k, msgs := range loop {
			res, err := tr.Trim(context.Background(), Request{Mode: mode}, msgs, limit, counter)
			if err != nil {
				t.Fatal(err)
			}
			if res.Notice != "" {
				st.acted++
			}
			if k > 0 && samePrefix(prev, res.Messages) {
				st.same++
			}
			st.tokens += Total(res.Messages, counter)
			st.dropped += res.Dropped
			if anyTrue(orphanTools(res.Messages)) {
				t.Fatalf("%s turn %d: orphan tool results", mode, k)
			}
			if tot := Total(res.Messages, counter); tot > limit {
				t.Fatalf("%s turn %d: %d tokens over the limit", mode, k, tot)
			}
			prev = res.Messages
		}
		got[mode] = st
		t.Logf("%-5s: forwarded prefix unchanged on %d of 59 turns (%.0f%%); trimmed on %d turns; %d tokens forwarded in all; %d messages dropped",
			mode, st.same, 100*float64(st.same)/59, st.acted, st.tokens, st.dropped)
	}
	if got["mask"].dropped != 0 {
		t.Errorf("mask dropped %d messages; it only replaces contents", got["mask"].dropped)
	}
	if got["mask"].tokens >= got["smart"].tokens {
		t.Errorf("mask forwarded %d tokens, smart %d", got["mask"].tokens, got["smart"].tokens)
	}
	// Measured: mask leaves the prefix unchanged on 41 of 59 turns (17
	// when it hid one more result on every turn), smart on 50. A
	// placeholder that changed from turn to turn, or masking that moved
	// with every new result, would bring mask's count down.
	if got["mask"].same < 35 {
		t.Errorf("mask left the forwarded prefix unchanged on %d turns, measured 41", got["mask"].same)
	}
}

// The placeholder is the same text for the same result on every turn,
// keeps the result's tool_call_id, and a masked conversation is masked
// the same way again.
func TestMaskPlaceholderStable(t *testing.T) {
	loop := agentLoop(12)
	m := Mask{KeepLast: 2}
	a := apply(t, m, loop[9], 0)
	b := apply(t, m, loop[11], 0)
	edited := 0
	for i := range a.Messages {
		if a.Messages[i].Edited {
			edited++
			if a.Messages[i].Content != b.Messages[i].Content {
				t.Errorf("message %d masked differently on a later turn", i)
			}
		}
	}
	// Ten results, the newest two kept and the one being answered left:
	// seven masked, so the comparison above covers them.
	if edited != 7 {
		t.Errorf("%d results masked on turn 10, want 7", edited)
	}
	masked := 0
	for i, msg := range b.Messages {
		if msg.Edited {
			masked++
			if msg.ToolCallID != loop[11][i].ToolCallID || !strings.Contains(msg.Content, "Call the tool again") {
				t.Errorf("message %d: %+v", i, msg)
			}
		}
	}
	// All but the last unit's, the 2 before it, and up to 2 more: where
	// masking begins is chosen by content among them.
	if masked < 12-1-2-2 || masked > 12-1-2 || b.Dropped != 0 {
		t.Errorf("masked %d, dropped %d", masked, b.Dropped)
	}
	if again := apply(t, m, b.Messages, 0); again.Notice != "" {
		t.Errorf("masking a masked conversation: %q", again.Notice)
	}
}
