package rewrite

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// slowSummarizer stands for a summarizer that takes latency per call, in
// a virtual time the test moves: a call blocks until the test releases
// it, and the test releases it only once the virtual clock has passed
// its start plus latency. Nothing sleeps.
type slowSummarizer struct {
	latency time.Duration
	clock   *fakeClock

	mu      sync.Mutex
	pending *slowCall
	started chan struct{} // receives a value whenever a call begins
	calls   int
}

type slowCall struct {
	finish  time.Time
	release chan struct{}
}

func newSlowSummarizer(clock *fakeClock, latency time.Duration) *slowSummarizer {
	return &slowSummarizer{latency: latency, clock: clock, started: make(chan struct{}, 1)}
}

func (s *slowSummarizer) Summarize(ctx context.Context, req SummaryRequest) (string, error) {
	call := &slowCall{finish: s.clock.Now().Add(s.latency), release: make(chan struct{})}
	s.mu.Lock()
	s.pending = call
	s.calls++
	s.mu.Unlock()
	select {
	case s.started <- struct{}{}:
	default:
	}
	select {
	case <-call.release:
		return summaryOf(req), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// blocked returns the call in flight, if any.
func (s *slowSummarizer) blocked() *slowCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// settle waits until c's job is either gone or blocked in a call.
func (s *slowSummarizer) settle(c *Compactor) {
	for {
		c.mu.Lock()
		n, ch := len(c.jobs), c.changed
		c.mu.Unlock()
		if n == 0 || s.blocked() != nil {
			return
		}
		select {
		case <-ch:
		case <-s.started:
		}
	}
}

// runUntil moves the virtual clock to t, finishing in order every call
// due by then (each next call starts when the one before finished).
func (s *slowSummarizer) runUntil(c *Compactor, t time.Time) {
	for {
		s.settle(c)
		call := s.blocked()
		if call == nil || call.finish.After(t) {
			break
		}
		if d := call.finish.Sub(s.clock.Now()); d > 0 {
			s.clock.Advance(d)
		}
		s.mu.Lock()
		s.pending = nil
		s.mu.Unlock()
		close(call.release)
	}
	if d := t.Sub(s.clock.Now()); d > 0 {
		s.clock.Advance(d)
	}
}

// backToBack replays turns of a conversation whose turns follow each other
// every gap of virtual time, with a summarizer taking latency a call, and
// returns the turns (0-based) that waited for a summary, and how many
// turns folded summaries.
func backToBack(t *testing.T, cfg SummarizeConfig, turnsN int, gap, latency time.Duration) (waited []int, folded, firstFold int, st SummaryStats) {
	t.Helper()
	clock := newFakeClock()
	s := newSlowSummarizer(clock, latency)
	c := NewCompactor(cfg, s, CompactorOptions{Now: clock.Now, After: clock.After})
	t.Cleanup(func() { c.Close() })
	tr := summarizingTrimmer(t, Config{Mode: "summarize"}, c)
	ctx, req := t.Context(), session("back-to-back")
	rng := rand.New(rand.NewPCG(3, 5))
	const limit = 8000
	history := []Message{sys("You are a coding assistant.")}
	firstFold = -1
	for i := range turnsN {
		s.runUntil(c, clock.Now().Add(gap))
		q, rest := replayTurn(i, rng)
		msgs := numbered(append(append([]Message(nil), history...), q)...)
		done := make(chan Result, 1)
		errc := make(chan error, 1)
		go func() {
			res, err := tr.Trim(ctx, req, msgs, limit, counter)
			if err != nil {
				errc <- err
				return
			}
			done <- res
		}()
		var res Result
	wait:
		for {
			select {
			case res = <-done:
				break wait
			case err := <-errc:
				t.Fatalf("turn %d: %v", i, err)
			case <-clock.waiting:
				// The request waits for a summary: it waits all of
				// summarize.wait in virtual time, the summaries due by
				// then arriving meanwhile.
				waited = append(waited, i)
				s.runUntil(c, clock.Now().Add(c.cfg.Wait))
				clock.fire()
			}
		}
		if got := Total(res.Messages, counter); got > limit {
			t.Fatalf("turn %d: %d tokens > %d", i, got, limit)
		}
		if res.Summarized > 0 {
			folded++
			if firstFold < 0 {
				firstFold = i
			}
		}
		history = append(append(history, q), rest...)
	}
	return waited, folded, firstFold, c.Stats()
}

// TestSummariesNeverWaitBackToBack is the measurement: 60 turns
// sent back to back (100 ms apart) with a summarizer of its own (written
// ahead) that takes 300 ms a call. No turn after the first fold waits for
// a summary: a turn whose summaries are not ready is trimmed at once and
// folds them in at a later step.
func TestSummariesNeverWaitBackToBack(t *testing.T) {
	for _, gap := range []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		waited, folded, first, st := backToBack(t, SummarizeConfig{Schedule: ScheduleAhead}, 60, gap, 300*time.Millisecond)
		t.Logf("gap %v: turns that waited %v; %d turns folded summaries (first at turn %d); %d calls, %d trimmed for want of summaries",
			gap, waited, folded, first, st.Calls, st.Fallbacks)
		for _, w := range waited {
			if first >= 0 && w > first {
				t.Errorf("gap %v: turn %d waited after the first fold (turn %d)", gap, w, first)
			}
		}
		if len(waited) > 1 {
			t.Errorf("gap %v: %d turns waited: %v", gap, len(waited), waited)
		}
		if folded == 0 {
			t.Errorf("gap %v: no turn folded summaries", gap)
		}
	}
}

// TestAtCutWritesSummariesAtSteps: with the summarizer on the chat's own
// model and backend (summarize.schedule auto), the summaries a step folds
// are written when the step is reached, in batches, while it waits; no
// job runs between two steps (each would evict the conversation's prompt
// cache), and every turn from the first fold on forwards summaries.
func TestAtCutWritesSummariesAtSteps(t *testing.T) {
	waited, folded, first, st := backToBack(t, SummarizeConfig{}, 60, 100*time.Millisecond, 300*time.Millisecond)
	t.Logf("turns that waited %v; %d turns folded summaries (first at turn %d); %d calls in %d jobs, %d iterations folded, %d trimmed for want of summaries",
		waited, folded, first, st.Calls, st.Jobs, st.Folded, st.Fallbacks)
	if first < 0 || folded != 60-first {
		t.Errorf("%d turns folded summaries from turn %d, want every one", folded, first)
	}
	if len(waited) < 2 || int(st.Jobs) != len(waited) {
		t.Errorf("%d jobs for %d steps that waited: a job ran between steps", st.Jobs, len(waited))
	}
	if st.Fallbacks != 0 {
		t.Errorf("%d steps trimmed for want of summaries", st.Fallbacks)
	}
	if st.Calls > 2*uint64(len(waited)) {
		t.Errorf("%d calls for %d steps: not batched", st.Calls, len(waited))
	}
}

// TestAtCutSlowSummarizerWaitsOncePerStep: a summarizer slower than
// summarize.wait makes the step trim instead, once; the turns after it in
// the same step neither wait nor change what is forwarded, and the
// summaries written meanwhile are folded in from a later turn.
func TestAtCutSlowSummarizerWaitsOncePerStep(t *testing.T) {
	waited, folded, first, st := backToBack(t, SummarizeConfig{}, 60, 100*time.Millisecond, 3*time.Second)
	t.Logf("turns that waited %v; %d turns folded summaries (first at turn %d); %d calls in %d jobs, %d trimmed for want of summaries",
		waited, folded, first, st.Calls, st.Jobs, st.Fallbacks)
	for i := 1; i < len(waited); i++ {
		if waited[i] == waited[i-1]+1 {
			t.Errorf("turns %d and %d both waited", waited[i-1], waited[i])
		}
	}
	if folded == 0 || st.Fallbacks == 0 {
		t.Errorf("%d turns folded summaries, %d steps trimmed instead", folded, st.Fallbacks)
	}
}
