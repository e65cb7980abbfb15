package rewrite

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUnits(t *testing.T) {
	ollamaCall := Message{Role: "assistant", ToolCalls: []ToolCall{{Name: "f"}, {Name: "g"}}}
	ollamaResult := Message{Role: "tool", Content: "r"}
	tests := []struct {
		name string
		msgs []Message
		want [][]int
	}{
		{"plain chat", []Message{sys("s"), user("u"), asst("a")}, [][]int{{0}, {1}, {2}}},
		{"empty", nil, [][]int{}},
		{
			"parallel calls",
			[]Message{user("u"), call("a", "b"), result("a", "1"), result("b", "2"), asst("done")},
			[][]int{{0}, {1, 2, 3}, {4}},
		},
		{
			"results out of order",
			[]Message{call("a", "b"), result("b", "2"), result("a", "1")},
			[][]int{{0, 1, 2}},
		},
		{
			"result separated by other messages",
			[]Message{call("a", "b"), result("a", "1"), user("meanwhile"), result("b", "2"), asst("x")},
			[][]int{{0, 1, 3}, {2}, {4}},
		},
		{
			"orphan result",
			[]Message{user("u"), result("zz", "lost"), asst("a")},
			[][]int{{0}, {1}, {2}},
		},
		{
			"orphan result with no id after a plain message",
			[]Message{user("u"), {Role: "tool", Content: "r"}, {Role: "tool", Content: "r2"}},
			[][]int{{0}, {1}, {2}},
		},
		{
			"missing results",
			[]Message{call("a", "b"), result("a", "1"), user("u")},
			[][]int{{0, 1}, {2}},
		},
		{
			"ollama: consecutive results without ids",
			[]Message{user("u"), ollamaCall, ollamaResult, ollamaResult, asst("a"), ollamaResult},
			[][]int{{0}, {1, 2, 3}, {4}, {5}},
		},
		{
			"ollama: a result after another message is an orphan",
			[]Message{ollamaCall, ollamaResult, user("u"), ollamaResult},
			[][]int{{0, 1}, {2}, {3}},
		},
		{
			"id matching an earlier call wins over position",
			[]Message{call("a"), call("b"), result("a", "1"), result("b", "2")},
			[][]int{{0, 2}, {1, 3}},
		},
		{
			"unknown id right after a call joins it",
			[]Message{call("a"), result("zz", "1")},
			[][]int{{0, 1}},
		},
		{
			"reused id answers the newest call",
			[]Message{call("a"), call("a"), result("a", "1")},
			[][]int{{0}, {1, 2}},
		},
		{
			"result before its call is an orphan",
			[]Message{user("u"), result("a", "early"), call("a")},
			[][]int{{0}, {1}, {2}},
		},
		{
			"legacy function role",
			[]Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f"}}}, {Role: "function", Content: "r"}},
			[][]int{{0, 1}},
		},
		{
			"assistant without calls does not start a run",
			[]Message{asst("a"), {Role: "tool", Content: "r"}},
			[][]int{{0}, {1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := [][]int{}
			for _, u := range Units(tt.msgs) {
				got = append(got, u.Messages)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Units (-want +got):\n%s", diff)
			}
		})
	}
}
