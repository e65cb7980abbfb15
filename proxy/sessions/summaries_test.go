package sessions

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/redistest"
)

// byteCounter counts a token per four bytes, alike on every replica.
type byteCounter struct{}

func (byteCounter) CountText(s string) int              { return len(s)/4 + 1 }
func (byteCounter) CountMessage(m *rewrite.Message) int { return 3 + len(m.Content)/4 + 1 }

// slowSummarizer stands for a model that takes a while to answer, so that
// replicas that start together are still summarizing together. It counts
// its calls; block, when set, holds every call until ctx ends.
type slowSummarizer struct {
	calls   *atomic.Int64
	block   bool
	started chan struct{} // receives a value when a call begins, if set
}

func (s slowSummarizer) Summarize(ctx context.Context, req rewrite.SummaryRequest) (string, error) {
	s.calls.Add(1)
	if s.started != nil {
		s.started <- struct{}{}
	}
	wait := 20 * time.Millisecond
	if s.block {
		wait = time.Hour
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-t.C:
	}
	return "Summary of " + strings.Join(strings.Fields(req.Messages[0].Content)[:3], " ") + ".", nil
}

// conversation is a system prompt and n iterations of a question and an
// answer.
func conversation(n int) []rewrite.Message {
	msgs := []rewrite.Message{{Role: "system", Content: "You are a patient tutor."}}
	for i := range n {
		msgs = append(msgs,
			rewrite.Message{Role: "user", Content: fmt.Sprintf("Question %d: tell me about topic %d in some detail, please.", i, i)},
			rewrite.Message{Role: "assistant", Content: fmt.Sprintf("Answer %d: here is what there is to say about topic %d.", i, i)})
	}
	return msgs
}

// replica is one ctxproxy replica's summaries: a Redis store of its own
// (its own cache) on the shared Redis at addr, and a Compactor writing
// through it.
func replica(t *testing.T, addr string, cfg rewrite.SummarizeConfig, sum rewrite.Summarizer, wrap ...func(SummaryStore) rewrite.SummaryStore) (*rewrite.Compactor, *snapshots.RedisStore) {
	t.Helper()
	st, err := snapshots.NewRedisStore(context.Background(), snapshots.Config{Store: snapshots.StoreRedis,
		Redis: snapshots.RedisConfig{Addr: addr, Prefix: "claims:"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var store rewrite.SummaryStore = SummaryStore{Store: st}
	for _, w := range wrap {
		store = w(SummaryStore{Store: st})
	}
	c := rewrite.NewCompactor(cfg, sum, rewrite.CompactorOptions{Store: store})
	t.Cleanup(func() { c.Close() })
	return c, st
}

func stored(t *testing.T, st Store, session string) int {
	t.Helper()
	ss, err := SummaryStore{Store: st}.Get(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	return len(ss)
}

// TestReplicasWriteASummaryOnce: two replicas on one Redis compact the
// same conversation at the same moment. They call the summarizer as often
// as one replica alone does, and fold the same summaries: one of them
// writes each summary, the other waits for it.
func TestReplicasWriteASummaryOnce(t *testing.T) {
	addr := redistest.Start(t)
	msgs := conversation(20)
	for _, schedule := range []string{rewrite.ScheduleAhead, rewrite.ScheduleAtCut} {
		t.Run(schedule, func(t *testing.T) {
			cfg := rewrite.SummarizeConfig{Schedule: schedule}
			var calls atomic.Int64
			alone, st := replica(t, addr, cfg, slowSummarizer{calls: &calls})
			if _, err := alone.Compact(t.Context(), rewrite.Request{Session: schedule + "-alone"}, msgs, byteCounter{}); err != nil {
				t.Fatal(err)
			}
			one, written := calls.Load(), stored(t, st, schedule+"-alone")

			calls.Store(0)
			a, _ := replica(t, addr, cfg, slowSummarizer{calls: &calls})
			b, _ := replica(t, addr, cfg, slowSummarizer{calls: &calls})
			req := rewrite.Request{Session: schedule + "-shared"}
			var got [2]rewrite.Compaction
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, c := range []*rewrite.Compactor{a, b} {
				wg.Go(func() {
					<-start
					var err error
					if got[i], err = c.Compact(t.Context(), req, msgs, byteCounter{}); err != nil {
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()
			two := calls.Load()
			t.Logf("summarizer calls: %d on one replica, %d on two at once; %d summaries stored; deferred: %d and %d",
				one, two, written, a.Stats().Deferred, b.Stats().Deferred)
			if one == 0 || two != one || int64(written) != one {
				t.Errorf("%d summarizer calls on two replicas at once, %d on one (%d summaries stored)", two, one, written)
			}
			if n := stored(t, st, req.Session); n != written {
				t.Errorf("%d summaries stored by two replicas, %d by one", n, written)
			}
			if got[0].Summaries == 0 || got[0].Summaries != got[1].Summaries || fmt.Sprint(got[0].Messages) != fmt.Sprint(got[1].Messages) {
				t.Errorf("the replicas folded differently: %d and %d summaries", got[0].Summaries, got[1].Summaries)
			}
		})
	}
}

// TestReplicaDiesHoldingAClaim: a replica that claimed a summary and died
// before writing it holds the others back only until its claim expires.
func TestReplicaDiesHoldingAClaim(t *testing.T) {
	addr := redistest.Start(t)
	msgs := conversation(10)
	req := rewrite.Request{Session: "dies"}
	cfg := rewrite.SummarizeConfig{Schedule: rewrite.ScheduleAhead}

	var deadCalls atomic.Int64
	started := make(chan struct{}, 1)
	// Its claims last 300ms instead of summarize.timeout and a margin, so
	// that the test does not wait a minute.
	dead, _ := replica(t, addr, cfg, slowSummarizer{calls: &deadCalls, block: true, started: started},
		func(s SummaryStore) rewrite.SummaryStore { return shortClaims{s, 300 * time.Millisecond} })
	go dead.Compact(t.Context(), req, msgs, byteCounter{})
	<-started // it holds the claim of the first summary, and hangs

	var calls atomic.Int64
	live, st := replica(t, addr, cfg, slowSummarizer{calls: &calls})
	got, err := live.Compact(t.Context(), req, msgs, byteCounter{})
	if err != nil {
		t.Fatal(err)
	}
	if live.Stats().Deferred == 0 {
		t.Error("the live replica did not find the claim held")
	}
	if got.Summaries != 7 || calls.Load() != 7 || stored(t, st, req.Session) != 7 {
		t.Errorf("%d summaries folded, %d calls, %d stored; want 7 of each", got.Summaries, calls.Load(), stored(t, st, req.Session))
	}
	dead.Close()
	if deadCalls.Load() != 1 {
		t.Errorf("the hung replica made %d calls, want 1", deadCalls.Load())
	}
}

// shortClaims claims for ttl whatever it is asked.
type shortClaims struct {
	SummaryStore
	ttl time.Duration
}

func (s shortClaims) ClaimSummary(ctx context.Context, session, key string, _ time.Duration) (func(context.Context) error, bool, error) {
	return s.SummaryStore.ClaimSummary(ctx, session, key, s.ttl)
}

// TestFileStoreSummariesNeedNoClaim: on the file store (one process) every
// claim is granted with nothing to release, so summaries are written as
// before.
func TestFileStoreSummariesNeedNoClaim(t *testing.T) {
	fs, err := snapshots.NewFileStore(snapshots.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	store := SummaryStore{Store: fs}
	if release, ok, err := store.ClaimSummary(t.Context(), "s", "key", time.Minute); release != nil || !ok || err != nil {
		t.Errorf("ClaimSummary on the file store = %v, %v, %v; want nil, true, nil", release != nil, ok, err)
	}
	var calls atomic.Int64
	c := rewrite.NewCompactor(rewrite.SummarizeConfig{}, slowSummarizer{calls: &calls}, rewrite.CompactorOptions{Store: store})
	defer c.Close()
	got, err := c.Compact(t.Context(), rewrite.Request{Session: "s"}, conversation(10), byteCounter{})
	if err != nil || got.Summaries == 0 || stored(t, fs, "s") != int(calls.Load()) {
		t.Errorf("%v: %d summaries folded, %d calls, %d stored", err, got.Summaries, calls.Load(), stored(t, fs, "s"))
	}
	if st := c.Stats(); st.Deferred != 0 || st.StoreErrors != 0 {
		t.Errorf("Deferred %d, StoreErrors %d; want 0", st.Deferred, st.StoreErrors)
	}
}
