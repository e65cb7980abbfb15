package snapshots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// ErrQueueFull reports a change that Writer dropped because as many
// sessions as its queue holds were already waiting.
var ErrQueueFull = errors.New("snapshots: write queue full")

// ErrClosed reports a change handed to a Writer after Close.
var ErrClosed = errors.New("snapshots: writer closed")

// Writer saves session changes and snapshots off the request path, so that
// saving never blocks or slows a response. The proxy hands it work and
// returns at once; a few workers write to the Store.
//
// The queue holds sessions, not changes. Changes to a session that is
// already waiting join it and are written together in one Store.Update, in
// the order they came: a session's newest state wins and no change is lost
// (every counter increment applies), however many arrive while the store
// is slow. Only when QueueSize distinct sessions are waiting is a change
// for yet another session dropped, with ErrQueueFull, counted and logged,
// rather than making a response wait on the disk.
//
// Writer also takes the automatic snapshots: when a session's Stats.Usage
// crosses Config.AutoThreshold upwards in an update, the state after the
// update is saved as a ReasonAuto snapshot.
type Writer struct {
	st        Store
	log       *slog.Logger
	threshold float64
	capacity  int

	mu      sync.Mutex
	wake    *sync.Cond // work queued, or closing
	idle    *sync.Cond // a session finished
	pending map[string]*pending
	ready   []string // ids with work and no worker, oldest first
	closed  bool
	wg      sync.WaitGroup

	updates, snapshots, failures, dropped, coalesced, auto atomic.Uint64

	// health: whether the last write failed, why and since when, and the
	// sessions whose last change is not stored (bounded).
	healthMu sync.Mutex
	lastErr  error
	since    time.Time
	unsaved  *cache.LRU[string, struct{}]

	// backoff is the wait before retrying a session the store refused,
	// by attempt (tests shorten it).
	backoff func(attempt int) time.Duration
}

// maxRetries is how often a session's changes are retried after the store
// refused them before they are dropped (and counted, and logged).
const maxRetries = 5

// maxUnsaved bounds the sessions remembered as not saved.
const maxUnsaved = 10000

func defaultBackoff(attempt int) time.Duration {
	return min(time.Second<<(attempt-1), 30*time.Second)
}

// pending is one session's queued work.
type pending struct {
	ops    []op
	queued bool // in ready
	busy   bool // a worker is writing it
	// blocked: the store refused its last write; its changes wait for a
	// retry, and newer ones wait behind them, so order holds.
	blocked bool
	retries int
}

// op is one queued change: an update (fn), a snapshot of the stored state
// (reason), or a given snapshot (snap). done, when set, runs once the op
// is over: written, or given up.
type op struct {
	fn     func(*Session) error
	reason string
	snap   *Snapshot
	done   func()
}

// finish runs the done of each of ops not finished yet, once.
func finish(ops []op) {
	for i := range ops {
		if done := ops[i].done; done != nil {
			ops[i].done = nil
			done()
		}
	}
}

// WriterCounters are a Writer's running totals, for metrics.
type WriterCounters struct {
	// Updates and Snapshots count what was written; Auto the snapshots
	// Writer took itself; Failures the writes the store refused.
	Updates   uint64
	Snapshots uint64
	Auto      uint64
	Failures  uint64
	// Dropped counts changes refused with ErrQueueFull or ErrClosed;
	// Coalesced the updates that joined another in one write.
	Dropped   uint64
	Coalesced uint64
	// Pending is how many sessions are waiting now.
	Pending int
}

// NewWriter starts a Writer over st with cfg's queue size, workers and
// automatic-snapshot threshold. Close stops it.
func NewWriter(st Store, cfg Config, log *slog.Logger) *Writer {
	cfg = cfg.withDefaults()
	if log == nil {
		log = discard
	}
	w := &Writer{
		st:        st,
		log:       log,
		threshold: cfg.AutoThreshold,
		capacity:  cfg.QueueSize,
		pending:   make(map[string]*pending),
		unsaved:   cache.New[string, struct{}](maxUnsaved),
		backoff:   defaultBackoff,
	}
	w.wake = sync.NewCond(&w.mu)
	w.idle = sync.NewCond(&w.mu)
	for range cfg.Workers {
		w.wg.Go(w.work)
	}
	return w
}

// Update queues fn to change session id (see Store.Update). fn runs later,
// on a worker, against the stored state, and may run more than once; it
// must not keep or change what the caller goes on using. An error from fn
// is logged and counted, and the session's other queued changes still
// apply.
func (w *Writer) Update(id string, fn func(*Session) error) error {
	return w.UpdateThen(id, fn, nil)
}

// UpdateThen is Update that runs done once the change is over: stored
// (with the automatic snapshot it may take), or given up after the store
// refused it. A caller whose change holds memory it accounts for (the
// request body a turn's messages share) frees it then. done does not run
// when UpdateThen returns an error.
func (w *Writer) UpdateThen(id string, fn func(*Session) error, done func()) error {
	if err := CheckID(id); err != nil {
		return err
	}
	return w.enqueue(id, op{fn: fn, done: done})
}

// Snapshot queues a snapshot of session id as stored once the changes
// queued before it are written.
func (w *Writer) Snapshot(id, reason string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	return w.enqueue(id, op{reason: reason})
}

// SaveSnapshot queues snap to be saved, for a snapshot of something other
// than the stored state: the conversation as sent just before an overflow
// cut (ReasonOverflow), or at the memory guard's emergency. snap must not
// change afterwards.
func (w *Writer) SaveSnapshot(snap *Snapshot) error {
	if err := CheckID(snap.SessionID); err != nil {
		return err
	}
	return w.enqueue(snap.SessionID, op{snap: snap})
}

func (w *Writer) enqueue(id string, o op) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.dropped.Add(1)
		return ErrClosed
	}
	p := w.pending[id]
	if p == nil {
		if len(w.pending) >= w.capacity {
			w.dropped.Add(1)
			w.log.Warn("snapshots: write queue full, change dropped", "session", id, "queue", w.capacity)
			return ErrQueueFull
		}
		p = new(pending)
		w.pending[id] = p
	}
	p.ops = append(p.ops, o)
	if !p.queued && !p.busy && !p.blocked {
		p.queued = true
		w.ready = append(w.ready, id)
		w.wake.Signal()
	}
	return nil
}

// work writes sessions until the Writer is closed and the queue is empty.
func (w *Writer) work() {
	w.mu.Lock()
	for {
		for len(w.ready) == 0 && !w.closed {
			w.wake.Wait()
		}
		if len(w.ready) == 0 {
			w.mu.Unlock()
			return
		}
		id := w.ready[0]
		w.ready[0] = ""
		w.ready = w.ready[1:]
		p := w.pending[id]
		p.queued, p.busy = false, true
		ops := p.ops
		p.ops = nil
		w.mu.Unlock()

		rest := w.safeWrite(id, ops)

		w.mu.Lock()
		p.busy = false
		if len(rest) > 0 {
			p.ops = append(rest, p.ops...)
			p.retries++
			switch {
			case w.closed || p.retries > maxRetries:
				w.dropped.Add(uint64(len(p.ops)))
				w.log.Error("snapshots: session changes dropped after the store refused them", "session", id,
					"changes", len(p.ops), "attempts", p.retries)
				finish(p.ops)
				p.ops = nil
			default:
				p.blocked = true
				wait := w.backoff(p.retries)
				w.log.Warn("snapshots: the store refused a session write; retrying", "session", id, "in", wait, "attempt", p.retries)
				time.AfterFunc(wait, func() { w.unblock(id, p) })
			}
		} else {
			p.retries = 0
		}
		if p.blocked {
			w.idle.Broadcast()
			continue
		}
		if len(p.ops) > 0 {
			p.queued = true
			w.ready = append(w.ready, id)
			w.wake.Signal()
		} else {
			delete(w.pending, id)
		}
		w.idle.Broadcast()
	}
}

// unblock queues a blocked session again for its retry.
func (w *Writer) unblock(id string, p *pending) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending[id] != p || !p.blocked {
		return
	}
	p.blocked = false
	if len(p.ops) > 0 && !p.queued && !p.busy {
		p.queued = true
		w.ready = append(w.ready, id)
		w.wake.Signal()
	}
}

// safeWrite is write that survives a panicking change: the proxy's
// closures run here, and one bad change must not stop every later save.
// It returns the ops the store refused, to retry.
func (w *Writer) safeWrite(id string, ops []op) (rest []op) {
	defer func() {
		if v := recover(); v != nil {
			w.failures.Add(1)
			w.log.Error("snapshots: session change panicked", "session", id, "panic", v)
			finish(ops)
			rest = nil
		}
	}()
	return w.write(id, ops)
}

// noteWrite records the outcome of a store write for Health and Unsaved.
func (w *Writer) noteWrite(id string, err error) {
	w.healthMu.Lock()
	defer w.healthMu.Unlock()
	if err == nil {
		w.lastErr = nil
		w.unsaved.Remove(id)
		return
	}
	if w.lastErr == nil {
		w.since = time.Now()
	}
	w.lastErr = err
	// Bounded: during a long outage the least recently failed sessions
	// are forgotten first, never every flag at once.
	w.unsaved.Add(id, struct{}{})
}

// Health reports whether the store refused the last write, with the
// error and since when; a success clears it.
func (w *Writer) Health() (since time.Time, err error) {
	w.healthMu.Lock()
	defer w.healthMu.Unlock()
	return w.since, w.lastErr
}

// Unsaved reports whether session id's last change is not stored (the
// store refused it; it may still be retried).
func (w *Writer) Unsaved(id string) bool {
	w.healthMu.Lock()
	defer w.healthMu.Unlock()
	_, ok := w.unsaved.Peek(id)
	return ok
}

// write applies one session's queued ops in order, joining consecutive
// updates into one Store.Update. It returns the ops from the first one
// the store refused, to retry.
func (w *Writer) write(id string, ops []op) []op {
	// The store's own timeouts bound each write; a shutdown waits for
	// them through Close's context.
	ctx := context.Background()
	for len(ops) > 0 {
		n := 0
		for n < len(ops) && ops[n].fn != nil {
			n++
		}
		if n > 0 {
			if err := w.update(ctx, id, ops[:n]); err != nil {
				return ops
			}
			finish(ops[:n])
			ops = ops[n:]
			continue
		}
		o := ops[0]
		ops = ops[1:]
		var err error
		switch {
		case o.snap != nil:
			_, err = w.st.SaveSnapshot(ctx, o.snap)
		default:
			_, err = TakeSnapshot(ctx, w.st, id, o.reason)
		}
		w.noteWrite(id, err)
		if err != nil {
			w.failures.Add(1)
			w.log.Error("snapshots: save snapshot", "session", id, "err", err)
			continue
		}
		w.snapshots.Add(1)
	}
	return nil
}

func (w *Writer) update(ctx context.Context, id string, ops []op) error {
	var auto *Snapshot
	err := w.st.Update(ctx, id, func(s *Session) error {
		auto = nil
		before := s.Stats.Usage
		for _, o := range ops {
			if err := o.fn(s); err != nil {
				w.failures.Add(1)
				w.log.Error("snapshots: session change failed", "session", id, "err", err)
			}
		}
		if w.threshold > 0 && before < w.threshold && s.Stats.Usage >= w.threshold {
			auto = NewSnapshot(s, ReasonAuto)
		}
		return nil
	})
	w.noteWrite(id, err)
	if err != nil {
		w.failures.Add(1)
		w.log.Error("snapshots: save session", "session", id, "err", err)
		return err
	}
	w.updates.Add(1)
	w.coalesced.Add(uint64(len(ops) - 1))
	if auto != nil {
		if _, err := w.st.SaveSnapshot(ctx, auto); err != nil {
			w.failures.Add(1)
			w.log.Error("snapshots: save automatic snapshot", "session", id, "err", err)
			return nil // the session itself is stored
		}
		w.snapshots.Add(1)
		w.auto.Add(1)
		w.log.Info("snapshots: automatic snapshot", "session", id, "usage", auto.Usage, "tokens", auto.Tokens)
	}
	return nil
}

// ErrUnsaved reports a session whose last change the store refused.
var ErrUnsaved = errors.New("snapshots: the session's last change is not stored")

// Settle waits until every change queued for session id is written, so
// that a read of it sees them all: a client that sends its next turn the
// moment a reply ends must find the turn before it stored. A change the
// store refused is waited for through its retries until ctx is done; then
// Settle returns ErrUnsaved (or ctx's error when nothing was refused).
func (w *Writer) Settle(ctx context.Context, id string) error {
	defer w.wakeWhenDone(ctx)()
	w.mu.Lock()
	for {
		p, ok := w.pending[id]
		if !ok {
			break
		}
		if err := ctx.Err(); err != nil {
			w.mu.Unlock()
			if p.blocked {
				return ErrUnsaved // still waiting for a retry
			}
			return err
		}
		w.idle.Wait()
	}
	w.mu.Unlock()
	if w.Unsaved(id) {
		return ErrUnsaved
	}
	return nil
}

// wakeWhenDone wakes the waiters on idle when ctx ends, so a wait for
// writes gives up with ctx; call the result to stop.
func (w *Writer) wakeWhenDone(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.idle.Broadcast()
		w.mu.Unlock()
	})
}

// Flush waits until everything queued so far is written, or ctx is done.
func (w *Writer) Flush(ctx context.Context) error {
	defer w.wakeWhenDone(ctx)()
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("snapshots: flush: %d sessions not yet written: %w", len(w.pending), err)
		}
		w.idle.Wait()
	}
	return nil
}

// Close stops taking changes, writes everything queued and waits for it,
// or until ctx is done (graceful shutdown). It does not close the store.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	// Sessions waiting for a retry get their last try now.
	for id, p := range w.pending {
		if p.blocked {
			p.blocked = false
			if len(p.ops) > 0 && !p.queued && !p.busy {
				p.queued = true
				w.ready = append(w.ready, id)
			}
		}
	}
	w.wake.Broadcast()
	w.mu.Unlock()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		n := len(w.pending)
		w.mu.Unlock()
		w.log.Error("snapshots: shutdown before every session was saved", "unsaved", n)
		return fmt.Errorf("snapshots: close: %d sessions not yet written: %w", n, ctx.Err())
	}
}

// Counters returns the Writer's running totals.
func (w *Writer) Counters() WriterCounters {
	w.mu.Lock()
	n := len(w.pending)
	w.mu.Unlock()
	return WriterCounters{
		Updates:   w.updates.Load(),
		Snapshots: w.snapshots.Load(),
		Auto:      w.auto.Load(),
		Failures:  w.failures.Load(),
		Dropped:   w.dropped.Load(),
		Coalesced: w.coalesced.Load(),
		Pending:   n,
	}
}
