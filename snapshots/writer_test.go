package snapshots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// gated holds every write until release is called, as a stalled disk or
// Redis would.
type gated struct {
	Store
	open    chan struct{}
	release func()
}

func newGated(st Store) *gated {
	g := &gated{Store: st, open: make(chan struct{})}
	g.release = sync.OnceFunc(func() { close(g.open) })
	return g
}

func (g *gated) Update(ctx context.Context, id string, fn func(*Session) error) error {
	<-g.open
	return g.Store.Update(ctx, id, fn)
}

func (g *gated) SaveSnapshot(ctx context.Context, snap *Snapshot) (adminapi.SnapshotInfo, error) {
	<-g.open
	return g.Store.SaveSnapshot(ctx, snap)
}

func newWriter(t *testing.T, st Store, cfg Config) *Writer {
	t.Helper()
	w := NewWriter(st, cfg, nil)
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

func incr(s *Session) error {
	s.Stats.Requests++
	return nil
}

// Changes to a waiting session join it: one write, every change applied,
// in order.
func TestWriterCoalesces(t *testing.T) {
	g := newGated(newFileStore(t, t.TempDir(), Config{}))
	w := newWriter(t, g, Config{})
	for i := range 100 {
		err := w.Update("s", func(s *Session) error {
			s.Stats.Requests++
			s.Messages = append(s.Messages, msg("user", fmt.Sprint(i)))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := w.Counters(); c.Pending != 1 {
		t.Errorf("Pending = %d with one session queued, want 1", c.Pending)
	}
	g.release()
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := mustGet(t, g, "s")
	for i, m := range s.Messages {
		if m.Content != fmt.Sprint(i) {
			t.Fatalf("message %d is %q: changes applied out of order", i, m.Content)
		}
	}
	c := w.Counters()
	if s.Stats.Requests != 100 || len(s.Messages) != 100 || c.Updates > 2 || c.Coalesced < 98 {
		t.Errorf("requests %d, %d messages, counters %+v; want 100 changes in at most 2 writes", s.Stats.Requests, len(s.Messages), c)
	}
}

// A full queue drops a new session's change rather than block.
func TestWriterQueueFull(t *testing.T) {
	var logs bytes.Buffer
	g := newGated(newFileStore(t, t.TempDir(), Config{}))
	w := NewWriter(g, Config{QueueSize: 2, Workers: 1}, slog.New(slog.NewTextHandler(&logs, nil)))
	defer w.Close(context.Background())
	for _, id := range []string{"a", "b"} {
		if err := w.Update(id, incr); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Update("c", incr); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third session in a queue of 2: %v, want ErrQueueFull", err)
	}
	if err := w.Update("a", incr); err != nil {
		t.Errorf("a change to a waiting session must join it: %v", err)
	}
	g.release()
	w.Flush(context.Background())
	if s := mustGet(t, g, "a"); s.Stats.Requests != 2 {
		t.Errorf("session a has %d requests, want 2", s.Stats.Requests)
	}
	if _, err := g.Get(ctx, "c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the dropped change was written: %v", err)
	}
	if c := w.Counters(); c.Dropped != 1 {
		t.Errorf("Dropped = %d, want 1", c.Dropped)
	}
	if !strings.Contains(logs.String(), "queue full") {
		t.Errorf("the drop was not logged:\n%s", logs.String())
	}
}

// 100 concurrent requests on one session (under -race): every change is
// in the stored state.
func TestWriterConcurrentRequests(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	w := newWriter(t, st, Config{})
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			w.Update("one", func(s *Session) error {
				s.Stats.Requests++
				s.Metadata = map[string]any{"last": float64(i)}
				return nil
			})
		})
	}
	wg.Wait()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := mustGet(t, st, "one"); s.Stats.Requests != 100 {
		t.Errorf("requests %d after 100 concurrent updates", s.Stats.Requests)
	}
}

// Close writes everything queued before returning (graceful shutdown).
func TestWriterCloseFlushes(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	w := NewWriter(st, Config{Workers: 2}, nil)
	for i := range 30 {
		for range 3 {
			w.Update(fmt.Sprint(i), incr)
		}
		w.Snapshot(fmt.Sprint(i), ReasonManual)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if s := mustGet(t, st, fmt.Sprint(i)); s.Stats.Requests != 3 {
			t.Errorf("session %d: %d requests, want 3", i, s.Stats.Requests)
		}
		if list, _ := st.ListSnapshots(ctx, fmt.Sprint(i)); len(list) != 1 || list[0].Reason != ReasonManual {
			t.Errorf("session %d snapshots: %+v", i, list)
		}
	}
	if err := w.Update("late", incr); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Close: %v, want ErrClosed", err)
	}
}

// A shutdown deadline that passes before the store answers is reported.
func TestWriterCloseDeadline(t *testing.T) {
	g := newGated(newFileStore(t, t.TempDir(), Config{}))
	w := NewWriter(g, Config{}, nil)
	w.Update("s", incr)
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Close(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Close past its deadline: %v", err)
	}
	if err := w.Flush(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Flush past its deadline: %v", err)
	}
	g.release()
	if err := w.Close(context.Background()); err != nil {
		t.Error(err)
	}
	if s := mustGet(t, g, "s"); s.Stats.Requests != 1 {
		t.Error("the queued change was lost")
	}
}

// A failing store is logged, counted and reported (Health, Unsaved);
// the session's changes are retried with backoff, in order, ahead of
// newer ones, so nothing is lost once the store recovers.
func TestWriterStoreFailure(t *testing.T) {
	var logs lockedBuffer
	st := newFileStore(t, t.TempDir(), Config{})
	w := NewWriter(st, Config{}, slog.New(slog.NewTextHandler(&logs, nil)))
	w.backoff = func(int) time.Duration { return 20 * time.Millisecond }
	defer w.Close(context.Background())
	healthy := st.files
	diskFull(st)
	w.Update("s", incr)
	waitFor(t, "the failed write to be reported", func() bool { return w.Unsaved("s") })
	if since, err := w.Health(); err == nil || since.IsZero() || !w.Unsaved("s") {
		t.Fatalf("health after a failed write: %v since %v, unsaved %v", err, since, w.Unsaved("s"))
	}
	// The writer marks the change unsaved before it logs why: wait for
	// the line rather than look at once.
	waitFor(t, "the failure to be logged", func() bool { return strings.Contains(logs.String(), "no space left") })
	st.files = healthy
	w.Update("s", incr)
	w.Flush(context.Background())
	if s := mustGet(t, st, "s"); s.Stats.Requests != 2 {
		t.Errorf("after the disk recovered: %d requests, want 2 (the refused change retried)", s.Stats.Requests)
	}
	if _, err := w.Health(); err != nil || w.Unsaved("s") {
		t.Errorf("still degraded after a success: %v, unsaved %v", err, w.Unsaved("s"))
	}
	if c := w.Counters(); c.Failures < 1 || c.Dropped != 0 {
		t.Errorf("counters: %+v", c)
	}

	// A store that never recovers: the changes are dropped after
	// maxRetries, counted, and the session stays unsaved.
	diskFull(st)
	w.Update("t", incr)
	w.Flush(context.Background())
	if c := w.Counters(); c.Dropped != 1 || !w.Unsaved("t") {
		t.Errorf("after retries ran out: %+v, unsaved %v", c, w.Unsaved("t"))
	}
}

// A change that fails or panics is counted; the others still apply.
func TestWriterBadChange(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	w := newWriter(t, newGated(st), Config{})
	g := w.st.(*gated)
	w.Update("s", incr)
	w.Update("s", func(*Session) error { return errors.New("bad change") })
	w.Update("s", incr)
	w.Update("p", func(*Session) error { panic("bug") })
	g.release()
	w.Flush(context.Background())
	w.Update("p", incr)
	w.Flush(context.Background())
	if s := mustGet(t, st, "s"); s.Stats.Requests != 2 {
		t.Errorf("requests %d, want the 2 good changes", s.Stats.Requests)
	}
	if s := mustGet(t, st, "p"); s.Stats.Requests != 1 {
		t.Errorf("after a panicking change, the next one: %d requests, want 1", s.Stats.Requests)
	}
	if c := w.Counters(); c.Failures != 2 {
		t.Errorf("Failures = %d, want 2", c.Failures)
	}
}

func TestWriterInvalidID(t *testing.T) {
	w := newWriter(t, newFileStore(t, t.TempDir(), Config{}), Config{})
	if err := w.Update("", incr); !errors.Is(err, ErrInvalidID) {
		t.Errorf("Update: %v", err)
	}
	if err := w.Snapshot(strings.Repeat("x", MaxIDLen+1), ReasonManual); !errors.Is(err, ErrInvalidID) {
		t.Errorf("Snapshot: %v", err)
	}
	if err := w.SaveSnapshot(&Snapshot{}); !errors.Is(err, ErrInvalidID) {
		t.Errorf("SaveSnapshot: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer the writer's goroutines may log into
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// UpdateThen's done runs once the change is over, and only then: after it
// is stored, after the store refused it for good, after it panicked; once
// each, whatever joined it in one write.
func TestWriterUpdateThenDone(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	w := newWriter(t, newGated(st), Config{})
	g := w.st.(*gated)
	var mu sync.Mutex
	done := map[string]int{}
	note := func(name string) func() {
		return func() { mu.Lock(); done[name]++; mu.Unlock() }
	}
	count := func(name string) int { mu.Lock(); defer mu.Unlock(); return done[name] }
	w.UpdateThen("s", incr, note("a"))
	w.UpdateThen("s", incr, note("b"))
	w.UpdateThen("p", func(*Session) error { panic("bug") }, note("panic"))
	if count("a")+count("b")+count("panic") != 0 {
		t.Fatalf("done ran before the store wrote: %v", done)
	}
	g.release()
	w.Flush(context.Background())
	if count("a") != 1 || count("b") != 1 || count("panic") != 1 {
		t.Errorf("done after the writes: %v, want each once", done)
	}
	if s := mustGet(t, st, "s"); s.Stats.Requests != 2 {
		t.Errorf("requests %d, want 2", s.Stats.Requests)
	}

	// A store that never recovers: done runs when the change is dropped.
	w.backoff = func(int) time.Duration { return time.Millisecond }
	diskFull(st)
	w.UpdateThen("t", incr, note("dropped"))
	w.Flush(context.Background())
	if count("dropped") != 1 {
		t.Errorf("done of a change given up: %d, want 1", count("dropped"))
	}
}
