package rewrite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
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
			defer lockThread()()
			start, ok := threadCPU()
			n := 0
			for b.Loop() {
				res, err := tr.Trim(ctx, Request{}, msgs, limit, counter)
				if err != nil || res.Dropped == 0 {
					b.Fatalf("Trim: %v, dropped %d", err, res.Dropped)
				}
				n++
			}
			reportCPU(b, start, ok, n)
		})
	}
}

// BenchmarkUnits measures grouping 1,000 messages into tool units.
func BenchmarkUnits(b *testing.B) {
	msgs := benchConversation(1000)
	b.ReportAllocs()
	defer lockThread()()
	start, ok := threadCPU()
	n := 0
	for b.Loop() {
		Units(msgs)
		n++
	}
	reportCPU(b, start, ok, n)
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
	defer lockThread()()
	start, ok := threadCPU()
	n := 0
	for b.Loop() {
		tr.Trim(context.Background(), Request{}, msgs, limit, counter)
		n++
	}
	reportCPU(b, start, ok, n)
}

// reportCPU adds cpu-ns/op: the CPU time of the benchmark's thread per
// operation (garbage collection on other threads not included).
func reportCPU(b *testing.B, start time.Duration, ok bool, n int) {
	end, ok2 := threadCPU()
	if ok && ok2 && n > 0 {
		b.ReportMetric(float64(end-start)/float64(n), "cpu-ns/op")
	}
}
