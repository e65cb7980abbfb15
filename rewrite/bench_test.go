package rewrite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchConversation is an agent session of n messages — user questions,
// tool calls (some parallel) with their results, replies — whose counts
// are cached in Tokens, as the proxy's counter leaves them.
func benchConversation(n int) []Message {
	rng := rand.New(rand.NewPCG(1, 1))
	msgs := []Message{sys("You are a coding agent.")}
	id := 0
	for len(msgs) < n {
		msgs = append(msgs, user(fmt.Sprintf("question %d", len(msgs))))
		for range rng.IntN(3) {
			k := 1 + rng.IntN(2)
			var ids []string
			for range k {
				id++
				ids = append(ids, fmt.Sprintf("call_%d", id))
			}
			msgs = append(msgs, call(ids...))
			for _, c := range ids {
				msgs = append(msgs, result(c, "output"))
			}
		}
		msgs = append(msgs, asst("answer"))
	}
	msgs = msgs[:n]
	msgs[n-1] = user("the newest question")
	for i := range msgs {
		msgs[i].Raw = raw(i)
		msgs[i].Tokens = 20 + rng.IntN(400)
	}
	return msgs
}

// BenchmarkTrim measures Trimmer.Trim on 1,000 messages with cached counts,
// 25% over the limit, for each mode.
func BenchmarkTrim(b *testing.B) {
	msgs := benchConversation(1000)
	limit := Total(msgs, counter) * 4 / 5
	for _, mode := range []string{"smart", "token_budget", "sliding_window", "selective", "importance"} {
		b.Run(mode, func(b *testing.B) {
			tr, err := NewTrimmer(Config{Mode: mode}, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				res, err := tr.Trim(ctx, "", msgs, limit, counter)
				if err != nil || res.Dropped == 0 {
					b.Fatalf("Trim: %v, dropped %d", err, res.Dropped)
				}
			}
		})
	}
}

// BenchmarkUnits measures grouping 1,000 messages into tool units.
func BenchmarkUnits(b *testing.B) {
	msgs := benchConversation(1000)
	b.ReportAllocs()
	for b.Loop() {
		Units(msgs)
	}
}

// BenchmarkTrimBelowThreshold is the common case: the conversation fits and
// is forwarded as sent.
func BenchmarkTrimBelowThreshold(b *testing.B) {
	msgs := benchConversation(1000)
	tr, err := NewTrimmer(Config{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	limit := Total(msgs, counter) * 2
	b.ReportAllocs()
	for b.Loop() {
		tr.Trim(context.Background(), "", msgs, limit, counter)
	}
}
