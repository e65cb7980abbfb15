package exact

import (
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"weak"

	"github.com/ollama/ollama/tokenizer"
)

// tables are what counting needs of a vocabulary: built once per
// distinct vocabulary and shared by every model that has it (the same
// GGUF tokenizer under another name, template or renderer, a fine-tune
// of the same base), as long as one of them is in use.
type tables struct {
	vocab   *tokenizer.Vocabulary // byte-level BPE: without its tokens and merges, which bpe holds
	tok     tokenizer.Tokenizer   // SentencePiece or WordPiece; nil for byte-level BPE
	bpe     *bpeVocab             // byte-level BPE
	special []string              // control and user-defined tokens, in vocabulary order
	trie    *trieNode             // the specials, to find which a prompt holds in one pass
	size    int64                 // about the bytes the tables hold (footprint)
	key     vocabKey
}

// vocabKey identifies a vocabulary: the tokenizer kind and a 128-bit hash
// of every field its tables are built from.
type vocabKey struct {
	kind string
	h    [2]uint64
}

var (
	vocabSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	// vocabTables holds the tables of the vocabularies in use, weakly: the
	// last model of a vocabulary to go takes its tables with it.
	vocabTables = struct {
		sync.Mutex
		m map[vocabKey]weak.Pointer[tables]
	}{m: map[vocabKey]weak.Pointer[tables]{}}
)

// keyOf hashes what kind's tables are built from in v.
func keyOf(kind string, v *tokenizer.Vocabulary) vocabKey {
	k := vocabKey{kind: kind}
	for i, seed := range vocabSeeds {
		var h maphash.Hash
		h.SetSeed(seed)
		str := func(s string) {
			var n [8]byte
			for j := range n {
				n[j] = byte(len(s) >> (8 * j))
			}
			_, _ = h.Write(n[:])
			_, _ = h.WriteString(s)
		}
		num := func(x uint64) {
			var n [8]byte
			for j := range n {
				n[j] = byte(x >> (8 * j))
			}
			_, _ = h.Write(n[:])
		}
		num(uint64(len(v.Values)))
		for _, s := range v.Values {
			str(s)
		}
		num(uint64(len(v.Types)))
		for _, t := range v.Types {
			num(uint64(t))
		}
		num(uint64(len(v.Scores)))
		for _, s := range v.Scores {
			num(uint64(math.Float32bits(s)))
		}
		num(uint64(len(v.Merges)))
		for _, s := range v.Merges {
			str(s)
		}
		for _, ids := range [][]int32{v.BOS, v.EOS} {
			num(uint64(len(ids)))
			for _, id := range ids {
				num(uint64(id))
			}
		}
		str(fmt.Sprint(v.AddBOS, v.AddEOS))
		k.h[i] = h.Sum64()
	}
	return k
}

// tablesOf returns the tables of kind's vocabulary v, built now or shared
// with a model that has the same vocabulary. v must be valid for kind (New checks it); a vocabulary being
// built by another goroutine is built again here, and the first stored
// wins.
func tablesOf(kind string, v *tokenizer.Vocabulary) *tables {
	key := keyOf(kind, v)
	vocabTables.Lock()
	t := vocabTables.m[key].Value()
	vocabTables.Unlock()
	if t != nil {
		return t
	}
	t = &tables{vocab: v, special: v.SpecialVocabulary(), key: key}
	switch kind {
	case "gpt2":
		// Counting needs only the compact form: drop the strings. The
		// specials kept are copies, and so is the vocabulary, whose own
		// list of specials would hold shares of its tokens: a vocabulary
		// read from the tokenizer directory has its tokens as shares of
		// one string, which the specials would keep whole.
		t.bpe = newBPEVocab(v.Values, v.Merges)
		for i, s := range t.special {
			t.special[i] = strings.Clone(s)
		}
		t.vocab = &tokenizer.Vocabulary{Types: v.Types, Scores: v.Scores, BOS: v.BOS, EOS: v.EOS, AddBOS: v.AddBOS, AddEOS: v.AddEOS}
	case "llama":
		t.tok = tokenizer.NewSentencePiece(v)
	case "bert":
		t.tok = tokenizer.NewWordPiece(v, true)
	}
	t.trie = newTrie(t.special)
	t.size = footprint(t, v)

	vocabTables.Lock()
	defer vocabTables.Unlock()
	if old := vocabTables.m[key].Value(); old != nil {
		return old
	}
	for k, p := range vocabTables.m {
		if p.Value() == nil {
			delete(vocabTables.m, k)
		}
	}
	vocabTables.m[key] = weak.Make(t)
	return t
}

// footprint is about the bytes t holds, built from v: the compact form of
// a byte-level BPE vocabulary, or for the others v's strings and numbers
// as Ollama's tokenizer package holds them (a string header and its bytes
// per token, and the map from text to id it builds), and the specials.
func footprint(t *tables, v *tokenizer.Vocabulary) int64 {
	const header, mapEntry = 16, 48
	n := int64(4*len(t.vocab.Types) + 4*len(t.vocab.Scores))
	if b := t.bpe; b != nil {
		n += int64(len(b.text) + 4*len(b.ends) + 4*len(b.ids) + 8*len(b.pairs) + 4*len(b.ranks))
	} else {
		for _, s := range v.Values {
			n += int64(header + mapEntry + len(s))
		}
		for _, s := range v.Merges {
			n += int64(header + mapEntry + len(s))
		}
	}
	for _, s := range t.special {
		n += int64(header + len(s))
	}
	return n
}
