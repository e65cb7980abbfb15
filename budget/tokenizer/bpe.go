package tokenizer

import (
	"math"
)

// bpe counts tokens of one encoding: its pre-tokenizer splits text into
// pieces, and each piece is merged byte pair by byte pair, lowest rank
// first, as tiktoken does. Only the count is kept, so nothing is
// allocated for pieces of up to stackParts bytes.
type bpe struct {
	ranks *rankTable
	piece func(s string, p int) int
}

// count returns the number of tokens of s.
func (e *bpe) count(s string) int {
	n := 0
	for p := 0; p < len(s); {
		end := e.piece(s, p)
		if end <= p { // cannot happen; never loop forever on a bug
			end = p + 1
		}
		n += e.pieceTokens(s[p:end])
		p = end
	}
	return n
}

const stackParts = 64

// part is a boundary in a piece being merged: where a token starts, and
// the rank of merging it with the next token (math.MaxInt: no merge).
type part struct {
	start int32
	rank  int32
}

const noRank = math.MaxInt32

// pieceTokens returns the number of tokens byte-pair merging gives piece.
func (e *bpe) pieceTokens(piece string) int {
	if len(piece) <= 1 {
		return len(piece)
	}
	if _, ok := e.ranks.get(piece); ok {
		return 1
	}
	var buf [stackParts + 1]part
	var parts []part
	if len(piece)+1 <= len(buf) {
		parts = buf[:len(piece)+1]
	} else {
		parts = make([]part, len(piece)+1)
	}
	for i := range parts {
		parts[i] = part{start: int32(i), rank: noRank}
	}
	rank := func(i int) int32 {
		// The rank of the token spanning parts i and i+1.
		if i+2 < len(parts) {
			if r, ok := e.ranks.get(piece[parts[i].start:parts[i+2].start]); ok {
				return r
			}
		}
		return noRank
	}
	for i := 0; i < len(parts)-2; i++ {
		parts[i].rank = rank(i)
	}
	for len(parts) > 2 {
		min, at := int32(noRank), -1
		for i := 0; i < len(parts)-1; i++ {
			if parts[i].rank < min {
				min, at = parts[i].rank, i
			}
		}
		if at < 0 {
			break
		}
		// Merge at and at+1: drop the boundary between them, then
		// re-rank the pairs that now start at at and at-1.
		copy(parts[at+1:], parts[at+2:])
		parts = parts[:len(parts)-1]
		parts[at].rank = rank(at)
		if at > 0 {
			parts[at-1].rank = rank(at - 1)
		}
	}
	return len(parts) - 1
}
