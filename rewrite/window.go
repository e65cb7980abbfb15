package rewrite

import (
	"context"
	"hash/fnv"
	"math"
)

// Defaults of the strategy: keys (config.example.yaml).
const (
	DefaultWindowSize    = 10
	DefaultPreserveFirst = 2
	DefaultPreserveLast  = 10
)

// orDefault returns def for 0, 0 for a negative n, and n otherwise: the
// convention of every count in this package ("0 means the default, a
// negative value means none").
func orDefault(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return 0
	}
	return n
}

// SlidingWindow keeps the last WindowSize messages (25 messages, window 10
// → the last 10, system messages kept). The window is widened to
// whole units, so a tool call at its edge comes with all its results.
//
// It is a count rule: it ignores the target. ctxproxy composes it with
// TokenBudget (see New), so the result also fits the target. A window of
// exactly the last N messages would move on every turn, and the backend
// would read it all again each time; so the window begins at one of the
// WindowSize/2 messages before the last WindowSize, chosen by content
// (see anchor). It keeps between WindowSize and 1.5·WindowSize messages,
// and its start moves about once every WindowSize/4 new messages.
type SlidingWindow struct {
	// WindowSize is how many messages to keep; 0 means
	// DefaultWindowSize, a negative value none (only what is always kept).
	WindowSize int
	// PreserveSystem keeps every system message, not only the leading
	// ones, and leaves them out of the window's count.
	PreserveSystem bool
}

// Name implements Strategy.
func (SlidingWindow) Name() string { return "sliding_window" }

// Apply implements Strategy.
func (s SlidingWindow) Apply(ctx context.Context, in Input) (Result, error) {
	return run(ctx, s, in)
}

func (s SlidingWindow) prune(p *plan, _ int) {
	win := p.window(!s.PreserveSystem)
	size := orDefault(s.WindowSize, DefaultWindowSize)
	if len(win) <= size {
		return
	}
	keep := make([]bool, p.g.count())
	for _, i := range win[anchor(p.msgs, win, len(win)-size, size/2):] {
		keep[p.g.unitOf[i]] = true
	}
	for _, u := range p.candidates(func(u int) bool {
		return !keep[u] && !p.preserve[u] && !(s.PreserveSystem && p.system[u])
	}) {
		p.drop(u)
	}
	p.style = styleWindow
}

// Smart keeps the first PreserveFirst and the last PreserveLast messages
// and replaces what it drops between them with a marker whose text is
// "[N messages omitted]" (by default the first 2 and last 10 messages;
// 100 messages with 2 and 5 → "[93 messages omitted]"). System messages and messages marked _preserve are kept
// wherever they are. A conversation no longer than PreserveFirst +
// PreserveLast is returned unchanged, without a marker. Both ends are
// widened to whole units.
//
// Without Fill it is a count rule that ignores the target.
// With Fill, the messages between the two ends are dropped oldest first
// only until the conversation fits the target: the result keeps as much
// recent history as fits, and the cut stays put while the conversation
// grows (see Budget), so the backend's prompt cache keeps hitting. New sets
// Fill.
//
// The first exchange (the first PreserveFirst messages, which usually
// state the task: the user's first request and its answer) and the
// newest turn (the newest user message and the last unit) are kept before
// anything else. When the conversation does not fit the target, Smart with
// Fill gives up, in this order:
//
//  1. the messages between the first PreserveFirst and the last
//     PreserveLast, oldest first, only as many as the target needs;
//  2. then the last PreserveLast themselves, oldest first, up to the
//     newest turn;
//  3. nothing more: the leading system messages, the first exchange, the
//     newest turn, later system messages and messages marked _preserve
//     are never dropped. Smart pins the first exchange in the plan, so the
//     TokenBudget that New runs after it does not drop it either. If what
//     is left still exceeds the window, strategy.on_overflow decides
//     (shrink cuts the middle out of the largest contents, tool results
//     first; reject answers an overflow error; forward sends it as is).
type Smart struct {
	// PreserveFirst is how many leading messages to keep; 0 means
	// DefaultPreserveFirst, a negative value none.
	PreserveFirst int
	// PreserveLast is how many trailing messages to keep; 0 means
	// DefaultPreserveLast, a negative value none.
	PreserveLast int
	// Fill keeps, of the messages between the two ends, the newest that
	// fit the target.
	Fill bool
}

// Name implements Strategy.
func (Smart) Name() string { return "smart" }

// Apply implements Strategy.
func (s Smart) Apply(ctx context.Context, in Input) (Result, error) {
	return run(ctx, s, in)
}

func (s Smart) prune(p *plan, target int) {
	win := p.window(false)
	first := orDefault(s.PreserveFirst, DefaultPreserveFirst)
	last := orDefault(s.PreserveLast, DefaultPreserveLast)
	for _, i := range win[:min(first, len(win))] {
		p.pinned[p.g.unitOf[i]] = true // the first exchange: see the order above
	}
	before, mark := p.ndrop, p.markAll
	p.markAll = true // so that Fill counts the markers it will need
	if len(win) > first+last {
		keep := make([]bool, p.g.count())
		for _, i := range win[len(win)-last:] {
			keep[p.g.unitOf[i]] = true
		}
		cands := p.candidates(func(u int) bool { return !keep[u] && !p.preserve[u] && !p.system[u] })
		if s.Fill {
			p.dropUntilFits(cands, target)
		} else {
			for _, u := range cands {
				p.drop(u)
			}
		}
	}
	if s.Fill && !p.fits(target) {
		// Step 2: the newest messages, oldest first; the pinned ones stay.
		p.dropUntilFits(p.candidates(func(u int) bool { return !p.preserve[u] && !p.system[u] }), target)
	}
	if p.ndrop == before {
		p.markAll = mark
		return
	}
	p.style = styleWindow
}

// anchor returns where a run of the messages idx that must begin at or
// before idx[at] begins: of idx[at-span] to idx[at], the message whose
// content hashes lowest (winnowing), the earliest of equals. As the
// conversation grows and at moves forward, the choice stays put until that
// message leaves the span or one that hashes lower enters it, on average
// once every (span+1)/2 messages, and the backend's prompt cache behind
// the forwarded prefix keeps hitting meanwhile. A run cut there is cut
// there again: the messages before the choice are gone, and none after it
// hashes lower.
func anchor(msgs []Message, idx []int, at, span int) int {
	best, low := at, uint64(math.MaxUint64)
	for j := at; j >= max(at-span, 0); j-- {
		if h := contentHash(&msgs[idx[j]]); h <= low {
			best, low = j, h
		}
	}
	return best
}

// contentHash is a hash of what a message says: its role and content.
func contentHash(m *Message) uint64 {
	h := fnv.New64a()
	h.Write([]byte(m.Role))
	h.Write([]byte{0})
	h.Write([]byte(m.Content))
	return h.Sum64()
}
