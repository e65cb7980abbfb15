package exact

// A prompt is tokenized piece by piece: the text between special tokens,
// split as Ollama's tokenizers split it, each piece's count cached.

import (
	"hash/maphash"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// parallelBytes is the prompt size from which pieces not counted before
// are tokenized on several cores: tokenizing runs at 1–2 MB/s a core, so
// 32 KB is 20 ms, far more than starting goroutines.
const parallelBytes = 32 << 10

// warm counts, in parallel, the pieces of a prompt the cache does not
// hold yet, as CountText will ask for them.
func (m *Tokenizer) warm(pieces []piece) {
	var todo []string
	size := 0
	for _, p := range pieces {
		if p.special {
			continue
		}
		if _, ok := m.pieces.Peek(pieceKey{maphash.String(m.seed, p.text), len(p.text)}); !ok {
			todo = append(todo, p.text)
			size += len(p.text)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(todo))
	if workers < 2 || size < parallelBytes {
		return
	}
	next := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for t := range next {
				_, _ = m.countPiece(t)
			}
		})
	}
	for _, t := range todo {
		next <- t
	}
	close(next)
	wg.Wait()
}

// countPiece returns the tokens of text that holds no special token,
// from the cache when it was seen before.
func (m *Tokenizer) countPiece(text string) (int, error) {
	key := pieceKey{maphash.String(m.seed, text), len(text)}
	if n, ok := m.pieces.Get(key); ok {
		return n, nil
	}
	var n int
	if m.bpe != nil {
		n = m.bpe.count(text)
	} else {
		ids, err := m.tok.Encode(text, false)
		if err != nil {
			return 0, err
		}
		n = len(ids)
	}
	m.pieces.Add(key, n)
	return n, nil
}

type piece struct {
	text    string
	special bool
}

// split cuts text at special tokens exactly as Ollama's tokenizers do
// (BytePairEncoding.Encode, SentencePiece.Encode): each special token in
// vocabulary order splits every piece not yet split, at each occurrence.
// The order matters when one special token contains another.
func (m *Tokenizer) split(text string) []piece {
	pieces := []piece{{text: text}}
	for _, i := range m.tables.trie.present(text) {
		sp := m.tables.special[i]
		out := pieces[:0:0]
		for _, p := range pieces {
			if p.special {
				out = append(out, p)
				continue
			}
			rest := p.text
			for {
				i := strings.Index(rest, sp)
				if i < 0 {
					break
				}
				if i > 0 {
					out = append(out, piece{text: rest[:i]})
				}
				out = append(out, piece{text: sp, special: true})
				rest = rest[i+len(sp):]
			}
			if rest != "" {
				out = append(out, piece{text: rest})
			}
		}
		pieces = out
	}
	if m.spmPrefix {
		// llama.cpp writes a space before text at the start of the
		// prompt and after each special token (see llamacpp.go).
		for i := range pieces {
			if !pieces[i].special && (i == 0 || pieces[i-1].special) {
				pieces[i].text = " " + pieces[i].text
			}
		}
	}
	return pieces
}

// trieNode is a byte trie of the special tokens: a prompt is scanned once
// to find which of them it holds, however many the vocabulary has (Llama
// 3 has 256), instead of once per special token.
type trieNode struct {
	next map[byte]*trieNode
	ends []int // indices of the specials that end here
	// first is the root's next as an array: nearly every byte of a
	// prompt starts no special token, and is turned away in one load.
	first *[256]*trieNode
	// few holds the specials themselves when there are few of them.
	few []string
}

func newTrie(specials []string) *trieNode {
	root := &trieNode{}
	for i, sp := range specials {
		n := root
		for j := 0; j < len(sp); j++ {
			if n.next == nil {
				n.next = map[byte]*trieNode{}
			}
			c, ok := n.next[sp[j]]
			if !ok {
				c = &trieNode{}
				n.next[sp[j]] = c
			}
			n = c
		}
		n.ends = append(n.ends, i)
	}
	if len(specials) <= 16 {
		root.few = specials
	}
	root.first = new([256]*trieNode)
	for c, n := range root.next {
		root.first[c] = n
	}
	return root
}

// present returns the indices of the specials that occur in text, in
// vocabulary order (the order the splitting applies them in).
func (t *trieNode) present(text string) []int {
	if len(t.next) == 0 {
		return nil
	}
	if t.few != nil {
		// A handful: strings.Contains each (vectorized) beats a byte loop.
		var found []int
		for i, sp := range t.few {
			if strings.Contains(text, sp) {
				found = append(found, i)
			}
		}
		return found
	}
	var found []int
	seen := map[int]bool{}
	for i := 0; i < len(text); i++ {
		n := t.first[text[i]]
		for j := i + 1; n != nil; j++ {
			for _, idx := range n.ends {
				if !seen[idx] {
					seen[idx] = true
					found = append(found, idx)
				}
			}
			if j >= len(text) {
				break
			}
			n = n.next[text[j]]
		}
	}
	slices.Sort(found)
	return found
}
