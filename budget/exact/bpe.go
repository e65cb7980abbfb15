package exact

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"math/bits"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/emirpasic/gods/v2/trees/binaryheap"
)

// bpeVocab is a byte-level BPE vocabulary held without pointers, so that
// a 128k-token vocabulary with its merges costs a few MB of heap and
// nothing for the garbage collector to scan: every token's bytes in one
// array, and two open-addressing tables, one from a token's text to its
// id and one from a pair of ids to the rank of their merge. Ollama's
// tokenizer package holds the same vocabulary as strings and two maps of
// strings, about four times the memory.
type bpeVocab struct {
	text []byte   // every token's bytes, one after another
	ends []uint32 // token i is text[ends[i]-len:ends[i]], see token
	// ids holds id+1 of each token by the hash of its text, 0 where
	// empty. Where two tokens have the same text the later one wins, as
	// in Ollama's map.
	ids []int32
	// pairs holds (left+1)<<32 | (right+1) of each merge by its hash,
	// 0 where empty, and ranks the merge's rank (its line in the
	// merges, the later line where one repeats).
	pairs []uint64
	ranks []int32
	seed  maphash.Seed
}

// newBPEVocab builds the vocabulary of values (tokenizer.ggml.tokens) and
// merges (tokenizer.ggml.merges, "left right" in rank order). A merge
// whose halves are not both tokens can never apply and is left out.
func newBPEVocab(values, merges []string) *bpeVocab {
	v := &bpeVocab{ends: make([]uint32, len(values)), seed: maphash.MakeSeed()}
	size := 0
	for _, s := range values {
		size += len(s)
	}
	v.text = make([]byte, 0, size)
	for i, s := range values {
		v.text = append(v.text, s...)
		v.ends[i] = uint32(len(v.text))
	}
	v.ids = make([]int32, tableSize(len(values)))
	for i, s := range values {
		mask := uint64(len(v.ids) - 1)
		for h := maphash.String(v.seed, s) & mask; ; h = (h + 1) & mask {
			if v.ids[h] == 0 || v.token(v.ids[h]-1) == s {
				v.ids[h] = int32(i) + 1
				break
			}
		}
	}
	v.pairs = make([]uint64, tableSize(len(merges)))
	v.ranks = make([]int32, len(v.pairs))
	for rank, m := range merges {
		left, right, ok := strings.Cut(m, " ")
		l, r := v.id(left), v.id(right)
		if !ok || l < 0 || r < 0 {
			continue
		}
		key := uint64(l+1)<<32 | uint64(r+1)
		mask := uint64(len(v.pairs) - 1)
		for h := pairHash(key) & mask; ; h = (h + 1) & mask {
			if v.pairs[h] == 0 || v.pairs[h] == key {
				v.pairs[h], v.ranks[h] = key, int32(rank)
				break
			}
		}
	}
	return v
}

// tableSize is a power of two at least twice n: probes stay short.
func tableSize(n int) int {
	return 1 << bits.Len(uint(max(2*n, 8)-1))
}

func pairHash(key uint64) uint64 {
	key *= 0x9e3779b97f4a7c15
	return key ^ key>>29
}

// token returns token id's text (a copy).
func (v *bpeVocab) token(id int32) string { return string(v.tokenBytes(id)) }

func (v *bpeVocab) tokenBytes(id int32) []byte {
	start := uint32(0)
	if id > 0 {
		start = v.ends[id-1]
	}
	return v.text[start:v.ends[id]]
}

// id returns the id of the token whose text is s, or -1.
func (v *bpeVocab) id(s string) int32 {
	mask := uint64(len(v.ids) - 1)
	for h := maphash.String(v.seed, s) & mask; v.ids[h] != 0; h = (h + 1) & mask {
		if string(v.tokenBytes(v.ids[h]-1)) == s {
			return v.ids[h] - 1
		}
	}
	return -1
}

// idOf is id for text held in a byte slice.
func (v *bpeVocab) idOf(b []byte) int32 {
	mask := uint64(len(v.ids) - 1)
	for h := maphash.Bytes(v.seed, b) & mask; v.ids[h] != 0; h = (h + 1) & mask {
		if bytes.Equal(v.tokenBytes(v.ids[h]-1), b) {
			return v.ids[h] - 1
		}
	}
	return -1
}

// rank returns the rank of the merge of tokens l and r, or -1.
func (v *bpeVocab) rank(l, r int32) int {
	if l < 0 || r < 0 {
		return -1
	}
	key := uint64(l+1)<<32 | uint64(r+1)
	mask := uint64(len(v.pairs) - 1)
	for h := pairHash(key) & mask; v.pairs[h] != 0; h = (h + 1) & mask {
		if v.pairs[h] == key {
			return int(v.ranks[h])
		}
	}
	return -1
}

// decode returns the text of ids (each in the vocabulary) as Ollama's
// BytePairEncoding.Decode gives it: each rune of a token mapped back to
// the byte it stands for, GPT-2's byte 0 dropped.
func (v *bpeVocab) decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		for _, r := range string(v.tokenBytes(id)) {
			switch {
			case r == 0x0100:
				continue
			case r == 0x0143:
				r = 0x00ad
			case r > 0x0100 && r <= 0x0120:
				r -= 0x0100
			case r > 0x0120 && r <= 0x0142:
				r -= 0x00a2
			}
			b = append(b, byte(r))
		}
	}
	return string(b)
}

// bpe counts the tokens of text that holds no special token, as one of
// the two runners does. Ollama's engine (tokenizer.BytePairEncoding) looks
// a whole pre-tokenized word up first, merges by rank in the order its
// heap gives, and its splitter hands on, for the text between two
// matches, the part from the start up to the next match (what Ollama
// evaluates, so what ctxproxy counts). llama.cpp splits as expressions
// do, looks a whole word up first only for the Llama 3 family and Tekken
// (ignore_merges), and merges lowest rank first, leftmost among equals:
// on runs of one character ("}}}}}", "```") the two orders end in
// different tokens.
type bpe struct {
	vocab *bpeVocab
	steps []splitStep
	// llamaCpp: llama.cpp's splitting and merge order; whole: look a
	// word up whole before merging.
	llamaCpp, whole bool
}

func newBPE(v *bpeVocab, exprs []string, llamaCpp, whole bool) *bpe {
	if len(exprs) == 0 {
		exprs = []string{`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`}
	}
	b := &bpe{vocab: v, llamaCpp: llamaCpp, whole: whole}
	for _, e := range exprs {
		if custom := customSplitters[e]; custom != nil {
			b.steps = append(b.steps, splitStep{custom: custom})
			continue
		}
		b.steps = append(b.steps, splitStep{re: regexp2.MustCompile(e, regexp2.RE2)})
	}
	return b
}

// splitStep is one step of a pre-tokenizer: an expression, or one of
// llama.cpp's hand-written splitters (customSplitters).
type splitStep struct {
	re     *regexp2.Regexp
	custom func(r []rune) []int
}

// split applies each pre-tokenizer step in turn to every part.
func (b *bpe) split(s string) []string {
	parts := []string{s}
	for _, step := range b.steps {
		var next []string
		for _, part := range parts {
			r := []rune(part)
			if step.custom != nil {
				for _, n := range step.custom(r) {
					next = append(next, string(r[:n]))
					r = r[n:]
				}
				continue
			}
			re := step.re
			offset := 0
			for m, _ := re.FindRunesMatch(r); m != nil; m, _ = re.FindNextMatch(m) {
				if m.Index > offset {
					if b.llamaCpp {
						next = append(next, string(r[offset:m.Index]))
					} else {
						next = append(next, string(r[:m.Index]))
					}
				}
				next = append(next, m.String())
				offset = m.Index + m.Length
			}
			if offset < len(r) {
				next = append(next, string(r[offset:]))
			}
		}
		parts = next
	}
	return parts
}

// symbol is a run of a word's byte-level text, word[start:end], that is
// token id (-1 for none); merged symbols are dead.
type symbol struct {
	start, end int
	prev, next int
	id         int32
}

// count returns the tokens of text.
func (b *bpe) count(text string) int { return len(b.encode(text, nil)) }

// encode appends the ids of text to dst.
func (b *bpe) encode(text string, dst []int32) []int32 {
	var word []byte
	var syms []symbol
	for _, w := range b.split(text) {
		word = appendByteLevel(word[:0], w)
		if b.whole {
			if id := b.vocab.idOf(word); id >= 0 {
				dst = append(dst, id)
				continue
			}
		}
		syms = syms[:0]
		for i := 0; i < len(word); {
			_, size := utf8.DecodeRune(word[i:])
			syms = append(syms, symbol{start: i, end: i + size, prev: len(syms) - 1, next: len(syms) + 1,
				id: b.vocab.idOf(word[i : i+size])})
			i += size
		}
		if b.llamaCpp {
			b.mergeLeftmost(word, syms)
		} else {
			b.mergeByHeap(word, syms)
		}
		for _, s := range syms {
			if s.end > s.start && s.id >= 0 {
				dst = append(dst, s.id)
			}
		}
	}
	return dst
}

// mergeLeftmost merges the adjacent pair of lowest rank, leftmost on
// ties, whose merge is a token, until none is left.
func (b *bpe) mergeLeftmost(word []byte, syms []symbol) {
	for {
		best, at := -1, -1
		for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
			j := syms[i].next
			if j >= len(syms) {
				break
			}
			rank := b.vocab.rank(syms[i].id, syms[j].id)
			if rank < 0 || (best >= 0 && rank >= best) {
				continue
			}
			if b.vocab.idOf(word[syms[i].start:syms[j].end]) < 0 {
				continue
			}
			best, at = rank, i
		}
		if at < 0 {
			return
		}
		merge(word, syms, at, b.vocab)
	}
}

// pair is a candidate merge of symbols a and b, whose text was length
// bytes long when it was found.
type pair struct {
	a, b, rank, length int
}

// mergeByHeap merges as Ollama's BytePairEncoding does: pairs pushed on a
// binary heap by rank in the same order, the same heap (so equal ranks
// come off in the same order), a pair skipped when either side changed
// since or its merge is no token.
func (b *bpe) mergeByHeap(word []byte, syms []symbol) {
	pairs := binaryheap.NewWith(func(x, y pair) int { return cmp.Compare(x.rank, y.rank) })
	push := func(i, j int) {
		if i < 0 || j >= len(syms) {
			return
		}
		if rank := b.vocab.rank(syms[i].id, syms[j].id); rank >= 0 {
			pairs.Push(pair{i, j, rank, syms[j].end - syms[i].start})
		}
	}
	for i := range len(syms) - 1 {
		push(i, i+1)
	}
	for !pairs.Empty() {
		p, _ := pairs.Pop()
		l, r := syms[p.a], syms[p.b]
		if l.end == l.start || r.end == r.start || r.end-l.start != p.length {
			continue
		}
		if b.vocab.idOf(word[l.start:r.end]) < 0 {
			continue
		}
		merge(word, syms, p.a, b.vocab)
		push(syms[p.a].prev, p.a)
		push(p.a, syms[p.a].next)
	}
}

// merge joins symbol i with the one after it.
func merge(word []byte, syms []symbol, i int, v *bpeVocab) {
	j := syms[i].next
	syms[i].end = syms[j].end
	syms[i].id = v.idOf(word[syms[i].start:syms[i].end])
	syms[i].next = syms[j].next
	if syms[j].next < len(syms) {
		syms[syms[j].next].prev = i
	}
	syms[j].end = syms[j].start
}

// appendByteLevel appends s with each byte mapped to GPT-2's printable
// rune, UTF-8 encoded.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		r := rune(s[i])
		switch {
		case r == 0x00ad:
			r = 0x0143
		case r <= 0x0020:
			r += 0x0100
		case r >= 0x007f && r <= 0x00a0:
			r += 0x00a2
		}
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}
