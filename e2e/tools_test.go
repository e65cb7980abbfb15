//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/ollama/ollama/api"
)

// toolsJSON declares the two tools of the tool conversations, as an
// Ollama client sends them.
var toolsJSON = json.RawMessage(`[{"type":"function","function":{"name":"get_weather","description":"Current weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},{"type":"function","function":{"name":"get_time","description":"Local time in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`)

var cities = []string{"Paris", "Lagos", "Lima", "Osaka", "Oslo", "Quito", "Perth", "Accra", "Hanoi", "Turin"}

// toolConversation is an agent's conversation: units of a user question,
// an assistant message calling both tools, the two tool results (Ollama
// style: consecutive "tool" messages with tool_name, no ids) and the
// assistant's answer. With endWithResults the last unit stops after its
// results, the moment an agent sends them back to the model; otherwise a
// final user question follows.
func toolConversation(seed uint64, units int, endWithResults bool) []api.Message {
	r := rand.New(rand.NewPCG(seed, 0x7001))
	msgs := []api.Message{{Role: "system", Content: fmt.Sprintf("You call tools when asked. Conversation %d.", seed)}}
	for i := range units {
		city := cities[r.IntN(len(cities))]
		msgs = append(msgs,
			api.Message{Role: "user", Content: fmt.Sprintf("Question %d about %s: %s", i+1, city, prose(r, 50+r.IntN(30)))},
			api.Message{Role: "assistant", ToolCalls: []api.ToolCall{toolCall(0, "get_weather", city), toolCall(1, "get_time", city)}},
			api.Message{Role: "tool", ToolName: "get_weather", Content: fmt.Sprintf("Weather in %s: %s", city, prose(r, 100+r.IntN(60)))},
			api.Message{Role: "tool", ToolName: "get_time", Content: fmt.Sprintf("Time in %s: %s", city, prose(r, 50+r.IntN(40)))},
		)
		if i < units-1 || !endWithResults {
			msgs = append(msgs, api.Message{Role: "assistant", Content: prose(r, 50+r.IntN(40))})
		}
	}
	if !endWithResults {
		msgs = append(msgs, api.Message{Role: "user", Content: "And now? " + prose(r, 60)})
	}
	return msgs
}

func toolCall(index int, name, city string) api.ToolCall {
	args := api.NewToolCallFunctionArguments()
	args.Set("city", city)
	return api.ToolCall{Function: api.ToolCallFunction{Index: index, Name: name, Arguments: args}}
}

// orphans describes every break of a tool unit in an Ollama message list:
// an assistant message whose tool_calls are not followed by as many tool
// results, or a tool result not preceded by such a message (no strategy
// may split a tool unit; Ollama pairs results with calls by position).
func orphans(msgs []api.Message) []string {
	var out []string
	for i, m := range msgs {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			j := i + 1
			for j < len(msgs) && msgs[j].Role == "tool" {
				j++
			}
			if n := j - (i + 1); n != len(m.ToolCalls) {
				out = append(out, fmt.Sprintf("message %d: assistant calls %d tool(s), followed by %d result(s)", i, len(m.ToolCalls), n))
			}
		case m.Role == "tool":
			k := i - 1
			for k >= 0 && msgs[k].Role == "tool" {
				k--
			}
			if k < 0 || msgs[k].Role != "assistant" || len(msgs[k].ToolCalls) == 0 {
				out = append(out, fmt.Sprintf("message %d: tool result %q without the assistant message that called it", i, m.ToolName))
			}
		}
	}
	return out
}

// roles is the messages' roles in one line, tool calls marked with "+".
func roles(msgs []api.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.Role)
		if len(m.ToolCalls) > 0 {
			fmt.Fprintf(&b, "+%d", len(m.ToolCalls))
		}
	}
	return b.String()
}

// summarize is what of a message must survive forwarding unchanged.
func summarize(msgs []api.Message) []string {
	var out []string
	for _, m := range msgs {
		s := m.Role + ": " + m.Content
		if m.ToolName != "" {
			s += " [result of " + m.ToolName + "]"
		}
		for _, c := range m.ToolCalls {
			s += fmt.Sprintf(" [call %s(%s)]", c.Function.Name, c.Function.Arguments.String())
		}
		out = append(out, s)
	}
	return out
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}
