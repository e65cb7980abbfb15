package vocabgen

import (
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Trained returns a SentencePiece vocabulary of at most size tokens
// learned from texts by byte-pair merges across word boundaries: a piece
// may hold spaces ("▁") and line breaks, so text like the texts it was
// trained on takes few tokens (a coding agent's 70 KB system prompt and
// tools, a few thousand), while any other text still tokenizes (through
// the characters seen, else byte fallback). Each merge is a piece scored
// below the merges before it, so a SentencePiece tokenizer, which merges
// the highest-scored pair whose piece exists, replays the training.
// Layout: <unk>, <s>, </s>, the 256 byte tokens, the characters of texts,
// the merged pieces, then the ChatML markers as control tokens; add-BOS
// on. Merging stops at size, or when no pair occurs twice. The same
// texts make the same vocabulary.
func Trained(texts []string, size int) Vocab {
	v := Vocab{Model: "llama", AddBOS: true, BOS: 1, EOS: 2}
	add := func(tok string, typ int32, score float32) int32 {
		v.Tokens = append(v.Tokens, tok)
		v.Types = append(v.Types, typ)
		v.Scores = append(v.Scores, score)
		return int32(len(v.Tokens) - 1)
	}
	add("<unk>", TypeUnknown, 0)
	add("<s>", TypeControl, 0)
	add("</s>", TypeControl, 0)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), TypeByte, 0)
	}
	markers := []string{"<|im_start|>", "<|im_end|>"}
	room := size - len(markers)

	// The texts as one sequence of characters, each text after a
	// boundary no merge crosses (-1), with spaces as "▁" (the
	// tokenizer's escape; it also puts one before each text).
	var seq []int32
	ids := map[string]int32{}
	var chars []string
	for _, t := range texts {
		seq = append(seq, -1)
		for _, r := range "▁" + strings.ReplaceAll(t, " ", "▁") {
			if r == utf8.RuneError {
				continue
			}
			s := string(r)
			id, ok := ids[s]
			if !ok {
				id = int32(len(chars))
				ids[s] = id
				chars = append(chars, s)
			}
			seq = append(seq, id)
		}
	}
	// Characters first, by first appearance: the byte tokens cover the
	// rest.
	sym := make([]string, len(chars))
	copy(sym, chars)
	for _, c := range chars {
		if len(v.Tokens) >= room {
			break
		}
		add(c, TypeNormal, 0)
	}
	for _, piece := range merge(seq, sym, room-len(v.Tokens)) {
		add(piece, TypeNormal, -float32(len(v.Tokens)))
	}
	for _, m := range markers {
		add(m, TypeControl, 0)
	}
	return v
}

// merge runs up to n byte-pair merges over seq (symbol ids into sym, -1
// a boundary) and returns the pieces made, in order. Ties between pairs
// as frequent go to the pair made of earlier symbols, so the result does
// not depend on map order.
func merge(seq []int32, sym []string, n int) []string {
	// A doubly linked list over seq, so a merge is local.
	next := make([]int32, len(seq))
	prev := make([]int32, len(seq))
	for i := range seq {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[len(seq)-1] = -1
	type pair struct{ a, b int32 }
	count := map[pair]int{}
	where := map[pair][]int32{} // left positions, checked when used
	note := func(i int32, d int, q *pairQueue) {
		j := next[i]
		if i < 0 || j < 0 || seq[i] < 0 || seq[j] < 0 {
			return
		}
		p := pair{seq[i], seq[j]}
		count[p] += d
		if d > 0 {
			where[p] = append(where[p], i)
		}
		if q != nil {
			heap.Push(q, pairItem{p.a, p.b, count[p]})
		}
	}
	for i := range seq {
		note(int32(i), 1, nil)
	}
	q := &pairQueue{}
	for p, c := range count {
		*q = append(*q, pairItem{p.a, p.b, c})
	}
	heap.Init(q)
	var pieces []string
	for len(pieces) < n && q.Len() > 0 {
		top := heap.Pop(q).(pairItem)
		p := pair{top.a, top.b}
		if c, ok := count[p]; !ok || c != top.n {
			continue // stale
		}
		if top.n < 2 {
			break
		}
		id := int32(len(sym))
		sym = append(sym, sym[p.a]+sym[p.b])
		pieces = append(pieces, sym[id])
		at := where[p]
		slices.Sort(at) // left to right, as a tokenizer merges "aaa"
		for _, i := range at {
			j := next[i]
			if seq[i] != p.a || j < 0 || seq[j] != p.b {
				continue // merged away since
			}
			// The neighbours' pairs lose their old partners…
			note(prev[i], -1, q)
			note(j, -1, q)
			seq[i] = id
			seq[j] = -2 // gone
			next[i] = next[j]
			if next[j] >= 0 {
				prev[next[j]] = i
			}
			// …and gain the new piece.
			note(prev[i], 1, q)
			note(i, 1, q)
		}
		// Its own overlapping occurrences ("aaa") were counted down as
		// neighbours: forget the pair, which no longer occurs.
		delete(where, p)
		delete(count, p)
	}
	return slices.Clip(pieces)
}

// pairItem is a pair of symbols and how often it occurred when queued.
type pairItem struct {
	a, b int32
	n    int
}

// pairQueue orders pairs by count, then by their symbols.
type pairQueue []pairItem

func (q pairQueue) Len() int { return len(q) }
func (q pairQueue) Less(i, j int) bool {
	if q[i].n != q[j].n {
		return q[i].n > q[j].n
	}
	if q[i].a != q[j].a {
		return q[i].a < q[j].a
	}
	return q[i].b < q[j].b
}
func (q pairQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pairQueue) Push(x any)   { *q = append(*q, x.(pairItem)) }
func (q *pairQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
