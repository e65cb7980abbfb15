package rewrite

// Roles as the strategies see them. "developer" is OpenAI's newer name for
// the system role; "function" is the result role of OpenAI's legacy
// function calling.
const (
	roleSystem    = "system"
	roleDeveloper = "developer"
	roleUser      = "user"
	roleAssistant = "assistant"
	roleTool      = "tool"
	roleFunction  = "function"
)

func isSystem(m *Message) bool { return m.Role == roleSystem || m.Role == roleDeveloper }

func isToolResult(m *Message) bool { return m.Role == roleTool || m.Role == roleFunction }

func isToolCaller(m *Message) bool { return m.Role == roleAssistant && len(m.ToolCalls) > 0 }

// A Unit is a group of messages that strategies keep or drop together
// (no strategy splits one; README, Strategies): an assistant message that calls tools together with
// all of its tool results, or a single message of any other kind.
//
// How results are matched to their call:
//
//   - A result whose ToolCallID equals the ID of a call made by an earlier
//     assistant message joins the nearest such message (a client that reuses
//     an ID answers its newest call). Parallel calls, results in a different
//     order than the calls, and results separated from their call by other
//     messages all join the same unit; a unit's messages need not be
//     adjacent.
//   - A result that matches no call by ID (Ollama sends no tool_call_id) joins
//     the assistant message that directly precedes its run of consecutive
//     tool messages, which is how Ollama pairs them.
//   - Any other result is an orphan: it already has no call in the input, and
//     forms a unit of its own. Strategies may drop it or keep it; they never
//     make a new one, because a call and its results are never separated.
//   - An assistant message whose calls lack some results keeps what it has:
//     the unit is kept or dropped whole, so the calls stay exactly as
//     answered (or unanswered) as the client sent them.
//   - A result that comes before the call with its ID cannot answer it; it
//     is an orphan.
type Unit struct {
	// Messages holds the indexes of the unit's messages in the
	// conversation, in ascending order.
	Messages []int
}

// Units groups msgs into units, in the order of each unit's first message.
// Every message belongs to exactly one unit.
func Units(msgs []Message) []Unit {
	g := groupUnits(msgs)
	out := make([]Unit, g.count())
	for u := range out {
		out[u].Messages = append([]int(nil), g.members(u)...)
	}
	return out
}

// grouping is the compact form of Units used by the strategies: unitOf maps
// a message to its unit, and the members of unit u are
// order[start[u]:start[u+1]].
type grouping struct {
	unitOf []int
	order  []int
	start  []int
}

func (g *grouping) count() int { return len(g.start) - 1 }

func (g *grouping) members(u int) []int { return g.order[g.start[u]:g.start[u+1]] }

func groupUnits(msgs []Message) grouping {
	n := len(msgs)
	unitOf := make([]int, n)
	units := 0
	// owner maps a call ID to the unit of the newest assistant message that
	// made it. Most results answer the call right before their run, so the
	// map is only built, from callers, when one does not.
	var owner map[string]int
	var callers []int // message indexes of the assistant messages with calls
	run := -1         // message index of the caller whose run of results we are in
	addOwner := func(i int) {
		for _, tc := range msgs[i].ToolCalls {
			if tc.ID != "" {
				owner[tc.ID] = unitOf[i]
			}
		}
	}
	for i := range msgs {
		m := &msgs[i]
		switch {
		case isToolCaller(m):
			unitOf[i] = units
			units++
			callers = append(callers, i)
			if owner != nil {
				addOwner(i)
			}
			run = i
			continue
		case isToolResult(m):
			id := m.ToolCallID
			switch {
			case run >= 0 && (id == "" || callsID(&msgs[run], id)):
				unitOf[i] = unitOf[run]
			case id != "":
				if owner == nil {
					owner = make(map[string]int)
					for _, c := range callers {
						addOwner(c)
					}
				}
				if u, ok := owner[id]; ok {
					unitOf[i] = u
				} else if run >= 0 {
					unitOf[i] = unitOf[run]
				} else {
					unitOf[i] = units
					units++
				}
			default:
				unitOf[i] = units
				units++
			}
			continue // a tool message does not end the run
		default:
			unitOf[i] = units
			units++
		}
		run = -1
	}

	// Counting sort of message indexes by unit keeps each unit's members
	// ascending, since indexes are visited in order.
	start := make([]int, units+1)
	for _, u := range unitOf {
		start[u+1]++
	}
	for u := 1; u <= units; u++ {
		start[u] += start[u-1]
	}
	order := make([]int, n)
	next := make([]int, units)
	copy(next, start[:units])
	for i, u := range unitOf {
		order[next[u]] = i
		next[u]++
	}
	return grouping{unitOf: unitOf, order: order, start: start}
}

// callsID reports whether m makes a call with the given ID.
func callsID(m *Message, id string) bool {
	for _, tc := range m.ToolCalls {
		if tc.ID == id {
			return true
		}
	}
	return false
}
