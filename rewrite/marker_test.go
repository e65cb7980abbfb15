package rewrite

import (
	"math/rand/v2"
	"testing"
)

func TestMarkerPlacement(t *testing.T) {
	withSys := func(msgs []Message) []Message { return numbered(append([]Message{sys("s")}, msgs...)...) }
	tests := []struct {
		name   string
		s      Strategy
		msgs   []Message
		target int
		want   string
	}{
		{
			"odd gap: one marker of the other role",
			Smart{PreserveFirst: 2, PreserveLast: 2}, alternating(9, 10), 0,
			"user assistant [user] assistant user",
		},
		{
			"even gap: a pair keeps the parity",
			Smart{PreserveFirst: 2, PreserveLast: 2}, alternating(8, 10), 0,
			"user assistant [user] [assistant] user assistant",
		},
		{
			"pair after a user message starts with an assistant",
			Smart{PreserveFirst: 1, PreserveLast: 1},
			withSys([]Message{user("u0"), asst("a1"), user("u2"), call("x"), result("x", "1"), call("y"), result("y", "2"), asst("done")}), 0,
			"system user [assistant] user [assistant] [user] assistant",
		},
		{
			"the newest user message is kept: an odd gap before it",
			Smart{PreserveFirst: 1, PreserveLast: 1}, withSys(alternating(6, 10)), 0,
			"system user [assistant] user assistant",
		},
		{
			"smart with no head: the first message after the system block is a user message",
			Smart{PreserveFirst: -1, PreserveLast: 2}, withSys(alternating(6, 10)), 0,
			"system [user] [assistant] user assistant",
		},
		{
			"token budget: no marker where the kept part starts with a user message",
			TokenBudget{}, alternating(10, 40), 4 * 13,
			"user assistant user assistant",
		},
		{
			"token budget: a user marker before a leading assistant message",
			TokenBudget{}, alternating(10, 40), 3*13 + 9,
			"[user] assistant user assistant",
		},
		{
			"tool result then a user message: an assistant marker between",
			Selective{PreserveRoles: []string{"tool", "user"}},
			numbered(user("u"), call("a"), result("a", "r"), asst("x"), user("v")), 0,
			"user assistant+calls tool [assistant] user",
		},
		{
			"no marker inside a unit whose results are apart",
			Selective{PreserveRoles: []string{"assistant", "tool"}},
			withSys([]Message{user("u0"), call("a", "b"), result("a", "1"), user("mid"), result("b", "2"), asst("done"), user("last")}), 0,
			"system [user] assistant+calls tool tool assistant user",
		},
		{
			"a kept system message in the gap is transparent",
			Smart{PreserveFirst: 2, PreserveLast: 2},
			numbered(append(append(alternating(4, 10), sys("mid")), alternating(5, 10)...)...), 0,
			"user assistant system [user] assistant user",
		},
		{
			"dropping assistants between kept user messages",
			Selective{}, alternating(6, 10), 0,
			"user [assistant] user [assistant] user assistant",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := apply(t, tt.s, tt.msgs, tt.target)
			if got := rolesOf(res.Messages); got != tt.want {
				t.Errorf("roles = %q\n         want %q", got, tt.want)
			}
			for _, m := range markers(res.Messages) {
				if m.Role == "system" || m.Raw != nil || m.Tokens == 0 {
					t.Errorf("bad marker %+v", m)
				}
			}
		})
	}
}

// TestAlternation: if the roles of the input alternate after the system
// block (user first; tool results on the user side), so do the roles of
// every strategy's output, markers included.
func TestAlternation(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	subs := subjects(t)
	checked, withMarkers := 0, 0
	for range 300 {
		data := make([]byte, 30+rng.IntN(150))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		data[0] = 0 // a strict conversation
		msgs, target := conversation(data)
		if !alternates(msgs) {
			t.Fatalf("generator made a conversation that does not alternate: %s", rolesOf(msgs))
		}
		for _, sub := range subs {
			res := apply(t, sub.s, msgs, target)
			checked++
			if len(markers(res.Messages)) > 0 {
				withMarkers++
			}
			if !alternates(res.Messages) {
				t.Fatalf("%s: roles do not alternate:\n in: %s\nout: %s", sub.s.Name(), rolesOf(msgs), rolesOf(res.Messages))
			}
		}
	}
	t.Logf("%d results checked, %d with markers", checked, withMarkers)
	if withMarkers < checked/10 {
		t.Errorf("only %d of %d results have markers: the property is barely exercised", withMarkers, checked)
	}
}
