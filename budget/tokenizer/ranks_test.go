package tokenizer

import (
	"runtime"
	"testing"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// TestRankTable holds the table to the map it was built from, for every
// token of both encodings and for strings that are not tokens.
func TestRankTable(t *testing.T) {
	for _, enc := range []string{EncodingCL100K, EncodingO200K} {
		ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(enc + ".tiktoken")
		if err != nil {
			t.Fatal(err)
		}
		table, err := newRankTable(ranks)
		if err != nil {
			t.Fatal(err)
		}
		if got := table.len(); got != len(ranks) {
			t.Errorf("%s: %d tokens, the map has %d", enc, got, len(ranks))
		}
		for k, r := range ranks {
			if got, ok := table.get(k); !ok || int(got) != r {
				t.Fatalf("%s: get(%q) = %d, %v; want %d", enc, k, got, ok, r)
			}
			if _, ok := ranks[k+"\x00\xff"]; !ok {
				if _, found := table.get(k + "\x00\xff"); found {
					t.Fatalf("%s: get(%q) found a token that is not one", enc, k+"\x00\xff")
				}
			}
		}
		if _, ok := table.get(""); ok {
			t.Errorf("%s: the empty string is a token", enc)
		}
	}
}

// TestRankTableObjects pins what the table is for: the collector finds a
// handful of objects in an encoding, not one per token.
func TestRankTableObjects(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(EncodingCL100K + ".tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	table, err := newRankTable(ranks)
	if err != nil {
		t.Fatal(err)
	}
	n := len(ranks)
	ranks = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	if d := int64(after.HeapObjects) - int64(before.HeapObjects); d > 50 {
		t.Errorf("the table of %d tokens holds %d more heap objects, want a handful", n, d)
	}
	runtime.KeepAlive(table)
}

// len returns the number of tokens (for the tests).
func (t *rankTable) len() int {
	n := 0
	for i := range t.slots {
		if t.slots[i].rank >= 0 {
			n++
		}
	}
	return n
}
