package rewrite

import (
	"context"
	"math"
	"slices"
	"sort"
)

// defaultPreserveRoles are the roles Selective keeps when PreserveRoles is
// nil (strategy.selective.preserve_roles).
var defaultPreserveRoles = []string{roleSystem, roleUser}

// Selective keeps every message whose role is in PreserveRoles, and with
// PreserveMarked every message marked _preserve, and drops the others
// oldest first until the conversation fits the target.
//
// Dropping an assistant reply between two kept user messages would put the
// user messages next to each other, which strict templates reject; the gap
// then gets an assistant marker "[1 message omitted]" (see plan.walk), and
// the markers count against the target.
//
// Its cut is stable across turns (see Budget) while the preserved messages
// fit the target: it drops the shortest oldest-first run of candidates
// that fits. Once they alone do not, dropping every reply and then the
// oldest preserved messages (the mode's closing TokenBudget) would move
// the cut with every new reply, and the backend would read the prompt
// again from there on every turn; with Steady it drops the oldest
// messages of every role instead, oldest first, as token_budget does. The
// selective mode sets Steady.
type Selective struct {
	// PreserveRoles are the roles never dropped; nil means system and
	// user. The leading system messages, the newest user
	// message and the last unit are kept whatever the roles.
	PreserveRoles []string
	// PreserveMarked keeps the messages the client marked _preserve.
	PreserveMarked bool
	// Steady drops the oldest messages of every role once the preserved
	// ones alone exceed the target (see above).
	Steady bool
}

// Name implements Strategy.
func (Selective) Name() string { return "selective" }

// Apply implements Strategy.
func (s Selective) Apply(ctx context.Context, in Input) (Result, error) {
	return run(ctx, s, in)
}

func (s Selective) prune(p *plan, target int) {
	roles := s.PreserveRoles
	if roles == nil {
		roles = defaultPreserveRoles
	}
	keep := make([]bool, p.g.count())
	for i := range p.msgs {
		if slices.Contains(roles, p.msgs[i].Role) {
			keep[p.g.unitOf[i]] = true
		}
	}
	before := p.ndrop
	cands := p.candidates(func(u int) bool {
		return !keep[u] && !(s.PreserveMarked && p.preserve[u])
	})
	if s.Steady {
		rest := p.kept
		for _, u := range cands {
			rest -= p.utok[u]
		}
		if rest > target { // the preserved messages alone do not fit
			cands = p.candidates(func(u int) bool { return !p.system[u] && !(s.PreserveMarked && p.preserve[u]) })
		}
	}
	p.dropUntilFits(cands, target)
	if p.ndrop > before {
		p.style = styleDropped
	}
}

// DefaultImportance is the importance of a message without an _importance
// annotation: below the 0.8 that pins a message, so unannotated history can
// be pruned, and above any message the client marked as less important.
// (An API where every message is added with an explicit importance could
// default to 1.0; a proxy sees plain chat history.)
const DefaultImportance = 0.5

// Importance's defaults (strategy.importance.preserve_above and
// preserve_recent).
const (
	DefaultPreserveAbove  = 0.8
	DefaultPreserveRecent = 5
)

// Importance prunes by importance and recency: system messages, messages with
// importance above PreserveAbove and the last PreserveRecent messages are
// always kept; the others are dropped lowest importance first, oldest first
// among equals, until the conversation fits the target. A unit's importance
// is the highest of its messages'.
type Importance struct {
	// PreserveAbove is the importance above which a message is always
	// kept; 0 means DefaultPreserveAbove.
	PreserveAbove float64
	// PreserveRecent is how many trailing messages are always kept; 0
	// means DefaultPreserveRecent, a negative value none.
	PreserveRecent int
}

// Name implements Strategy.
func (Importance) Name() string { return "importance" }

// Apply implements Strategy.
func (s Importance) Apply(ctx context.Context, in Input) (Result, error) {
	return run(ctx, s, in)
}

func importanceOf(m *Message) float64 {
	if !m.HasImportance || math.IsNaN(m.Importance) {
		return DefaultImportance
	}
	return m.Importance
}

func (s Importance) prune(p *plan, target int) {
	above := s.PreserveAbove
	if above == 0 {
		above = DefaultPreserveAbove
	}
	recent := orDefault(s.PreserveRecent, DefaultPreserveRecent)
	nu := p.g.count()
	imp := make([]float64, nu)
	for u := range imp {
		imp[u] = -1
	}
	for i := range p.msgs {
		u := p.g.unitOf[i]
		imp[u] = max(imp[u], importanceOf(&p.msgs[i]))
	}
	keep := make([]bool, nu)
	win := p.window(true)
	for _, i := range win[max(len(win)-recent, 0):] {
		keep[p.g.unitOf[i]] = true
	}
	cands := p.candidates(func(u int) bool {
		return !keep[u] && !p.system[u] && !p.preserve[u] && !(imp[u] > above)
	})
	// Candidates come oldest first; a stable sort keeps that order among
	// equal importance.
	sort.SliceStable(cands, func(a, b int) bool { return imp[cands[a]] < imp[cands[b]] })
	before := p.ndrop
	p.dropUntilFits(cands, target)
	if p.ndrop > before {
		p.style = styleDropped
	}
}
