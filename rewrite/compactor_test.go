package rewrite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var foldedInto = regexp.MustCompile(`folded into (\d+) summar`)

// summariesIn returns how many iterations a notice says were folded.
func summariesIn(notice string) int {
	m := foldedInto.FindStringSubmatch(notice)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// replayTurn returns the messages turn i adds to a conversation: a user
// question, on every fifth turn a tool call and its result, and the
// answer. Sizes vary from turn to turn.
func replayTurn(i int, rng *rand.Rand) (question Message, rest []Message) {
	question = user(pad(fmt.Sprintf("question %d about pkg%d/main.go ", i, i), 200+rng.IntN(1000)))
	if i%5 == 4 {
		id := fmt.Sprintf("call_%d", i)
		rest = append(rest, call(id), result(id, pad(fmt.Sprintf("result %d ", i), 300+rng.IntN(900))))
	}
	rest = append(rest, asst(pad(fmt.Sprintf("answer %d ", i), 200+rng.IntN(1200))))
	return question, rest
}

// TestReplay200Turns replays a 200-turn conversation turn by turn, the
// whole history each time as a client resends it, through the summarize
// mode of a Trimmer (summarization runs between iterations when needed). Each iteration is summarized at most once; the request that
// reaches a trim step finds its summaries written in the background; the
// summaries reach the model in the system prompt; and the system prompt
// changes once per step, not on every turn.
func TestReplay200Turns(t *testing.T) {
	const limit = 8000
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	ctx, req := t.Context(), session("replay")
	rng := rand.New(rand.NewPCG(7, 7))

	history := []Message{sys("You are a coding assistant.")}
	folded, maxJump, prompts, summarized := 0, 0, 0, 0
	lastPrompt := ""
	for i := range 200 {
		q, rest := replayTurn(i, rng)
		msgs := numbered(append(append([]Message(nil), history...), q)...)
		res, err := tr.Trim(ctx, req, msgs, limit, counter)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if got := Total(res.Messages, counter); got > limit {
			t.Fatalf("turn %d: %d tokens > %d", i, got, limit)
		}
		n := summariesIn(res.Notice)
		if n > 0 {
			summarized++
			block := blockOf(res.Messages)
			v := analyze(msgs, counter)
			want, _ := TrimSummary(summaryOf(SummaryRequest{Messages: v.iterMessages(n - 1)}), DefaultSummaryTokens, counter)
			if !strings.Contains(block, want) {
				t.Fatalf("turn %d: %q not in the system prompt:\n%s", i, want, res.Messages[0].Content)
			}
			if res.Messages[0].Role != "system" || idOf(res.Messages[0]) != 0 {
				t.Fatalf("turn %d: summaries not in the system prompt", i)
			}
		}
		if n < folded {
			t.Fatalf("turn %d: %d iterations folded after %d", i, n, folded)
		}
		maxJump = max(maxJump, n-folded)
		folded = n
		if p := res.Messages[0].Content; p != lastPrompt {
			prompts++
			lastPrompt = p
		}
		history = append(append(history, q), rest...)
		idle(c) // the user reads the answer
	}

	calls := f.requests()
	seen := map[string]int{}
	for _, req := range calls {
		seen[fmt.Sprint(req.Messages)]++
	}
	for q, n := range seen {
		if n > 1 {
			t.Errorf("iteration %.20q summarized %d times", q, n)
		}
	}
	st := c.Stats()
	t.Logf("200 turns, limit %d: %d requests summarized, %d iterations folded in the last; %d summarizer calls "+
		"(%d written ahead for the next step); %d requests waited, %d trimmed for want of summaries; "+
		"the system prompt changed %d times", limit, summarized, folded, len(calls), len(calls)-folded,
		st.Waited, st.Fallbacks, prompts)
	if len(calls) < folded || len(calls) > folded+maxJump {
		t.Errorf("%d calls for %d folded iterations (steps fold up to %d at once)", len(calls), folded, maxJump)
	}
	if st.Waited > 1 || st.Fallbacks > 0 {
		t.Errorf("%d requests waited for a summary, %d were trimmed for want of one", st.Waited, st.Fallbacks)
	}
	if prompts > summarized/3 {
		t.Errorf("the system prompt changed on %d of %d summarized requests", prompts, summarized)
	}
}

func TestSummarizeIsIncremental(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{KeepRecent: 3}, f, CompactorOptions{})
	ctx, req := t.Context(), session("s")
	first, err := c.Compact(ctx, req, turns(10, hundred), counter)
	if err != nil || f.count() != 7 {
		t.Fatalf("first compaction: %v, %d calls, want 7", err, f.count())
	}
	// One more iteration folds: one more call, for that iteration only,
	// with the earlier summaries as context.
	second, err := c.Compact(ctx, req, turns(11, hundred), counter)
	if err != nil || f.count() != 8 {
		t.Fatalf("second compaction: %v, %d calls, want 8", err, f.count())
	}
	last := f.requests()[7]
	if !strings.HasPrefix(last.Messages[0].Content, "question 7 ") || len(last.Messages) != 2 {
		t.Errorf("summarized %q…, want iteration 7 only", last.Messages[0].Content[:12])
	}
	if !strings.Contains(last.Previous, "Summary of question 6") || !strings.Contains(last.Previous, "Summary of question 0") {
		t.Errorf("Previous = %q", last.Previous)
	}
	if !strings.HasPrefix(blockOf(second.Messages), strings.TrimSuffix(blockOf(first.Messages), "\n"+blockClose)) {
		t.Errorf("the block was not extended:\n%s\nthen\n%s", blockOf(first.Messages), blockOf(second.Messages))
	}
	// The same history again costs nothing.
	if _, err := c.Compact(ctx, req, turns(11, hundred), counter); err != nil || f.count() != 8 {
		t.Errorf("repeat: %v, %d calls", err, f.count())
	}
	// An edited old message invalidates its iteration and the later ones.
	edited := turns(11, hundred)
	edited[9].Content = "question 4, asked differently"
	if _, err := c.Compact(ctx, req, edited, counter); err != nil || f.count() != 8+4 {
		t.Errorf("edited history: %v, %d calls, want 12", err, f.count())
	}
}

func TestSummaryStoreSurvivesRestart(t *testing.T) {
	store := &memStore{}
	f := &fakeSummarizer{}
	msgs := turns(10, hundred)
	c1, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Store: store})
	want, err := c1.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	if n := len(store.m["s"]); n != 7 {
		t.Fatalf("store holds %d summaries, want 7", n)
	}
	for i, s := range store.m["s"] {
		if s.Covers != i+1 || s.Tokens != counter.CountText(s.Text) || s.Created.IsZero() || len(s.Key) != 32 {
			t.Errorf("summary %d = %+v", i, s)
		}
	}
	// Another process (a restart, a replica) finds them.
	f2 := &fakeSummarizer{}
	c2, _ := newCompactor(t, SummarizeConfig{}, f2, CompactorOptions{Store: store})
	got, err := c2.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	if f2.count() != 0 {
		t.Errorf("%d calls after a restart, want 0", f2.count())
	}
	if diff := cmp.Diff(want.Messages, got.Messages); diff != "" {
		t.Errorf("result after a restart (-before +after):\n%s", diff)
	}
	// In memory, summaries are found by content: another session with the
	// same history shares them (it has the same text to summarize).
	if _, err := c2.Compact(t.Context(), session("other"), msgs, counter); err != nil || f2.count() != 0 {
		t.Errorf("other session: %v, %d calls", err, f2.count())
	}
}

func TestSummaryStoreFailureIsNotFatal(t *testing.T) {
	store := &memStore{fail: errors.New("redis: connection refused")}
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Store: store})
	msgs := turns(10, hundred)
	if got, err := c.Compact(t.Context(), session("s"), msgs, counter); err != nil || got.Summaries != 7 {
		t.Fatalf("%v, %d summaries", err, got.Summaries)
	}
	if st := c.Stats(); st.StoreErrors != 8 { // one Get, seven Puts
		t.Errorf("StoreErrors = %d, want 8", st.StoreErrors)
	}
	// The summaries are still remembered in memory.
	if _, err := c.Compact(t.Context(), session("s"), msgs, counter); err != nil || f.count() != 7 {
		t.Errorf("%v, %d calls", err, f.count())
	}
}

func TestSummarizeWithoutSession(t *testing.T) {
	f := &fakeSummarizer{}
	store := &memStore{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Store: store})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	msgs := turns(30, hundred*2)
	calls := 0
	for i := range 3 {
		res, err := tr.Trim(context.Background(), Request{}, msgs, 10000, counter)
		if err != nil || res.Summarized == 0 {
			t.Fatalf("%v, summarized %d", err, res.Summarized)
		}
		idle(c)
		if i > 0 && f.count() != calls {
			t.Errorf("request %d: %d more calls for the same history", i, f.count()-calls)
		}
		calls = f.count()
	}
	if store.gets.Load() != 0 || len(store.m) != 0 {
		t.Error("the store was used without a session")
	}
}

func mustTrim(t *testing.T, tr *Trimmer, req Request, msgs []Message, limit int) Result {
	t.Helper()
	res, err := tr.Trim(t.Context(), req, msgs, limit, counter)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestSummarizerFaults: whatever the summarizer does wrong, the request
// still goes through trimmed, and the failure is counted and logged.
func TestSummarizerFaults(t *testing.T) {
	long := strings.Repeat("The user asked about the build. ", 200) // ~1600 tokens
	tests := []struct {
		name    string
		reply   func(ctx context.Context, req SummaryRequest) (string, error)
		fails   bool
		cutDown bool
	}{
		{"empty", func(context.Context, SummaryRequest) (string, error) { return "", nil }, true, false},
		{"blank", func(context.Context, SummaryRequest) (string, error) { return " \n\t ", nil }, true, false},
		{"only thinking", func(context.Context, SummaryRequest) (string, error) { return "<think>hmm</think>", nil }, true, false},
		{"error", func(context.Context, SummaryRequest) (string, error) { return "", errors.New("500 from backend") }, true, false},
		{"timeout", func(ctx context.Context, _ SummaryRequest) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}, true, false},
		{"late answer", func(ctx context.Context, _ SummaryRequest) (string, error) {
			<-ctx.Done()
			return "Too late.", nil
		}, true, false},
		{"oversized", func(context.Context, SummaryRequest) (string, error) { return long, nil }, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSummarizer{reply: tt.reply}
			var observed []error
			var mu sync.Mutex
			timeout := time.Minute
			if strings.Contains(tt.name, "timeout") || strings.Contains(tt.name, "late") {
				timeout = 5 * time.Millisecond
			}
			c, clock := newCompactor(t, SummarizeConfig{Timeout: timeout, MaxTokens: 64, PrefetchAt: -1}, f,
				CompactorOptions{OnCall: func(_ time.Duration, err error) { mu.Lock(); observed = append(observed, err); mu.Unlock() }})
			tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
			msgs := turns(30, hundred*2)
			res := mustTrim(t, tr, session("s"), msgs, 10000)
			if got := Total(res.Messages, counter); got > 8000 {
				t.Errorf("%d tokens: not trimmed", got)
			}
			st := c.Stats()
			mu.Lock()
			got := append([]error(nil), observed...)
			mu.Unlock()
			if tt.fails {
				if res.Summarized != 0 || res.Dropped == 0 || st.Failures != 1 || len(got) != 1 || got[0] == nil {
					t.Errorf("summarized %d, dropped %d, failures %d, observed %v", res.Summarized, res.Dropped, st.Failures, got)
				}
				// Not asked again at once: the backend gets a rest.
				mustTrim(t, tr, session("s"), msgs, 10000)
				idle(c)
				if f.count() != 1 {
					t.Errorf("%d calls within the retry period", f.count())
				}
				clock.Advance(retryAfter + time.Second)
				mustTrim(t, tr, session("s"), msgs, 10000)
				idle(c)
				if f.count() != 2 {
					t.Errorf("%d calls after the retry period, want 2", f.count())
				}
				return
			}
			if res.Summarized == 0 || st.Failures != 0 || st.Cut == 0 {
				t.Errorf("summarized %d, failures %d, cut %d", res.Summarized, st.Failures, st.Cut)
			}
			for _, line := range strings.Split(blockOf(res.Messages), "\n") {
				if strings.HasPrefix(line, blockIndent+"The user") && counter.CountText(line) > 64+1 {
					t.Errorf("summary of %d tokens kept", counter.CountText(line))
				}
			}
		})
	}
}

// TestSummarizeWaitFallsBackToTrim: a request that needs summaries not
// ready within summarize.wait is trimmed; the next request uses them.
func TestSummarizeWaitFallsBackToTrim(t *testing.T) {
	release := make(chan struct{})
	f := &fakeSummarizer{reply: func(ctx context.Context, req SummaryRequest) (string, error) {
		select {
		case <-release:
			return summaryOf(req), nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}}
	c, clock := newCompactor(t, SummarizeConfig{PrefetchAt: -1}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	msgs := turns(30, hundred*2)

	done := make(chan Result)
	go func() { done <- mustTrim(t, tr, session("s"), msgs, 10000) }()
	<-clock.waiting // the request waits...
	clock.fire()    // ...until summarize.wait has passed
	res := <-done
	if res.Summarized != 0 || res.Dropped == 0 || Total(res.Messages, counter) > 8000 {
		t.Errorf("summarized %d, dropped %d: not trimmed instead", res.Summarized, res.Dropped)
	}
	if st := c.Stats(); st.Waited != 1 || st.Fallbacks != 1 {
		t.Errorf("waited %d, fallbacks %d", st.Waited, st.Fallbacks)
	}

	close(release) // the summaries arrive in the background
	idle(c)
	res = mustTrim(t, tr, session("s"), msgs, 10000)
	if res.Summarized == 0 {
		t.Errorf("the next request did not use the summaries: %q", res.Notice)
	}
	if st := c.Stats(); st.Waited != 1 {
		t.Errorf("the next request waited")
	}
}

// TestPrefetchBelowThreshold: nearing the threshold starts the summaries
// in the background, so that the request reaching it does not wait.
func TestPrefetchBelowThreshold(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	req := session("s")
	// 73% of the limit: forwarded unchanged, summaries written behind.
	msgs := turns(37, hundred*2)
	res := mustTrim(t, tr, req, msgs, 20000)
	if res.Notice != "" || len(res.Messages) != len(msgs) {
		t.Fatalf("changed below the threshold: %q", res.Notice)
	}
	idle(c)
	if f.count() == 0 {
		t.Fatal("nothing prefetched at 73%")
	}
	// 81%: folded at once, with what was prefetched.
	res = mustTrim(t, tr, req, turns(41, hundred*2), 20000)
	if res.Summarized == 0 || c.Stats().Waited != 0 {
		t.Errorf("summarized %d, waited %d", res.Summarized, c.Stats().Waited)
	}
	if calls := f.count(); calls != summariesIn(res.Notice) {
		t.Errorf("%d calls, %d iterations folded", calls, summariesIn(res.Notice))
	}
	// Below prefetch_at nothing happens at all.
	f2 := &fakeSummarizer{}
	c2, _ := newCompactor(t, SummarizeConfig{}, f2, CompactorOptions{})
	mustTrim(t, summarizingTrimmer(t, Config{Mode: "summarize"}, c2), req, turns(34, hundred*2), 20000)
	idle(c2)
	if f2.count() != 0 || c2.Stats().Jobs != 0 {
		t.Errorf("prefetched at 68%%: %d calls", f2.count())
	}
}

// TestOneJobPerSession: concurrent requests of one session share one
// background job, and each iteration is summarized once.
func TestOneJobPerSession(t *testing.T) {
	release := make(chan struct{})
	f := &fakeSummarizer{reply: func(ctx context.Context, req SummaryRequest) (string, error) {
		<-release
		return summaryOf(req), nil
	}}
	c, clock := newCompactor(t, SummarizeConfig{PrefetchAt: -1}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	msgs := turns(30, hundred*2)
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustTrim(t, tr, session("s"), msgs, 10000)
		}()
	}
	<-clock.waiting // one waits: the session's first fold; the others trim at once
	clock.fire()
	wg.Wait()
	if w := c.Stats().Waited; w != 1 {
		t.Errorf("%d requests waited, want the first only", w)
	}
	close(release)
	idle(c)
	res := mustTrim(t, tr, session("s"), msgs, 10000)
	if st := c.Stats(); st.Jobs != 1 || f.count() != summariesIn(res.Notice) {
		t.Errorf("%d jobs, %d calls for %d iterations", st.Jobs, f.count(), summariesIn(res.Notice))
	}
}

// TestCloseCancelsJobs: Close stops the background work and waits for it.
func TestCloseCancelsJobs(t *testing.T) {
	started := make(chan struct{}, 1)
	f := &fakeSummarizer{reply: func(ctx context.Context, _ SummaryRequest) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}}
	c := NewCompactor(SummarizeConfig{Schedule: ScheduleAhead}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	mustTrim(t, tr, session("s"), turns(37, hundred*2), 20000) // prefetches
	<-started
	c.Close()
	c.mu.Lock()
	jobs := len(c.jobs)
	c.mu.Unlock()
	if jobs != 0 {
		t.Errorf("%d jobs after Close", jobs)
	}
	// Closed, it still answers, folding nothing new.
	res := mustTrim(t, tr, session("s"), turns(41, hundred*2), 20000)
	if res.Summarized != 0 || Total(res.Messages, counter) > 16000 {
		t.Errorf("after Close: summarized %d", res.Summarized)
	}
}

func TestSummarizeWithoutSummarizer(t *testing.T) {
	c := NewCompactor(SummarizeConfig{}, nil, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	res := mustTrim(t, tr, session("s"), turns(30, hundred*2), 10000)
	if res.Summarized != 0 || res.Dropped == 0 {
		t.Errorf("summarized %d, dropped %d", res.Summarized, res.Dropped)
	}
	if got, err := c.Compact(t.Context(), session("s"), turns(30, hundred), counter); err != nil || got.Folded != 0 {
		t.Errorf("Compact without a summarizer: %v, folded %d", err, got.Folded)
	}
}

func TestHybridPrefetchesTheNextTurn(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{KeepRecentTokens: 2000}, f, CompactorOptions{})
	tr := summarizingTrimmer(t, Config{Mode: "hybrid"}, c)
	req := session("s")
	for n := 30; n < 40; n++ {
		res := mustTrim(t, tr, req, turns(n, hundred*2), 12000)
		if res.Summarized == 0 {
			t.Fatalf("%d turns: not summarized", n)
		}
		idle(c)
	}
	if st := c.Stats(); st.Waited > 1 {
		t.Errorf("%d requests waited", st.Waited)
	}
}

// summarizeSubjects are summarize and hybrid, followed by TokenBudget as
// the Trimmer runs them, under a few configurations.
func summarizeSubjects(t testing.TB) []subject {
	never := func(time.Duration) <-chan time.Time { return nil }
	sum := summarizerFunc(func(_ context.Context, req SummaryRequest) (string, error) { return summaryOf(req), nil })
	var subs []subject
	for _, cfg := range []SummarizeConfig{
		{MinMessages: -1},
		{MinMessages: -1, KeepRecent: -1, MaxTokens: 20},
		{KeepRecentTokens: 50},
	} {
		c := NewCompactor(cfg, sum, CompactorOptions{After: never})
		t.Cleanup(func() { c.Close() })
		budget := TokenBudget{KeepTurn: true}
		subs = append(subs,
			subject{s: Composite{Strategies: []Strategy{c.Summarize(), budget}}, fits: true},
			subject{s: Composite{Strategies: []Strategy{c.Hybrid(), budget}}, fits: true})
	}
	return subs
}

// TestSummarizeProperties runs the invariants every strategy keeps (order,
// tool units whole, no new orphans, the newest user turn and the leading
// system messages kept, alternation, fitting the target, idempotence) over
// random conversations.
func TestSummarizeProperties(t *testing.T) {
	subs := summarizeSubjects(t)
	rng := rand.New(rand.NewPCG(3, 4))
	n := 300
	if testing.Short() {
		n = 40
	}
	for range n {
		data := make([]byte, 20+rng.IntN(200))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		msgs, target := conversation(data)
		for _, sub := range subs {
			checkInvariants(t, sub, msgs, target)
		}
		if t.Failed() {
			t.Logf("input bytes: %v", data)
			return
		}
	}
}

// FuzzSummarize is TestSummarizeProperties under the fuzzer:
// go test ./rewrite -run '^$' -fuzz FuzzSummarize.
func FuzzSummarize(f *testing.F) {
	f.Add([]byte{0, 2, 5, 200, 3, 1, 4, 9, 100, 2, 3, 0, 7, 1, 1, 1, 128})
	f.Add([]byte{1, 1, 9, 3, 10, 4, 2, 11, 3, 12, 13, 14, 15, 5, 6, 7, 8, 9, 40})
	f.Add([]byte("agents call tools; users ask; summaries fold the old turns"))
	subs := summarizeSubjects(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, target := conversation(data)
		for _, sub := range subs {
			checkInvariants(t, sub, msgs, target)
		}
	})
}

func TestSummarizeCanceledContext(t *testing.T) {
	c, _ := newCompactor(t, SummarizeConfig{}, &fakeSummarizer{}, CompactorOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, s := range []Strategy{c.Summarize(), c.Hybrid()} {
		if _, err := s.Apply(ctx, Input{Messages: turns(10, hundred), Counter: counter, Request: session("s")}); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: error = %v", s.Name(), err)
		}
	}
}

func TestNextStep(t *testing.T) {
	tests := []struct {
		total      int
		wantTarget int
		wantOK     bool
	}{
		{6999, 4999, false}, // below prefetch_at
		{7000, 5000, true},  // prefetch for the first step, which cuts 2000
		{8500, 4500, false}, // in step 1, far from step 2 (at 10000)
		{9000, 5000, true},  // near step 2, which cuts 4000
		{10500, 0, false},   // step 2 begun at 10000; step 3 at 12000 is far
		{11000, 5000, true}, // and now near: it cuts 6000
	}
	for _, tt := range tests {
		target, ok := nextStep(tt.total, 10000, 0.8, 0.6, prefetchLead(10000, 0.8, 0.7, 0))
		if ok != tt.wantOK || (ok && target != tt.wantTarget) {
			t.Errorf("nextStep(%d) = %d, %v; want %d, %v", tt.total, target, ok, tt.wantTarget, tt.wantOK)
		}
	}
	if _, ok := nextStep(9000, 10000, 0.8, 0.6, prefetchLead(10000, 0.8, -1, 500)); ok {
		t.Error("prefetch_at < 0 prefetches")
	}
	if target, ok := nextStep(7500, 10000, 0.8, 0.8, prefetchLead(10000, 0.8, 0.7, 0)); !ok || target != 8000 {
		t.Errorf("threshold = target: %d, %v", target, ok)
	}
}

func TestSummarizeConfigValidate(t *testing.T) {
	if err := (SummarizeConfig{}).Validate(); err != nil {
		t.Errorf("zero value: %v", err)
	}
	err := SummarizeConfig{MaxTokens: -1, Timeout: -time.Second, PrefetchAt: 1.5, KeepRecentTokens: -3}.Validate()
	for _, key := range []string{"max_tokens", "timeout", "prefetch_at", "keep_recent_tokens"} {
		if err == nil || !strings.Contains(err.Error(), "summarize."+key) {
			t.Errorf("error %v lacks summarize.%s", err, key)
		}
	}
	err = SummarizeConfig{Backend: "gpu-box:11434", BackendKind: "vllm"}.Validate()
	for _, want := range []string{`summarize.backend: "gpu-box:11434" is not an http(s) URL`, `summarize.backend_kind: "vllm" is not one of ollama, openai`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if err := (SummarizeConfig{APIKey: "k"}).Validate(); err == nil || !strings.Contains(err.Error(), "need summarize.backend") {
		t.Errorf("api_key without a backend: %v", err)
	}
	if err := (SummarizeConfig{Backend: "http://summarizer:11434", BackendKind: "openai", APIKey: "k"}).Validate(); err != nil {
		t.Errorf("a summarizer backend of its own: %v", err)
	}
	d := SummarizeConfig{}.withDefaults()
	want := SummarizeConfig{KeepRecent: 3, MinMessages: 6, MaxTokens: 256, Timeout: time.Minute, PrefetchAt: 0.7, Wait: 2 * time.Second}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}
