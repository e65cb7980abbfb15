package plan

import (
	"hash/maphash"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// maxPrefixSessions bounds the sessions whose last forwarded prompt is
// remembered for prefixKept (eight bytes a message each).
const maxPrefixSessions = 10000

// prefixes remember, per session, the last prompt forwarded, as a chain
// of hashes (one per message, each covering every message up to it), to
// measure how much of the next prompt the backend can take from its
// cache: Ollama keeps the previous prompt's KV cache and reads again
// only what follows the longest common prefix, so a prefix that stays
// put between turns costs nothing and one that moves costs the window.
type prefixes struct {
	seed maphash.Seed
	lru  *cache.LRU[string, []uint64]
}

func newPrefixes() *prefixes {
	return &prefixes{seed: maphash.MakeSeed(), lru: cache.New[string, []uint64](maxPrefixSessions)}
}

// kept returns the share of msgs, the prompt forwarded for session now,
// that the previous prompt forwarded for it and its reply began with, by
// tokens (by messages when they were not counted), and remembers msgs
// and reply (nil: none came whole) for the next turn: the backend's cache
// holds the reply it generated too, so a chat that resends it finds it
// there. ok is false for a session's first turn here.
func (ps *prefixes) kept(session string, msgs []rewrite.Message, reply *rewrite.Message) (share float64, ok bool) {
	chain := make([]uint64, len(msgs), len(msgs)+1)
	var h maphash.Hash
	h.SetSeed(ps.seed)
	for i := range msgs {
		writeMessage(&h, &msgs[i])
		chain[i] = h.Sum64() // the hash of every message up to i
	}
	prev, seen := ps.lru.Get(session)
	if reply != nil {
		writeMessage(&h, reply)
		ps.lru.Add(session, append(chain, h.Sum64()))
	} else {
		ps.lru.Add(session, chain)
	}
	if !seen || len(msgs) == 0 {
		return 0, false
	}
	common := 0
	for common < len(chain) && common < len(prev) && chain[common] == prev[common] {
		common++
	}
	keptTokens, total := 0, 0
	for i := range msgs {
		total += msgs[i].Tokens
		if i < common {
			keptTokens += msgs[i].Tokens
		}
	}
	if total == 0 {
		return float64(common) / float64(len(msgs)), true
	}
	return float64(keptTokens) / float64(total), true
}

// writeMessage writes what a chat template renders of m.
func writeMessage(h *maphash.Hash, m *rewrite.Message) {
	for _, s := range []string{m.Role, m.Content, m.Name, m.ToolCallID} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	for _, c := range m.ToolCalls {
		h.WriteString(c.Name)
		h.WriteByte(0)
		h.WriteString(c.Arguments)
		h.WriteByte(0)
	}
	for _, img := range m.Images {
		h.WriteString(strconv.Itoa(img.Width))
		h.WriteByte('x')
		h.WriteString(strconv.Itoa(img.Height))
		h.WriteByte(0)
	}
	h.WriteByte(1)
}
