package rewrite

import (
	"encoding/json"
	"fmt"
	"strings"
)

// testCounter is the deterministic counter of the tests: 4 bytes per token
// (rounded up), 3 tokens of structure per message, 4 per tool call and 100
// per image.
type testCounter struct{}

func (testCounter) CountText(s string) int { return (len(s) + 3) / 4 }

func (tc testCounter) CountMessage(m *Message) int {
	n := 3 + tc.CountText(m.Content) + tc.CountText(m.Name) + 100*len(m.Images)
	for _, c := range m.ToolCalls {
		n += 4 + tc.CountText(c.Name) + tc.CountText(c.Arguments)
	}
	return n
}

var counter testCounter

// raw gives a message a unique raw JSON object, by which tests follow it
// through a strategy.
func raw(id int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"id":%d}`, id)) }

func sys(s string) Message  { return Message{Role: "system", Content: s} }
func user(s string) Message { return Message{Role: "user", Content: s} }
func asst(s string) Message { return Message{Role: "assistant", Content: s} }

func call(ids ...string) Message {
	m := Message{Role: "assistant"}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, ToolCall{ID: id, Name: "f", Arguments: `{}`})
	}
	return m
}

func result(id, s string) Message { return Message{Role: "tool", ToolCallID: id, Content: s} }

// numbered gives every message a Raw id equal to its index.
func numbered(msgs ...Message) []Message {
	for i := range msgs {
		msgs[i].Raw = raw(i)
	}
	return msgs
}

// alternating returns n alternating user/assistant messages, numbered, each with
// content of size bytes.
func alternating(n, size int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs[i] = Message{Role: role, Content: pad(fmt.Sprintf("m%d ", i), size)}
	}
	return numbered(msgs...)
}

func pad(s string, size int) string {
	if len(s) >= size {
		return s
	}
	return s + strings.Repeat("x", size-len(s))
}

// idOf returns the Raw id of m, or -1 for a synthetic message.
func idOf(m Message) int {
	if m.Raw == nil {
		return -1
	}
	var v struct{ ID int }
	if err := json.Unmarshal(m.Raw, &v); err != nil {
		return -2
	}
	return v.ID
}

func ids(msgs []Message) []int {
	out := make([]int, len(msgs))
	for i, m := range msgs {
		out[i] = idOf(m)
	}
	return out
}

func rolesOf(msgs []Message) string {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(' ')
		}
		r := m.Role
		if len(m.ToolCalls) > 0 {
			r += "+calls"
		}
		if m.Synthetic {
			r = "[" + r + "]"
		}
		b.WriteString(r)
	}
	return b.String()
}

func rangeInts(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// orphanTools reports, for each message, whether it is a tool result
// whose unit has no call.
func orphanTools(msgs []Message) []bool {
	out := make([]bool, len(msgs))
	for _, u := range Units(msgs) {
		if isToolResult(&msgs[u.Messages[0]]) {
			for _, i := range u.Messages {
				out[i] = true
			}
		}
	}
	return out
}
