package rewrite

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"io"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// The summary block that reaches the model: appended to the first system message, or the
// content of a system message of its own when the request has none.
const (
	blockOpen   = "<conversation_summary>"
	blockClose  = "</conversation_summary>"
	blockIntro  = "The earlier part of this conversation, summarized, oldest first:"
	blockIndent = "- "
)

// ContextInjection renders summaries, oldest first, as the delimited block
// ctxproxy adds to the system prompt. omitted is the number of
// older summaries left out for room; it is said in a line of its own.
func ContextInjection(summaries []string, omitted int) string {
	var b strings.Builder
	b.WriteString(blockOpen)
	b.WriteByte('\n')
	b.WriteString(blockIntro)
	b.WriteByte('\n')
	if omitted > 0 {
		fmt.Fprintf(&b, "%s[%d earlier %s omitted]\n", blockIndent, omitted, plural(omitted, "exchange", "exchanges"))
	}
	for _, s := range summaries {
		b.WriteString(blockIndent)
		b.WriteString(s)
		b.WriteByte('\n')
	}
	b.WriteString(blockClose)
	return b.String()
}

// An iteration is a user turn and everything after it up to the
// next user turn: the assistant's answer, its tool calls and their
// results. In an agent's turn, each step — an assistant message that
// follows tool results, with its own calls and their results — is an
// iteration too (as in an agent loop, whose iterations are steps), so that an
// agent working for a long time on one request can be summarized step by
// step. Messages between the leading system block and the first user
// turn (a greeting) form an iteration of their own. An iteration never
// splits a tool unit: a message that stands between a call and one of its
// results does not start one.
type iteration struct {
	start, end int // msgs[start:end]
	// cost is what its foldable messages cost; folded is how many there
	// are. Mid-conversation system messages, messages the client marked
	// _preserve and messages ctxproxy made are never folded: they stay
	// where they are.
	cost, folded int
}

// conv is a conversation seen as iterations, for folding.
type conv struct {
	msgs []Message
	p    *plan // units, costs and what is pinned, preserved or system
	lead int   // leading system messages
	its  []iteration
	keys []string // chain keys of its[:len(keys)], computed on demand
	fast []uint64 // their memo sums
	// salt sets apart summaries written with one-off instructions
	// (/compact): keysTo appends it to every key.
	salt string
}

func analyze(msgs []Message, c Counter) *conv {
	v := &conv{msgs: msgs, p: newPlan(msgs, c)}
	for v.lead < len(msgs) && isSystem(&msgs[v.lead]) {
		v.lead++
	}
	g := &v.p.g
	last := make([]int, g.count()) // last member of each unit
	for u := range last {
		m := g.members(u)
		last[u] = m[len(m)-1]
	}
	reach := -1 // the furthest message a unit begun so far extends to
	for i := v.lead; i < len(msgs); i++ {
		m := &msgs[i]
		step := m.Role == roleAssistant && i > v.lead && isToolResult(&msgs[i-1])
		boundary := i == v.lead || (reach < i && (step || m.Role == roleUser && !m.Synthetic))
		if boundary {
			if n := len(v.its); n > 0 {
				v.its[n-1].end = i
			}
			v.its = append(v.its, iteration{start: i})
		}
		reach = max(reach, last[g.unitOf[i]])
		if v.foldable(i) {
			it := &v.its[len(v.its)-1]
			it.cost += v.p.tok[i]
			it.folded++
		}
	}
	if n := len(v.its); n > 0 {
		v.its[n-1].end = len(msgs)
	}
	return v
}

// foldable reports whether message i goes into a summary when its
// iteration is folded.
func (v *conv) foldable(i int) bool {
	u := v.p.g.unitOf[i]
	return !v.p.pinned[u] && !v.p.preserve[u] && !v.p.system[u]
}

// key returns the key of the summary of iterations 0..i: a SHA-256 of the
// previous key and of what the model reads of iteration i.
//
// Every request hashes its whole folded history again (a megabyte of text
// costs about 0.7 ms of SHA-256), so the keys are memoized under a chain of
// maphash sums, ten times cheaper, whose seed is random per process: a
// client cannot aim at a collision it cannot compute. The stored keys stay
// SHA-256, the same in every process and replica.
func (v *conv) key(i int) string {
	var fh maphash.Hash
	fh.SetSeed(keySeed)
	var buf []byte
	for len(v.keys) <= i {
		k := len(v.keys)
		fh.Reset()
		if k > 0 {
			buf = binary.LittleEndian.AppendUint64(buf[:0], v.fast[k-1])
			fh.Write(buf)
		}
		buf = v.feed(&fh, buf[:0], k)
		fast := fh.Sum64()
		key, ok := keyMemo.Get(fast)
		if !ok {
			h := sha256.New()
			if k > 0 {
				h.Write([]byte(v.keys[k-1]))
			}
			buf = v.feed(h, buf[:0], k)
			key = hex.EncodeToString(h.Sum(nil)[:16])
			keyMemo.Add(fast, key)
		}
		v.fast = append(v.fast, fast)
		v.keys = append(v.keys, key)
	}
	return v.keys[i]
}

// feed writes what the model reads of iteration k to h, each field
// length-prefixed so that no two iterations write the same bytes, through
// buf (writing a string would copy it into a new []byte each time).
func (v *conv) feed(h io.Writer, buf []byte, k int) []byte {
	field := func(s string) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
		if len(buf) >= 32<<10 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	it := v.its[k]
	for j := it.start; j < it.end; j++ {
		m := &v.msgs[j]
		field(m.Role)
		field(m.Name)
		field(m.ToolCallID)
		field(m.Content)
		buf = binary.AppendUvarint(buf, uint64(len(m.Images)))
		buf = binary.AppendUvarint(buf, uint64(len(m.ToolCalls)))
		for _, tc := range m.ToolCalls {
			field(tc.ID)
			field(tc.Name)
			field(tc.Arguments)
		}
	}
	h.Write(buf)
	return buf[:0]
}

// keySeed seeds the memo's sums; keyMemo maps a sum to its SHA-256 key,
// keeping the keys of the conversations in use.
var (
	keySeed = maphash.MakeSeed()
	keyMemo = cache.New[uint64, string](memoEntries)
)

// memoEntries bounds keyMemo.
const memoEntries = 1 << 16

func (v *conv) keysTo(n int) []string {
	if n > 0 {
		v.key(n - 1)
	}
	if v.salt == "" {
		return v.keys[:n]
	}
	out := make([]string, n)
	for i, k := range v.keys[:n] {
		out[i] = k + v.salt
	}
	return out
}

// hasBlock reports whether the leading system messages already carry a
// summary block (the conversation is ctxproxy's own output): folding again
// would add a second one.
func (v *conv) hasBlock() bool {
	for i := range v.lead {
		m := &v.msgs[i]
		if (m.Edited || m.Synthetic) && strings.Contains(m.Content, blockOpen) {
			return true
		}
	}
	return false
}

// summaryEstimate is what a summary is expected to cost before it is
// written: the 2-3 sentences SummaryPrompt asks for, about 270 characters
// at 3.5 characters a token. Fold points are chosen with this estimate, never
// with the real lengths, so that a prefetch and the later request pick the
// same iterations (see foldFor).
const summaryEstimate = 80

// blockEstimate is what the block for n summaries is expected to cost.
func (v *conv) blockEstimate(n, per, limit int) int {
	if n == 0 {
		return 0
	}
	overhead := cost(&Message{Role: roleSystem, Content: ContextInjection(nil, 0)}, v.p.c)
	return overhead + min(n*per, max(limit, per))
}

// foldFor returns how many of the oldest iterations to fold to save at
// least need tokens: the fewest that do, at most most. When no number
// does, it returns the one that saves the most, or 0 when none saves
// anything. per is the expected cost of one summary, limit the room for
// the block.
//
// Fewest, because Budget quantizes need: it steps once per
// (threshold−target) of the window, so the same iterations fold on every
// turn until the conversation has grown by another step, and the system
// prompt — and the backend's prompt cache behind it — changes once per
// step rather than on every turn (see Budget). The choice depends
// only on the messages and need, never on the summaries' real lengths, so
// a prefetch made before the step foresees exactly what the step folds.
func (v *conv) foldFor(need, most, per, limit int) int {
	most = min(most, len(v.its)-1)
	if need <= 0 || most <= 0 {
		return 0
	}
	best, bestSave := 0, 0
	folded := 0
	for n := 1; n <= most; n++ {
		folded += v.its[n-1].cost
		s := folded - v.blockEstimate(n, per, limit)
		if s >= need {
			return n
		}
		if s > bestSave {
			best, bestSave = n, s
		}
	}
	return best
}

// trimEmpty returns n less the iterations at its end that have nothing to
// fold (all of their messages stay): a summary of them would only add to
// the prompt.
func (v *conv) trimEmpty(n int) int {
	for n > 0 && v.its[n-1].folded == 0 {
		n--
	}
	return n
}

// pinnedCost is what the messages of iteration i that are never folded
// cost.
func (v *conv) pinnedCost(i int) int {
	it := v.its[i]
	s := 0
	for j := it.start; j < it.end; j++ {
		if !v.foldable(j) {
			s += v.p.tok[j]
		}
	}
	return s
}

// iterMessages returns copies of the messages of iteration i that a
// summarizer reads, without their raw JSON (a summary is written after
// the request is gone).
func (v *conv) iterMessages(i int) []Message {
	it := v.its[i]
	out := make([]Message, 0, it.end-it.start)
	for _, m := range v.msgs[it.start:it.end] {
		if m.Synthetic {
			continue
		}
		m.Raw = nil
		out = append(out, m)
	}
	return out
}

// fold returns the conversation with its first n iterations folded into
// the summaries links (one per iteration or per batch of them): their
// foldable messages dropped (with markers where the roles would otherwise
// not alternate), and the block of summaries appended to the first system
// message, or put first in a system message of its own. The block holds
// the newest summaries that fit in limit tokens; the exchanges of older
// ones are counted in an "omitted" line.
func (v *conv) fold(n int, links []link, limit int) Result {
	p := v.p
	for _, it := range v.its[:n] {
		for i := it.start; i < it.end; i++ {
			if v.foldable(i) {
				p.drop(p.g.unitOf[i])
			}
		}
	}
	// Assembled as plan.result does, but a gap that needs a marker to keep
	// the roles alternating (the kept part begins with an agent's step, or
	// a message the client marked _preserve stands among folded ones) says
	// where its messages went.
	res := Result{Messages: make([]Message, 0, len(v.msgs)-p.ndrop+2), Dropped: p.ndrop, Summarized: p.ndrop}
	p.walk(func(i int) {
		m := p.msgs[i]
		m.Tokens = p.tok[i]
		res.Messages = append(res.Messages, m)
	}, func(role string, n int) {
		m := Message{Role: role, Content: foldMarkerText(n), Synthetic: true}
		m.Tokens = cost(&m, p.c)
		res.Messages = append(res.Messages, m)
	})
	block := v.block(links, limit)
	if v.lead > 0 {
		// Counted as the prompt's count plus the block's: recounting a
		// long system prompt (an agent's runs to tens of kilobytes) on
		// every request would cost milliseconds, for a token or two of
		// difference where the two texts meet.
		m := &res.Messages[0]
		add := "\n\n" + block
		m.Content += add
		m.Edited = true
		m.Tokens = p.tok[0] + textCost(add, p.c)
	} else {
		m := Message{Role: roleSystem, Content: block, Synthetic: true}
		m.Tokens = cost(&m, p.c)
		res.Messages = append([]Message{m}, res.Messages...)
	}
	kept := len(v.its) - n
	res.Notice = fmt.Sprintf("Context summarized: %d %s folded into %d %s; kept the last %d %s.",
		p.ndrop, plural(p.ndrop, "message", "messages"), len(links), plural(len(links), "summary", "summaries"),
		kept, plural(kept, "iteration", "iterations"))
	return res
}

func foldMarkerText(n int) string {
	if n == 1 {
		return "[1 message summarized above]"
	}
	return fmt.Sprintf("[%d messages summarized above]", n)
}

// block renders the newest of links that fit limit tokens.
func (v *conv) block(links []link, limit int) string {
	shown := len(links)
	if limit > 0 {
		used := 0
		for i := len(links) - 1; i >= 0; i-- {
			used += textCost(links[i].text, v.p.c) + 1
			if used > limit && i < len(links)-1 {
				shown = len(links) - 1 - i
				break
			}
		}
	}
	omitted := 0
	for _, l := range links[:len(links)-shown] {
		omitted += l.span
	}
	texts := make([]string, 0, shown)
	for _, l := range links[len(links)-shown:] {
		texts = append(texts, l.text)
	}
	return ContextInjection(texts, omitted)
}

func textCost(s string, c Counter) int {
	if c == nil {
		return 0
	}
	return max(c.CountText(s), 0)
}
