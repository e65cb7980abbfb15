package rewrite

import (
	"strings"
	"testing"
	"time"
)

// benchHistory is benchConversation with contents as long as their
// counts (4 bytes a token), so that hashing iterations costs what it does
// on real text.
func benchHistory(n int) []Message {
	msgs := benchConversation(n)
	for i := range msgs {
		msgs[i].Content = pad(msgs[i].Content+" ", msgs[i].Tokens*4)
	}
	return msgs
}

// BenchmarkTrimSummarize measures Trimmer.Trim in mode summarize on 1,000
// messages 25% over the limit whose summaries are all remembered: the cost
// every request pays once a conversation is being summarized (iterations,
// their keys, the fold, TokenBudget after it).
func BenchmarkTrimSummarize(b *testing.B) {
	msgs := benchHistory(1000)
	limit := Total(msgs, counter) * 4 / 5
	c := NewCompactor(SummarizeConfig{}, &fakeSummarizer{}, CompactorOptions{
		After: func(time.Duration) <-chan time.Time { return nil }})
	defer c.Close()
	tr, err := NewTrimmer(Config{Mode: "summarize"}, nil, c.Summarize())
	if err != nil {
		b.Fatal(err)
	}
	ctx, req := b.Context(), Request{Session: "bench", Model: "m"}
	if res, err := tr.Trim(ctx, req, msgs, limit, counter); err != nil || res.Summarized == 0 {
		b.Fatalf("warm-up: %v, %q", err, res.Notice)
	}
	idle(c)
	waited := c.Stats().Waited
	b.ReportAllocs()
	defer lockThread()()
	start, ok := threadCPU()
	n := 0
	for b.Loop() {
		res, err := tr.Trim(ctx, req, msgs, limit, counter)
		if err != nil || !strings.Contains(res.Notice, "summarized") {
			b.Fatalf("Trim: %v, %q", err, res.Notice)
		}
		n++
	}
	reportCPU(b, start, ok, n)
	if st := c.Stats(); st.Waited != waited {
		b.Errorf("%d requests waited", st.Waited)
	}
}

// BenchmarkIterationKeys measures splitting 1,000 messages (≈ 880 KB of
// text) into iterations and hashing every one of them.
func BenchmarkIterationKeys(b *testing.B) {
	msgs := benchHistory(1000)
	b.SetBytes(int64(len(msgs) * 880))
	b.ReportAllocs()
	defer lockThread()()
	start, ok := threadCPU()
	n := 0
	for b.Loop() {
		v := analyze(msgs, counter)
		v.keysTo(len(v.its))
		n++
	}
	reportCPU(b, start, ok, n)
}
