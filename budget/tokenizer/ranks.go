package tokenizer

import (
	"fmt"
	"hash/maphash"
	"math"
)

// rankTable maps a token's bytes to its rank, as map[string]int would,
// but holds no pointer for the garbage collector to follow. An encoding
// has 100,000 (cl100k) or 200,000 (o200k) tokens: as a Go map each key is
// its own allocation, and every collection cycle marked all of them
// again, about 6 ms of CPU per cycle with both encodings loaded, paid
// every hundred 100 KB chats. Here the keys lie back to back in one byte
// array and the slots of an open-addressing table are offsets into it:
// two allocations the collector marks without scanning.
type rankTable struct {
	seed  maphash.Seed
	arena []byte
	slots []rankSlot
	mask  uint64
}

// rankSlot is one slot: the key at arena[off:off+n], a tag of 16 more
// bits of its hash (most probes of another key stop there), and its rank;
// rank -1 marks an empty slot.
type rankSlot struct {
	off  uint32
	n    uint16
	tag  uint16
	rank int32
}

// newRankTable builds the table of ranks, whose ranks must fit in an
// int32 and whose keys in 64 KB each and 4 GB in all.
func newRankTable(ranks map[string]int) (*rankTable, error) {
	size := 1
	for size < 2*len(ranks) { // load at most one half: short probe runs
		size *= 2
	}
	t := &rankTable{seed: maphash.MakeSeed(), slots: make([]rankSlot, size), mask: uint64(size - 1)}
	total := 0
	for k := range ranks {
		total += len(k)
	}
	if total > math.MaxUint32 {
		return nil, fmt.Errorf("tokenizer: %d bytes of tokens", total)
	}
	t.arena = make([]byte, 0, total)
	for i := range t.slots {
		t.slots[i].rank = -1
	}
	for k, r := range ranks {
		if len(k) > math.MaxUint16 || r < 0 || r > math.MaxInt32 {
			return nil, fmt.Errorf("tokenizer: token of %d bytes with rank %d", len(k), r)
		}
		h := maphash.String(t.seed, k)
		i := h & t.mask
		for t.slots[i].rank >= 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = rankSlot{off: uint32(len(t.arena)), n: uint16(len(k)), tag: uint16(h >> 48), rank: int32(r)}
		t.arena = append(t.arena, k...)
	}
	return t, nil
}

// get returns the rank of token s, if it is one.
func (t *rankTable) get(s string) (int32, bool) {
	h := maphash.String(t.seed, s)
	tag := uint16(h >> 48)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.rank < 0 {
			return 0, false
		}
		if sl.tag == tag && int(sl.n) == len(s) && string(t.arena[sl.off:sl.off+uint32(sl.n)]) == s {
			return sl.rank, true
		}
	}
}
