package plan

import (
	"math"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

func msgs(tokens ...int) []rewrite.Message {
	out := make([]rewrite.Message, len(tokens))
	for i, n := range tokens {
		out[i] = rewrite.Message{Role: []string{"user", "assistant"}[i%2], Content: "message " + string(rune('a'+i)), Tokens: n}
	}
	return out
}

// The share of a prompt the previous one began with, by tokens: a
// resend with the reply and a new turn appended keeps its whole history;
// a change in the middle keeps what stands before it; the first turn has
// nothing to compare with.
func TestPrefixKept(t *testing.T) {
	ps := newPrefixes()
	if _, ok := ps.kept("s", msgs(10, 20), nil); ok {
		t.Errorf("a first turn measured a prefix")
	}
	share, ok := ps.kept("s", msgs(10, 20, 30, 40), nil)
	if !ok || math.Abs(share-0.3) > 1e-9 {
		t.Errorf("appended turn: share %v, %v; want 0.3 (30 of 100 tokens)", share, ok)
	}
	cut := msgs(10, 20, 30, 40)
	cut[1].Content = "a summary in place of the old turns"
	if share, _ := ps.kept("s", cut, nil); math.Abs(share-0.1) > 1e-9 {
		t.Errorf("changed second message: share %v, want 0.1", share)
	}
	if share, _ := ps.kept("s", cut, nil); share != 1 {
		t.Errorf("the same prompt again: share %v, want 1", share)
	}
	uncounted := msgs(0, 0, 0, 0)
	ps.kept("u", uncounted[:2], nil)
	if share, _ := ps.kept("u", uncounted, nil); share != 0.5 {
		t.Errorf("uncounted messages: share %v, want 0.5 (by messages)", share)
	}
	if _, ok := ps.kept("other", msgs(10), nil); ok {
		t.Errorf("sessions share prefixes")
	}
	// An image of another size is another prompt: the backend's cache
	// ends before it.
	seen := msgs(10, 20)
	seen[1].Images = []chat.Image{{Width: 640, Height: 480}}
	ps.kept("i", seen, nil)
	other := msgs(10, 20)
	other[1].Images = []chat.Image{{Width: 64, Height: 4800}}
	if share, _ := ps.kept("i", other, nil); math.Abs(share-1.0/3) > 1e-9 {
		t.Errorf("an image of another size: share %v, want 1/3 (10 of 30 tokens)", share)
	}
	// The reply the backend generated is in its cache too: a chat that
	// resends it keeps it.
	turn := msgs(10, 20, 30, 40)
	ps.kept("r", turn[:2], &rewrite.Message{Role: turn[2].Role, Content: turn[2].Content})
	if share, _ := ps.kept("r", turn, nil); math.Abs(share-0.6) > 1e-9 {
		t.Errorf("with the reply resent: share %v, want 0.6 (60 of 100 tokens)", share)
	}
}

// BenchmarkPrefixKept is a resent 100-message, 100 KB conversation's
// prefix measure, after the reply, per recorded turn.
func BenchmarkPrefixKept(b *testing.B) {
	ms := make([]rewrite.Message, 100)
	for i := range ms {
		ms[i] = rewrite.Message{Role: "user", Content: strings.Repeat("message says something useful. ", 33), Tokens: 250}
	}
	ps := newPrefixes()
	ps.kept("s", ms, nil)
	b.ReportAllocs()
	for b.Loop() {
		ps.kept("s", ms, nil)
	}
}
