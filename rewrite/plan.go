package rewrite

import (
	"fmt"
	"slices"
	"strings"
)

// A plan is a conversation being cut: the input, what each message costs,
// its units, and which messages are dropped or edited so far. Strategies
// mark drops and edits on a plan; Composite runs several strategies on one
// plan, so that the messages are assembled, and the gap markers placed and
// counted, once, from the original conversation.
type plan struct {
	in   []Message // as given; returned as is when nothing changes
	msgs []Message // in, until the first edit copies it (see own)
	tok  []int     // cost of msgs[i]
	g    grouping
	utok []int // cost of each unit

	// pinned units are never dropped (but by TokenBudget without KeepTurn,
	// see there): the leading system messages, the newest user message, the
	// last unit (what the model answers now) and messages ctxproxy made
	// (markers of an earlier pass).
	pinned   []bool
	preserve []bool // units holding a message the client marked _preserve
	system   []bool // units holding a system message

	dropped []bool // per message
	ndrop   int
	kept    int // sum of tok over kept messages
	edits   int
	notes   []string // notices of edits (tool results, shrink)

	// markAll makes every gap visible (Smart); otherwise a gap gets a
	// marker only where one is needed to keep the roles valid.
	markAll bool
	// style picks the trim notice; set by the last strategy that dropped.
	style noticeStyle

	c          Counter
	markerCost map[markerKey]int
}

type noticeStyle int

const (
	styleWindow  noticeStyle = iota // "Kept first F and last L messages."
	styleDropped                    // "Dropped N messages."
)

type markerKey struct {
	role string
	n    int
}

// cost returns what m costs, using the cached count when there is one.
func cost(m *Message, c Counter) int {
	if m.Tokens > 0 {
		return m.Tokens
	}
	if c == nil {
		return 0
	}
	return max(c.CountMessage(m), 0)
}

func newPlan(msgs []Message, c Counter) *plan {
	n := len(msgs)
	g := groupUnits(msgs)
	nu := g.count()
	p := &plan{
		in:       msgs,
		msgs:     msgs,
		tok:      make([]int, n),
		g:        g,
		utok:     make([]int, nu),
		pinned:   make([]bool, nu),
		preserve: make([]bool, nu),
		system:   make([]bool, nu),
		dropped:  make([]bool, n),
		c:        c,
	}
	newestUser := -1
	leading := true
	for i := range msgs {
		m := &msgs[i]
		u := g.unitOf[i]
		t := cost(m, c)
		p.tok[i] = t
		p.kept += t
		p.utok[u] += t
		sys := isSystem(m)
		leading = leading && sys
		p.pinned[u] = p.pinned[u] || leading || m.Synthetic
		p.preserve[u] = p.preserve[u] || m.Preserve
		p.system[u] = p.system[u] || sys
		if m.Role == roleUser && !m.Synthetic { // a user marker is no user turn
			newestUser = i
		}
	}
	if newestUser >= 0 {
		p.pinned[g.unitOf[newestUser]] = true
	}
	if n > 0 {
		p.pinned[g.unitOf[n-1]] = true
	}
	return p
}

// isDropped reports whether unit u is dropped (units go whole, so its
// first message tells).
func (p *plan) isDropped(u int) bool { return p.dropped[p.g.members(u)[0]] }

func (p *plan) drop(u int) {
	if p.pinned[u] || p.isDropped(u) {
		return
	}
	for _, i := range p.g.members(u) {
		p.dropped[i] = true
		p.kept -= p.tok[i]
		p.ndrop++
	}
}

// own gives the plan its own copy of the messages before the first edit;
// most plans only drop, and never pay for the copy.
func (p *plan) own() {
	if p.edits == 0 {
		p.msgs = slices.Clone(p.in)
	}
}

// edit replaces the content of message i, marking it Edited and recounting
// it.
func (p *plan) edit(i int, content string) {
	p.own()
	m := &p.msgs[i]
	m.Content = content
	m.Edited = true
	m.Tokens = 0
	t := cost(m, p.c)
	m.Tokens = t
	u := p.g.unitOf[i]
	p.utok[u] += t - p.tok[i]
	if !p.dropped[i] {
		p.kept += t - p.tok[i]
	}
	p.tok[i] = t
	p.edits++
}

// changed reports whether the plan differs from its input.
func (p *plan) changed() bool { return p.ndrop > 0 || p.edits > 0 }

// total is what the assembled conversation costs, markers included.
func (p *plan) total() int {
	if p.ndrop == 0 {
		return p.kept
	}
	t := p.kept
	p.walk(func(i int) {}, func(role string, n int) { t += p.markerTokens(role, n) })
	return t
}

// fits reports whether the assembled conversation costs at most target.
func (p *plan) fits(target int) bool {
	if p.kept > target {
		return false // markers only add
	}
	return p.total() <= target
}

// dropUntilFits drops the units of cands, in order, until the plan fits
// target or cands run out. It drops the shortest prefix of cands that fits
// (up to marker costs, which it corrects for in a few rounds), so the same
// conversation and target always drop the same units: what keeps the
// forwarded prefix stable from one turn to the next (see Budget).
func (p *plan) dropUntilFits(cands []int, target int) {
	next := 0
	for next < len(cands) && p.kept > target {
		p.drop(cands[next])
		next++
	}
	for next < len(cands) {
		over := p.total() - target
		if over <= 0 {
			return
		}
		for next < len(cands) && over > 0 {
			u := cands[next]
			if !p.pinned[u] && !p.isDropped(u) {
				over -= p.utok[u]
				p.drop(u)
			}
			next++
		}
	}
}

// Marker text. Markers are synthetic messages: Raw is nil and the proxy
// encodes them from Role and Content.
func markerText(n int) string {
	if n == 1 {
		return "[1 message omitted]"
	}
	return fmt.Sprintf("[%d messages omitted]", n)
}

func (p *plan) markerTokens(role string, n int) int {
	k := markerKey{role, n}
	if t, ok := p.markerCost[k]; ok {
		return t
	}
	m := marker(role, n)
	t := cost(&m, p.c)
	if p.markerCost == nil {
		p.markerCost = make(map[markerKey]int)
	}
	p.markerCost[k] = t
	return t
}

func marker(role string, n int) Message {
	return Message{Role: role, Content: markerText(n), Synthetic: true}
}

// side is where a message stands in the user/assistant alternation that
// strict chat templates enforce.
type side bool

const (
	sideUser      side = false // user, tool results and any other role
	sideAssistant side = true
)

func sideOf(m *Message) side {
	if m.Role == roleAssistant {
		return sideAssistant
	}
	return sideUser
}

func (s side) role() string {
	if s == sideAssistant {
		return roleAssistant
	}
	return roleUser
}

// walk visits the assembled conversation in order: kept(i) for each kept
// input message, mark(role, n) for each marker, where n is the number of
// omitted messages the marker stands for.
//
// Marker placement. Strict chat templates (Mistral, Gemma, Llama 2; for
// example llama.cpp with Gemma 3 fails with "Conversation roles must
// alternate user/assistant/user/assistant/...") accept a system message only
// in first position and reject two user or two assistant messages in a row.
// So a marker is never a system message, and never folded into a kept
// message (that would change a message the client sent, and the prompt
// cache with it). Instead each gap — a run of omitted messages between two
// kept ones — is bridged by synthetic messages whose roles keep the
// alternation, placed right before the next kept message:
//
//   - Treat the start of the conversation as an assistant turn (the first
//     message after the system block must be a user message), tool results
//     as the user side, and kept system messages after the first position
//     as transparent (they were there in the input).
//   - If the kept messages before and after the gap stand on the same side
//     (user, user), one marker with the other role goes between them:
//     user, assistant "[7 messages omitted]", user.
//   - If they already alternate, no marker is needed; where the gap must
//     still be visible (Smart), two markers go in, keeping the parity:
//     assistant, user "[8 messages omitted]", assistant "[8 messages
//     omitted]", user.
//   - Nothing goes between messages of one unit (a tool call and its
//     results) or between two tool results.
//
// So if the input alternates, the output does too (TestAlternation), and
// the marker for a given gap is the same on every turn.
func (p *plan) walk(kept func(i int), mark func(role string, n int)) {
	prev := -1 // last kept message that is not a system message
	omitted := 0
	for i := range p.msgs {
		if p.dropped[i] {
			omitted++
			continue
		}
		m := &p.msgs[i]
		if isSystem(m) {
			kept(i)
			continue
		}
		if omitted > 0 {
			p.bridge(prev, i, omitted, mark)
			omitted = 0
		}
		kept(i)
		prev = i
	}
}

func (p *plan) bridge(prev, next, n int, mark func(role string, n int)) {
	before := sideAssistant // the start of the conversation
	prevTool := false
	if prev >= 0 {
		if p.g.unitOf[prev] == p.g.unitOf[next] {
			return
		}
		before = sideOf(&p.msgs[prev])
		prevTool = isToolResult(&p.msgs[prev])
	}
	after := sideOf(&p.msgs[next])
	bothTools := prevTool && isToolResult(&p.msgs[next])
	switch {
	case bothTools:
	case before == after:
		mark((!before).role(), n)
	case p.markAll:
		mark((!before).role(), n)
		mark(before.role(), n)
	}
}

// result assembles the plan. When nothing changed it returns the input
// slice itself and an empty notice.
func (p *plan) result() Result {
	if !p.changed() {
		return Result{Messages: p.in}
	}
	out := make([]Message, 0, len(p.msgs)-p.ndrop+2)
	p.walk(func(i int) {
		out = append(out, p.msgs[i])
		out[len(out)-1].Tokens = p.tok[i]
	}, func(role string, n int) {
		m := marker(role, n)
		m.Tokens = p.markerTokens(role, n)
		out = append(out, m)
	})
	return Result{Messages: out, Dropped: p.ndrop, Notice: p.notice()}
}

func (p *plan) notice() string {
	var parts []string
	parts = append(parts, p.notes...)
	if p.ndrop > 0 {
		parts = append(parts, p.trimNotice())
	}
	return strings.Join(parts, " ")
}

// trimNotice says what a trim kept: "Context trimmed. Kept first 2 and
// last 10 messages."
// That sentence is true only of one gap — a kept head and a kept tail —
// so where messages were dropped here and there (selective, importance,
// or a token budget after them) it says how many were dropped instead.
// System messages and messages marked _preserve, kept wherever they
// stand, are not counted as turns and do not split a gap.
func (p *plan) trimNotice() string {
	first, last, gaps := 0, 0, 0
	seenGap, inGap := false, false
	for i := range p.msgs {
		m := &p.msgs[i]
		switch {
		case p.dropped[i]:
			if !inGap {
				gaps++
			}
			seenGap, inGap = true, true
			last = 0
		case isSystem(m) || m.Synthetic || m.Preserve:
			// Kept wherever they stand: they neither end a gap nor count.
		case !seenGap:
			first++
		default:
			inGap = false
			last++
		}
	}
	if p.style == styleDropped || gaps > 1 {
		return fmt.Sprintf("Context trimmed. Dropped %d of %d %s.", p.ndrop, len(p.msgs), plural(len(p.msgs), "message", "messages"))
	}
	if first == 0 {
		return fmt.Sprintf("Context trimmed. Kept last %d %s.", last, plural(last, "message", "messages"))
	}
	return fmt.Sprintf("Context trimmed. Kept first %d and last %d %s.", first, last, plural(last, "message", "messages"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// window returns the indexes of the kept messages that count towards a
// window: not synthetic, and not system messages unless withSystem is set
// (the leading system block never counts).
func (p *plan) window(withSystem bool) []int {
	var idx []int
	lead := true
	for i := range p.msgs {
		m := &p.msgs[i]
		if lead && isSystem(m) {
			continue
		}
		lead = false
		if p.dropped[i] || m.Synthetic || (!withSystem && isSystem(m)) {
			continue
		}
		idx = append(idx, i)
	}
	return idx
}

// candidates returns the units, oldest first, that are kept, not pinned and
// accepted by ok.
func (p *plan) candidates(ok func(u int) bool) []int {
	var out []int
	for u := 0; u < p.g.count(); u++ {
		if p.pinned[u] || p.isDropped(u) || !ok(u) {
			continue
		}
		out = append(out, u)
	}
	return out
}
