package rewrite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// DefaultMaskKeepLast is Mask's default KeepLast (strategy.mask.keep_last).
const DefaultMaskKeepLast = 3

// maskPrefix starts every placeholder, so a masked result is told apart
// from one the client sent.
const maskPrefix = "[ctxproxy: tool result hidden"

// maskText is the placeholder of a masked tool result. It depends only on
// the result's content, so the same result gets the same text on every
// turn and the backend's prompt cache keeps hitting.
func maskText(content string, tokens int) string {
	sum := sha256.Sum256([]byte(content))
	return fmt.Sprintf("%s to save context (%d tokens, sha256 %s). Call the tool again if you need its output.]",
		maskPrefix, tokens, hex.EncodeToString(sum[:6]))
}

// Mask is observation masking: an agent loop's context is mostly old tool
// output, which the model rarely needs again once it has acted on it. Mask
// replaces the content of old tool results with a short placeholder that
// says what was there (its size and a hash) and how to get it back (call
// the tool again); the message itself stays, with its role and
// tool_call_id, so every call keeps its result and the pairing stays valid.
// Nothing is dropped.
//
// Which results are masked: all but the newest KeepLast, and then, with
// MaxTokens, more of the oldest until the results left whole cost at most
// MaxTokens. The results of the last unit, which the model is about to
// read, are never masked, nor results shorter than their placeholder.
// Counted from the newest, the choice is the same however much older
// history there is, so masking what Mask returned changes nothing. The
// first result left whole is one of the KeepLast before the newest
// KeepLast, chosen by content (see anchor), so that a new result does not
// mask one more old one every time: between KeepLast and 2·KeepLast stay
// whole, and where masking begins (where the backend's prompt cache stops
// hitting) moves about once every KeepLast/2 new results.
//
// With strategy.tool_results.max_tokens the Trimmer first cuts each long
// result middle-out to that size; Mask then hides the old ones entirely,
// so the whole results kept are the newest few, each at most that size.
// It ignores the target: the strategy of a mode follows it with
// TokenBudget.
type Mask struct {
	// KeepLast is how many of the newest tool results stay whole; 0
	// means DefaultMaskKeepLast, a negative value none (only the last
	// unit's).
	KeepLast int
	// MaxTokens bounds what the whole results cost together; 0 means no
	// bound.
	MaxTokens int
}

// Name implements Strategy.
func (Mask) Name() string { return "mask" }

// Apply implements Strategy.
func (m Mask) Apply(ctx context.Context, in Input) (Result, error) {
	return run(ctx, m, in)
}

func (m Mask) prune(p *plan, _ int) {
	if len(p.msgs) == 0 {
		return
	}
	keep := orDefault(m.KeepLast, DefaultMaskKeepLast)
	last := p.g.unitOf[len(p.msgs)-1]
	var idx []int // maskable results, oldest first
	for i := range p.msgs {
		r := &p.msgs[i]
		if p.dropped[i] || !isToolResult(r) || r.Synthetic || p.g.unitOf[i] == last {
			continue
		}
		idx = append(idx, i)
	}
	n := max(len(idx)-keep, 0)
	if n > 0 {
		n = anchor(p.msgs, idx, n, max(keep, 1))
	}
	if m.MaxTokens > 0 {
		whole := 0
		for _, i := range idx[n:] {
			whole += p.tok[i]
		}
		for n < len(idx) && whole > m.MaxTokens {
			whole -= p.tok[idx[n]]
			n++
		}
	}
	masked := 0
	for _, i := range idx[:n] {
		content := p.msgs[i].Content
		if strings.HasPrefix(content, maskPrefix) {
			continue
		}
		text := maskText(content, p.tok[i])
		if p.c != nil && p.c.CountText(text) >= p.c.CountText(content) {
			continue // short results cost less than their placeholder
		}
		p.edit(i, text)
		masked++
	}
	if masked > 0 {
		p.notes = append(p.notes, fmt.Sprintf("Masked %d old %s.", masked, plural(masked, "tool result", "tool results")))
	}
}

var (
	_ Strategy = Mask{}
	_ pruner   = Mask{}
)
