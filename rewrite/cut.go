package rewrite

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// DefaultToolResultTokens is ToolResults' default limit
// (strategy.tool_results.max_tokens).
const DefaultToolResultTokens = 1000

// cutNote is the visible note left where the middle of a content was cut
// out, so that a cut is never silent.
func cutNote(n int) string { return fmt.Sprintf("\n[… %d tokens cut …]\n", n) }

// cutMiddle cuts the middle out of s so that what is left, note included,
// costs about keep tokens: the start and the end of a long tool result or
// log (the command, the error at the bottom) matter most. It snaps the cut
// to line ends where one is near, and never splits a UTF-8 sequence. It
// reports false, and returns s, when s already fits or cutting would not
// make it smaller.
func cutMiddle(s string, keep int, c Counter) (string, bool) {
	total := c.CountText(s)
	if total <= keep || total <= 0 {
		return s, false
	}
	perToken := float64(len(s)) / float64(total)
	budget := keep
	for range 8 {
		body := max(budget-c.CountText(cutNote(total)), 0)
		n := int(float64(body) * perToken)
		head := snapHead(s, n/2)
		tail := snapTail(s, len(s)-(n-n/2), head)
		cut := max(total-c.CountText(s[:head])-c.CountText(s[tail:]), 1)
		out := s[:head] + cutNote(cut) + s[tail:]
		got := c.CountText(out)
		if got <= keep || body == 0 {
			if got >= total {
				return s, false
			}
			return out, true
		}
		budget -= got - keep
	}
	return s, false
}

// snapHead returns the end of the kept head: at most n bytes, at a line end
// if one falls in the last fifth, at a rune boundary.
func snapHead(s string, n int) int {
	n = min(max(n, 0), len(s))
	if i := strings.LastIndexByte(s[:n], '\n'); i >= 0 && i >= n-n/5 {
		return i + 1
	}
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// snapTail returns the start of the kept tail: at least at i, not before
// head, after a line end if one falls in the first fifth, at a rune
// boundary.
func snapTail(s string, i, head int) int {
	i = min(max(i, head), len(s))
	span := (len(s) - i) / 5
	if j := strings.IndexByte(s[i:], '\n'); j >= 0 && j <= span {
		return i + j + 1
	}
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// ToolResults cuts every tool result longer than MaxTokens down to about
// that size, cutting out the middle and leaving the note "[… N tokens cut
// …]" (at 1000, a 5000-token result becomes about 1000 tokens; a 500-token
// one is left alone). The compacted message keeps every other field; Edited
// tells the proxy to write the new content into its raw JSON.
//
// It leaves alone the results in the last unit, which the model is about to
// read (if those alone overflow the window, Shrink cuts them to fit it),
// and results already edited. It ignores the target.
type ToolResults struct {
	// MaxTokens is the largest tool result kept whole; 0 means
	// DefaultToolResultTokens, a negative value turns compaction off.
	MaxTokens int
}

// Name implements Strategy.
func (ToolResults) Name() string { return "tool_results" }

// Apply implements Strategy.
func (t ToolResults) Apply(ctx context.Context, in Input) (Result, error) {
	msgs, c := in.Messages, in.Counter
	limit := orDefault(t.MaxTokens, DefaultToolResultTokens)
	long := false
	for i := range msgs {
		long = long || (isToolResult(&msgs[i]) && cost(&msgs[i], c) > limit)
	}
	if !long || limit <= 0 { // the common case: no plan needed
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		return Result{Messages: msgs}, nil
	}
	return run(ctx, t, in)
}

// Compact returns m with its content cut to about MaxTokens tokens, or m
// unchanged when it is short enough; it does so whatever m's role.
func (t ToolResults) Compact(m Message, c Counter) Message {
	limit := orDefault(t.MaxTokens, DefaultToolResultTokens)
	if limit <= 0 || c == nil {
		return m
	}
	out, ok := cutMiddle(m.Content, limit, c)
	if !ok {
		return m
	}
	m.Content = out
	m.Edited = true
	m.Tokens = 0
	m.Tokens = cost(&m, c)
	return m
}

func (t ToolResults) prune(p *plan, _ int) {
	limit := orDefault(t.MaxTokens, DefaultToolResultTokens)
	if limit <= 0 || len(p.msgs) == 0 || p.c == nil {
		return
	}
	last := p.g.unitOf[len(p.msgs)-1]
	n := 0
	for i := range p.msgs {
		m := &p.msgs[i]
		// A message costs at least its content, so the cached count
		// rules most results out without counting their text.
		if p.dropped[i] || !isToolResult(m) || m.Edited || m.Synthetic ||
			p.tok[i] <= limit || p.g.unitOf[i] == last {
			continue
		}
		if out, ok := cutMiddle(m.Content, limit, p.c); ok {
			p.edit(i, out)
			n++
		}
	}
	if n > 0 {
		p.notes = append(p.notes, fmt.Sprintf("Compacted %d %s.", n, plural(n, "tool result", "tool results")))
	}
}

// shrinkFloor is the least Shrink leaves of a content: its first and last
// lines around the note.
const shrinkFloor = 32

// Shrink makes a conversation that is still too long fit the target
// without dropping a message (on_overflow: shrink; README, Strategies): it
// cuts the middle out of the largest contents, leaving the note "[… N
// tokens cut …]", in this order: tool results; then the other messages
// but the last; then the system prompt and the last message, the larger
// first, so that a system prompt is whole whenever it fits with the last
// message, and a short question is not cut to make room for a long
// system prompt. All contents of a kind are cut down to one common size,
// the largest that fits, taken from a ladder of sizes (…, 1024, 1152,
// 1280, …, 1920, 2048, 2304, …: eight per doubling) so that the same
// messages are cut the same way while the conversation grows a little. It never cuts a content below about 32
// tokens; if that is not enough the result still exceeds the target (the
// caller decides: Trimmer returns ErrOverflow). Its notice says what went
// of the system prompt apart from the rest.
type Shrink struct{}

// Name implements Strategy.
func (Shrink) Name() string { return "shrink" }

// Apply implements Strategy.
func (s Shrink) Apply(ctx context.Context, in Input) (Result, error) {
	return run(ctx, s, in)
}

// Shrink's kinds of content, in the order they are cut.
const (
	shrinkToolResults = iota
	shrinkMiddle
	shrinkLast // the system prompt and the last message
)

func (Shrink) prune(p *plan, target int) {
	if p.c == nil || p.fits(target) {
		return
	}
	last := -1
	for i := len(p.msgs) - 1; i >= 0; i-- {
		if !p.dropped[i] && !isSystem(&p.msgs[i]) {
			last = i
			break
		}
	}
	kind := func(i int) int {
		switch m := &p.msgs[i]; {
		case isToolResult(m):
			return shrinkToolResults
		case isSystem(m) || i == last:
			return shrinkLast
		}
		return shrinkMiddle
	}
	was := slices.Clone(p.tok)
	cut := map[int]bool{}
	for k := shrinkToolResults; k <= shrinkLast; k++ {
		var idx []int
		for i := range p.msgs {
			m := &p.msgs[i]
			if !p.dropped[i] && !m.Synthetic && kind(i) == k && p.tok[i] > shrinkFloor {
				idx = append(idx, i)
			}
		}
		for _, i := range shrinkKind(p, idx, target) {
			cut[i] = true
		}
		if p.fits(target) {
			break
		}
	}
	msgs, msgTokens, sysTokens := 0, 0, 0
	for i := range cut {
		saved := max(was[i]-p.tok[i], 0)
		if isSystem(&p.msgs[i]) {
			sysTokens += saved
		} else {
			msgs++
			msgTokens += saved
		}
	}
	if msgs > 0 {
		p.notes = append(p.notes, fmt.Sprintf("Cut %d tokens out of %d long %s to fit the context window.",
			msgTokens, msgs, plural(msgs, "message", "messages")))
	}
	if sysTokens > 0 {
		p.notes = append(p.notes, fmt.Sprintf("Cut %d tokens out of the system prompt to fit the context window.", sysTokens))
	}
}

// shrinkKind caps the contents of the messages idx at one common size so
// that the plan fits target, or at shrinkFloor if no size does. It returns
// the messages it cut.
func shrinkKind(p *plan, idx []int, target int) []int {
	if len(idx) == 0 {
		return nil
	}
	type content struct {
		i    int
		text string // as before Shrink
		size int
	}
	cs := make([]content, len(idx))
	for k, i := range idx {
		cs[k] = content{i, p.msgs[i].Content, p.c.CountText(p.msgs[i].Content)}
	}
	slices.SortFunc(cs, func(a, b content) int { return cmp.Compare(b.size, a.size) })
	note := p.c.CountText(cutNote(1000))
	cut := map[int]bool{}
	need := 0
	for range 4 {
		excess := p.total() - target
		if excess <= 0 {
			break
		}
		need += excess // the cap is solved from the sizes before Shrink
		// Water-filling: the largest cap X such that the contents above X,
		// cut to X and given a note, save at least need.
		capTo := shrinkFloor
		sum := 0
		for k := range cs {
			sum += cs[k].size
			next := 0
			if k+1 < len(cs) {
				next = cs[k+1].size
			}
			x := (sum - (k+1)*note - need) / (k + 1)
			if x >= next && x >= shrinkFloor {
				capTo = ladder(x)
				break
			}
		}
		for _, ct := range cs {
			if ct.size <= capTo {
				continue
			}
			out, ok := cutMiddle(ct.text, capTo, p.c)
			if ok && out != p.msgs[ct.i].Content {
				p.edit(ct.i, out)
				cut[ct.i] = true
			}
		}
		if capTo == shrinkFloor {
			break
		}
	}
	return slices.Sorted(maps.Keys(cut))
}

// ladder rounds x down to the nearest step of eight per doubling,
// 2^k·(1 + j/8): the same cut while a conversation grows a little (the
// backend's prompt cache stays warm), and never more than a ninth of a
// content cut beyond what the target needs (a 2,499-token system prompt
// that must lose one token keeps 2,304).
func ladder(x int) int {
	if x < shrinkFloor {
		return shrinkFloor
	}
	p := 1
	for p*2 <= x {
		p *= 2
	}
	step := max(p/8, 1)
	return p + (x-p)/step*step
}
