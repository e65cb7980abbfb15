package rewrite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// retryAfter is how long a session waits, after a summarizer call failed,
// before its summaries are asked for again: a backend that is down or a
// model that answers nothing is not called on every request.
const retryAfter = 30 * time.Second

// cacheEntries bounds the summaries a Compactor keeps in memory (a few
// hundred bytes each) and the failures it remembers.
const cacheEntries = 16384

// Compactor folds old iterations of conversations into summaries. It is
// the engine behind modes summarize and hybrid (Summarize, Hybrid), which
// the Trimmer runs on chat requests and on the admin API's compress; Compact
// folds a whole conversation at once.
//
// It summarizes each iteration once, with the summary of the iterations
// before as context, and remembers the summary in memory and in the
// SummaryStore under a hash of the iterations it covers: a client resends
// the whole history on every request, and only the iterations that fold
// for the first time cost a summarizer call. Summaries are written by at
// most one background job per session at a time, cancelled by Close.
//
// It is safe for concurrent use.
type Compactor struct {
	cfg    SummarizeConfig
	sum    Summarizer
	store  SummaryStore
	log    *slog.Logger
	now    func() time.Time
	after  func(time.Duration) <-chan time.Time
	onCall func(time.Duration, error)

	ctx    context.Context // of the background jobs; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// summaries by key (Summary.Key), the most recently used; the
	// SummaryStore keeps them all.
	summaries *cache.LRU[string, Summary]
	jobs      map[string]*job // by scope: one in flight per session
	// retry holds each scope's last failure, until it may be tried again;
	// scopes are client data (sessions), so it is bounded too.
	retry *cache.LRU[string, failure]
	// waited holds the scopes whose first fold has waited already.
	waited  *cache.LRU[string, struct{}]
	changed chan struct{} // closed and replaced when summaries or jobs change
	closed  bool

	stats struct {
		calls, failures, cut, folded, waited, fallbacks, jobs, storeErrors atomic.Uint64
		latency                                                            atomic.Int64
	}
}

// CompactorOptions are a Compactor's collaborators; every field may be
// left zero.
type CompactorOptions struct {
	// Store remembers summaries across requests, restarts and replicas;
	// nil keeps them in this process only.
	Store SummaryStore
	// Log receives summarizer failures (warn) and folds (debug); nil
	// discards.
	Log *slog.Logger
	// Now and After are the clock; nil means time.Now and time.After.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// OnCall, when set, is told the duration and outcome of every
	// summarizer call (a Prometheus histogram and failure counter).
	OnCall func(d time.Duration, err error)
}

// NewCompactor returns a Compactor that writes summaries with s. A nil s
// folds nothing: the strategies then leave conversations to the trimming
// that follows them.
func NewCompactor(cfg SummarizeConfig, s Summarizer, opts CompactorOptions) *Compactor {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Compactor{
		cfg: cfg.withDefaults(), sum: s, store: opts.Store, log: opts.Log,
		now: opts.Now, after: opts.After, onCall: opts.OnCall,
		ctx: ctx, cancel: cancel,
		summaries: cache.New[string, Summary](cacheEntries),
		jobs:      make(map[string]*job),
		retry:     cache.New[string, failure](cacheEntries),
		waited:    cache.New[string, struct{}](cacheEntries),
		changed:   make(chan struct{}),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.after == nil {
		c.after = time.After
	}
	return c
}

// Close cancels the background jobs and waits for them to end. The
// Compactor still works afterwards, without writing new summaries.
func (c *Compactor) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	return nil
}

// Idle waits until no summary is being written, or ctx ends: on shutdown,
// to let the summaries in flight finish within the grace period before
// Close; in tests, to stand for the time a user reads an answer.
func (c *Compactor) Idle(ctx context.Context) error {
	for {
		c.mu.Lock()
		n := len(c.jobs)
		ch := c.changed
		c.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SummaryStats are a Compactor's counters since it was made, for metrics.
type SummaryStats struct {
	// Calls is the number of summarizer calls, Failures those that failed
	// (error, timeout, empty answer), Cut the answers cut to max_tokens,
	// and Latency the time spent in all of them.
	Calls, Failures, Cut uint64
	Latency              time.Duration
	// Folded is the number of iterations folded into requests, summed over
	// requests.
	Folded uint64
	// Waited counts requests that waited for a summary (at most
	// summarize.wait); Fallbacks those that did not get all they needed in
	// time and were trimmed instead.
	Waited, Fallbacks uint64
	// Jobs is the number of background jobs started.
	Jobs uint64
	// StoreErrors counts failed SummaryStore calls.
	StoreErrors uint64
}

// Stats returns the counters.
func (c *Compactor) Stats() SummaryStats {
	s := &c.stats
	return SummaryStats{
		Calls: s.calls.Load(), Failures: s.failures.Load(), Cut: s.cut.Load(),
		Latency: time.Duration(s.latency.Load()), Folded: s.folded.Load(),
		Waited: s.waited.Load(), Fallbacks: s.fallbacks.Load(), Jobs: s.jobs.Load(),
		StoreErrors: s.storeErrors.Load(),
	}
}

// Compaction is the result of Compact: the tokens before and after, and
// what was folded.
type Compaction struct {
	// Messages is the compacted conversation (in a dry run, with stand-ins
	// for the summaries not yet written).
	Messages []Message
	// Folded is the number of messages folded into Summaries summaries;
	// Kept the number of iterations kept verbatim.
	Folded, Summaries, Kept int
	// Before and After are the tokens of the conversation before and after
	// (in a dry run, After is an estimate: see Request.DryRun).
	Before, After int
	// Notice says what was done, as Result.Notice.
	Notice string
}

// Compact folds every iteration of msgs but the newest keep_recent into
// summaries (old messages summarized, the last ones preserved, the result
// holding the summary), waiting for every summary it needs
// until ctx ends. A conversation of fewer than min_messages messages is
// returned as is without a summarizer call. When summarizing fails, Compact
// logs the error and returns it with the original messages: the
// Compaction is always usable. req.Session keys the summaries, and the
// summarizer calls are made for req (its model, credential, num_ctx and
// instructions). A dry run (req.DryRun) calls nothing and folds the
// summaries not yet written as stand-ins of their expected length.
func (c *Compactor) Compact(ctx context.Context, req Request, msgs []Message, cnt Counter) (Compaction, error) {
	v, n := c.compactPlan(msgs, cnt)
	out := Compaction{Messages: msgs, Before: Total(msgs, cnt), Kept: len(v.its)}
	out.After = out.Before
	if n == 0 || c.sum == nil {
		return out, nil
	}
	salt(v, req)
	keys := v.keysTo(n)
	if req.DryRun {
		res := v.fold(c.estimates(keys, cnt), c.blockLimit(0))
		return Compaction{
			Messages: res.Messages, Folded: res.Summarized, Summaries: n, Kept: len(v.its) - n,
			Before: out.Before, After: Total(res.Messages, cnt), Notice: res.Notice,
		}, nil
	}
	scope := c.scope(req.Session, v) + v.salt
	if c.cachedPrefix(keys) < n && c.ensure(scope, req, cnt, v, n, true) {
		c.await(ctx, scope, keys, nil)
	}
	texts := c.texts(keys)
	if len(texts) < n {
		f, _ := c.retry.Peek(scope)
		cause := f.err
		var err error
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("rewrite: compact: %w", ctx.Err())
		case cause != nil:
			err = fmt.Errorf("rewrite: compact: %w", cause)
		default:
			err = fmt.Errorf("rewrite: compact: %d of %d summaries could not be written", n-len(texts), n)
		}
		c.log.Warn("summarizing failed; conversation left as is", "err", err)
		return out, err
	}
	res := v.fold(texts, c.blockLimit(0))
	c.stats.folded.Add(uint64(n))
	return Compaction{
		Messages: res.Messages, Folded: res.Summarized, Summaries: n, Kept: len(v.its) - n,
		Before: out.Before, After: Total(res.Messages, cnt), Notice: res.Notice,
	}, nil
}

// compactPlan returns the conversation and how many iterations Compact
// folds.
func (c *Compactor) compactPlan(msgs []Message, cnt Counter) (*conv, int) {
	v := analyze(msgs, cnt)
	if len(msgs) < c.cfg.MinMessages || v.hasBlock() {
		return v, 0
	}
	return v, v.trimEmpty(max(len(v.its)-max(c.cfg.KeepRecent, 1), 0))
}

// apply folds in.Messages as mode summarize (hybrid false) or hybrid
// does.
func (c *Compactor) apply(ctx context.Context, in Input, hybrid bool) (Result, error) {
	msgs, target, cnt, req := in.Messages, in.Target, in.Counter, in.Request
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	unchanged := Result{Messages: msgs}
	if c.sum == nil || len(msgs) < c.cfg.MinMessages {
		return unchanged, nil
	}
	v := analyze(msgs, cnt)
	if v.hasBlock() {
		return unchanged, nil
	}
	limit := c.blockLimit(in.Limit)
	var n int
	if hybrid {
		n = v.windowFold(c.keepTokens(in.Limit, target))
	} else {
		n = v.foldFor(v.p.kept-target, len(v.its)-c.cfg.KeepRecent, c.perSummary(), limit)
	}
	n = v.trimEmpty(n)
	salt(v, req)
	if hybrid && !req.DryRun {
		// Hybrid folds on every turn as its window slides: write now what
		// the next turn will most likely fold, assuming it is as long as
		// the newest iteration.
		defer c.speculate(req, cnt, v, in.Limit, target)
	}
	if n == 0 {
		return unchanged, nil
	}
	keys := v.keysTo(n)
	if req.DryRun {
		return v.fold(c.estimates(keys, cnt), limit), nil
	}
	got := c.cachedPrefix(keys)
	if got < n {
		scope := c.scope(req.Session, v) + v.salt
		// Only the first fold of a scope waits. Later ones fold what is
		// ready and leave the rest to trimming: their summaries are
		// folded in on a later turn, and no request of a session waits
		// on the summarizer twice.
		if c.ensure(scope, req, cnt, v, n, false) && c.cfg.Wait > 0 && (c.firstWait(scope) || req.Wait) {
			c.stats.waited.Add(1)
			got = c.await(ctx, scope, keys, c.after(c.cfg.Wait))
		} else {
			// A job in flight may have written the rest since the look-up
			// above: ensure then finds nothing missing and starts none.
			got = c.cachedPrefix(keys)
		}
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		if got < n {
			c.stats.fallbacks.Add(1)
			c.log.Debug("summaries not ready; trimming instead", "ready", got, "needed", n)
		}
	}
	texts := c.texts(keys[:got])
	if len(texts) == 0 {
		return unchanged, nil
	}
	c.stats.folded.Add(uint64(len(texts)))
	return v.fold(texts, limit), nil
}

// salt sets apart the summaries written to one-off instructions from
// those of the automatic folds: their own keys, and their own job.
func salt(v *conv, req Request) {
	if req.Instructions != "" {
		sum := sha256.Sum256([]byte(req.Instructions))
		v.salt = "+" + hex.EncodeToString(sum[:6])
	}
}

// estimates returns the texts a dry run folds for keys: the summary this
// process remembers for a key, else a stand-in as long as a summary is
// expected to be (perSummary), so that what follows the fold — trimming,
// the counts — sees what a written summary would most likely cost. It
// calls, starts and remembers nothing, and leaves the order of the
// remembered summaries (most recently used) as it was.
func (c *Compactor) estimates(keys []string, cnt Counter) []string {
	pending := standIn(c.perSummary(), cnt)
	texts := make([]string, len(keys))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range keys {
		texts[i] = pending
		if s, ok := c.summaries.Peek(k); ok {
			texts[i] = s.Text
		}
	}
	return texts
}

// standIn is a text that costs about tokens tokens as cnt counts them.
func standIn(tokens int, cnt Counter) string {
	const word = "pending"
	text := func(n int) string { return strings.TrimSpace(strings.Repeat(word+" ", max(n, 1))) }
	n := max(tokens, 1)
	if got := textCost(text(n), cnt); got > 0 {
		n = n * tokens / got // one correction: counters are about linear
	}
	return text(n)
}

// firstWait reports whether scope has not waited for summaries before,
// and marks it as having waited.
func (c *Compactor) firstWait(scope string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.waited.Get(scope); ok {
		return false
	}
	c.waited.Add(scope, struct{}{})
	return true
}

// prefetch starts writing, in the background, the summaries that folding
// in.Messages down to in.Target needs.
func (c *Compactor) prefetch(in Input, hybrid bool) {
	msgs, target, cnt, req := in.Messages, in.Target, in.Counter, in.Request
	if c.sum == nil || len(msgs) < c.cfg.MinMessages {
		return
	}
	v := analyze(msgs, cnt)
	if v.hasBlock() {
		return
	}
	if hybrid {
		c.speculate(req, cnt, v, in.Limit, target)
		return
	}
	n := v.trimEmpty(v.foldFor(v.p.kept-target, len(v.its)-c.cfg.KeepRecent, c.perSummary(), c.blockLimit(in.Limit)))
	if n > 0 && c.cachedPrefix(v.keysTo(n)) < n {
		c.ensure(c.scope(req.Session, v), req, cnt, v, n, false)
	}
}

// speculate starts writing the summaries Hybrid will need when the next
// turn, as long as the newest iteration, pushes the oldest of its window
// out; limit is the request's effective limit (Input.Limit).
func (c *Compactor) speculate(req Request, cnt Counter, v *conv, limit, target int) {
	if len(v.its) == 0 {
		return
	}
	last := len(v.its) - 1
	next := v.trimEmpty(v.windowFold(c.keepTokens(limit, target) - v.its[last].cost - v.pinnedCost(last)))
	if next > 0 && c.cachedPrefix(v.keysTo(next)) < next {
		c.ensure(c.scope(req.Session, v), req, cnt, v, next, false)
	}
}

func (c *Compactor) perSummary() int { return min(c.cfg.MaxTokens, summaryEstimate) }

// blockLimit is the room for the block of summaries: a quarter of the
// effective limit, so that summaries never crowd out the conversation
// they stand for (16 summaries' worth when the limit is unknown: 0).
func (c *Compactor) blockLimit(limit int) int {
	if limit > 0 {
		return limit / 4
	}
	return 16 * c.cfg.MaxTokens
}

// keepTokens is Hybrid's window of recent tokens, kept verbatim, under an
// effective limit of limit (0: unknown).
func (c *Compactor) keepTokens(limit, target int) int {
	switch {
	case c.cfg.KeepRecentTokens > 0:
		return c.cfg.KeepRecentTokens
	case limit > 0:
		return limit / 3
	}
	return target / 2
}

// scope is what one background job is for: the session, or without one
// the conversation itself (the key of its first iteration).
func (c *Compactor) scope(session string, v *conv) string {
	if session != "" {
		return "s:" + session
	}
	return "k:" + v.key(0)
}

// cachedPrefix returns how many of keys, from the first, have a summary
// in memory.
func (c *Compactor) cachedPrefix(keys []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range keys {
		if _, ok := c.summaries.Get(k); !ok {
			return i
		}
	}
	return len(keys)
}

// texts returns the summaries of keys, up to the first missing one.
func (c *Compactor) texts(keys []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		s, ok := c.summaries.Get(k)
		if !ok {
			break
		}
		out = append(out, s.Text)
	}
	return out
}

// broadcast wakes every waiter; c.mu must be held.
func (c *Compactor) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// await waits until every key has a summary, the scope's job ends,
// deadline fires or ctx ends, and returns how many keys from the first
// have one. A nil deadline waits for the job.
func (c *Compactor) await(ctx context.Context, scope string, keys []string, deadline <-chan time.Time) int {
	for {
		c.mu.Lock()
		n := len(keys)
		for i, k := range keys {
			if _, ok := c.summaries.Get(k); !ok {
				n = i
				break
			}
		}
		_, running := c.jobs[scope]
		ch := c.changed
		c.mu.Unlock()
		if n == len(keys) || !running {
			return n
		}
		select {
		case <-ch:
		case <-deadline:
			return n
		case <-ctx.Done():
			return n
		}
	}
}
