package rewrite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSummarizer answers every call with reply (by default "Summary of
// <the first words of the exchange's first message>.") and records the
// calls.
type fakeSummarizer struct {
	mu    sync.Mutex
	calls []SummaryRequest
	reply func(ctx context.Context, req SummaryRequest) (string, error)
}

func (f *fakeSummarizer) Summarize(ctx context.Context, req SummaryRequest) (string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	reply := f.reply
	f.mu.Unlock()
	if reply != nil {
		return reply(ctx, req)
	}
	return summaryOf(req), nil
}

// summarizerFunc is a Summarizer that records nothing (for long fuzzing).
type summarizerFunc func(ctx context.Context, req SummaryRequest) (string, error)

func (f summarizerFunc) Summarize(ctx context.Context, req SummaryRequest) (string, error) {
	return f(ctx, req)
}

// summaryOf is the fake's default answer.
func summaryOf(req SummaryRequest) string {
	if len(req.Messages) == 0 {
		return "Nothing happened."
	}
	words := strings.Fields(req.Messages[0].Content)
	if len(words) > 3 {
		words = words[:3]
	}
	return "Summary of " + strings.Join(words, " ") + "."
}

func (f *fakeSummarizer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeSummarizer) requests() []SummaryRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]SummaryRequest(nil), f.calls...)
}

// fakeClock is a clock tests move by hand. Its After channels fire only
// when the test says so (fire), so a test never sleeps and never depends
// on the machine's speed.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []chan time.Time
	waiting chan struct{} // receives a value whenever After is called
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), waiting: make(chan struct{}, 64)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.mu.Lock()
	c.waiters = append(c.waiters, ch)
	c.mu.Unlock()
	select {
	case c.waiting <- struct{}{}:
	default:
	}
	return ch
}

// fire ends every wait begun so far, as if summarize.wait had passed.
func (c *fakeClock) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.waiters {
		ch <- c.now
	}
	c.waiters = nil
}

// memStore is a SummaryStore in memory that counts its calls.
type memStore struct {
	mu   sync.Mutex
	m    map[string][]Summary
	gets atomic.Int64
	fail error
}

func (s *memStore) Get(_ context.Context, session string) ([]Summary, error) {
	s.gets.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	return append([]Summary(nil), s.m[session]...), nil
}

func (s *memStore) Put(_ context.Context, session string, sum Summary) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	if s.m == nil {
		s.m = make(map[string][]Summary)
	}
	for i, old := range s.m[session] {
		if old.Key == sum.Key {
			s.m[session][i] = sum
			return nil
		}
	}
	s.m[session] = append(s.m[session], sum)
	return nil
}

// newCompactor returns a Compactor on a fake clock, closed when the test
// ends. Its summaries are written ahead (summarize.schedule ahead) unless
// cfg says otherwise: the fake summarizer stands for a server of its own.
func newCompactor(t *testing.T, cfg SummarizeConfig, s Summarizer, opts CompactorOptions) (*Compactor, *fakeClock) {
	t.Helper()
	if cfg.Schedule == "" {
		cfg.Schedule = ScheduleAhead
	}
	clock := newFakeClock()
	if opts.Now == nil {
		opts.Now = clock.Now
	}
	if opts.After == nil {
		opts.After = clock.After
	}
	c := NewCompactor(cfg, s, opts)
	t.Cleanup(func() { c.Close() })
	return c, clock
}

// idle waits until c has no job in flight: the time a user spends reading
// an answer before sending the next message.
func idle(c *Compactor) { c.Idle(context.Background()) }

// summarizingTrimmer returns a Trimmer whose summarize and hybrid modes use
// c.
func summarizingTrimmer(t *testing.T, cfg Config, c *Compactor) *Trimmer {
	t.Helper()
	tr, err := NewTrimmer(cfg, nil, c.Summarize(), c.Hybrid())
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// session returns the request of a chat in session id.
func session(id string) Request {
	return Request{Session: id, Model: "llama3.1"}
}

// turns returns a conversation of n iterations after a system prompt: a
// user message and an assistant answer each, every message about size
// bytes, numbered.
func turns(n, size int) []Message {
	msgs := []Message{sys("You are a helpful assistant.")}
	for i := range n {
		msgs = append(msgs,
			user(pad(fmt.Sprintf("question %d about file%d.go ", i, i), size)),
			asst(pad(fmt.Sprintf("answer %d ", i), size)))
	}
	return numbered(msgs...)
}

// blockOf returns the summary block in the first message, or "".
func blockOf(msgs []Message) string {
	if len(msgs) == 0 {
		return ""
	}
	c := msgs[0].Content
	i := strings.Index(c, blockOpen)
	if i < 0 {
		return ""
	}
	return c[i:]
}
