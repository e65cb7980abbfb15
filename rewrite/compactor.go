package rewrite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
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
// most one background job per session at a time, cancelled by Close; on a
// store that replicas share (SummaryClaimer), by one replica at a time.
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
	steps   *steps
	changed chan struct{} // closed and replaced when summaries or jobs change
	closed  bool

	stats struct {
		calls, failures, cut, folded, waited, fallbacks, jobs, storeErrors, deferred atomic.Uint64
		latency                                                                      atomic.Int64
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
		steps:     newSteps(),
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
	// Deferred counts the batches a job found claimed by another replica
	// (SummaryClaimer) and left to it.
	Deferred uint64
}

// Stats returns the counters.
func (c *Compactor) Stats() SummaryStats {
	s := &c.stats
	return SummaryStats{
		Calls: s.calls.Load(), Failures: s.failures.Load(), Cut: s.cut.Load(),
		Latency: time.Duration(s.latency.Load()), Folded: s.folded.Load(),
		Waited: s.waited.Load(), Fallbacks: s.fallbacks.Load(), Jobs: s.jobs.Load(),
		StoreErrors: s.storeErrors.Load(), Deferred: s.deferred.Load(),
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
		links := c.estimates(req, keys, cnt)
		res := v.fold(n, links, c.cfg.blockLimit(0))
		return Compaction{
			Messages: res.Messages, Folded: res.Summarized, Summaries: len(links), Kept: len(v.its) - n,
			Before: out.Before, After: Total(res.Messages, cnt), Notice: res.Notice,
		}, nil
	}
	scope := scopeOf(req.Session, v) + v.salt
	if got, _ := c.chain(keys); got < n && c.ensure(scope, req, cnt, v, n, true) {
		c.await(ctx, scope, keys, nil)
	}
	got, links := c.chain(keys)
	if got < n {
		f, _ := c.retry.Peek(scope)
		cause := f.err
		var err error
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("rewrite: compact: %w", ctx.Err())
		case cause != nil:
			err = fmt.Errorf("rewrite: compact: %w", cause)
		default:
			err = fmt.Errorf("rewrite: compact: %d of %d iterations could not be summarized", n-got, n)
		}
		c.log.Warn("summarizing failed; conversation left as is", "err", err)
		return out, err
	}
	res := v.fold(n, links, c.cfg.blockLimit(0))
	c.stats.folded.Add(uint64(n))
	return Compaction{
		Messages: res.Messages, Folded: res.Summarized, Summaries: len(links), Kept: len(v.its) - n,
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
//
// The iterations a step folds stay folded, and no more, until the next
// step (steps): a summary that lands between two steps waits for the next
// one, so the forwarded prefix — and the backend's prompt cache — moves
// only at a step. A new step waits for the summaries it needs, at most
// summarize.wait, when they are written at the step (summarize.schedule;
// SummarizeConfig.ahead) or when the conversation folds for the first
// time; otherwise, or when the wait ends first, it folds what is ready
// and the rest is trimmed until the next step. The turns after it never
// wait.
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
	limit := c.cfg.blockLimit(in.Limit)
	var n, step int
	if hybrid {
		n, step = c.cfg.hybridFold(v, in, 0)
	} else {
		step = v.p.kept - target // Budget's n·Q: the same until the next step
		n = v.foldFor(step, len(v.its)-c.cfg.KeepRecent, c.cfg.perSummary(), limit)
	}
	n = v.trimEmpty(n)
	salt(v, req)
	if hybrid && !req.DryRun {
		defer c.prefetchHybrid(in, v)
	}
	if n == 0 {
		return unchanged, nil
	}
	keys := v.keysTo(n)
	if req.DryRun {
		return v.fold(n, c.estimates(req, keys, cnt), limit), nil
	}
	scope := scopeOf(req.Session, v) + v.salt
	held := c.steps.key(scope, hybrid, step)
	var got int
	var links []link
	if h, ok := c.steps.held(held); ok && h > 0 {
		// Between two steps: what the step folded, no more, and no wait.
		// A summary written since is folded at the next step.
		got, links = c.chain(keys[:min(h, n)])
	} else {
		// A new step, or one that could fold nothing yet: it folds what
		// is ready, a change made once. Only a new step waits.
		got, links = c.chain(keys)
		if got < n {
			wait := !ok && c.cfg.Wait > 0 && (!c.cfg.ahead(req) || c.firstWait(scope) || req.Wait)
			if c.ensure(scope, req, cnt, v, n, false) && wait {
				c.stats.waited.Add(1)
				c.await(ctx, scope, keys, c.after(c.cfg.Wait))
			}
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			if got, links = c.chain(keys); got < n {
				c.stats.fallbacks.Add(1)
				c.log.Debug("summaries not ready; trimming instead until the next step", "ready", got, "needed", n)
			}
		}
		c.steps.hold(held, got)
	}
	if got == 0 {
		return unchanged, nil
	}
	c.stats.folded.Add(uint64(got))
	return v.fold(got, links, limit), nil
}

// salt sets apart the summaries written to one-off instructions from
// those of the automatic folds: their own keys, and their own job.
func salt(v *conv, req Request) {
	if req.Instructions != "" {
		sum := sha256.Sum256([]byte(req.Instructions))
		v.salt = "+" + hex.EncodeToString(sum[:6])
	}
}

// estimates returns the summaries a dry run folds for keys: those this
// process remembers, then one stand-in per batch of the rest, as long as a
// summary is expected to be (perSummary), so that what follows the fold —
// trimming, the counts — sees what written summaries would most likely
// cost. It calls, starts and remembers nothing, and leaves the order of
// the remembered summaries (most recently used) as it was.
func (c *Compactor) estimates(req Request, keys []string, cnt Counter) []link {
	pending := standIn(c.cfg.perSummary(), cnt)
	c.mu.Lock()
	got, links := c.chainLocked(keys)
	c.mu.Unlock()
	for i := got; i < len(keys); i += c.cfg.batchSize(req) {
		links = append(links, link{pending, min(c.cfg.batchSize(req), len(keys)-i)})
	}
	return links
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
// in.Messages down to in.Target needs, unless they are written at the step
// (ahead).
func (c *Compactor) prefetch(in Input, hybrid bool) {
	msgs, target, cnt, req := in.Messages, in.Target, in.Counter, in.Request
	if c.sum == nil || len(msgs) < c.cfg.MinMessages || !c.cfg.ahead(req) {
		return
	}
	v := analyze(msgs, cnt)
	if v.hasBlock() {
		return
	}
	if hybrid {
		c.prefetchHybrid(in, v)
		return
	}
	n := v.trimEmpty(v.foldFor(v.p.kept-target, len(v.its)-c.cfg.KeepRecent, c.cfg.perSummary(), c.cfg.blockLimit(in.Limit)))
	if got, _ := c.chain(v.keysTo(n)); got < n {
		c.ensure(scopeOf(req.Session, v), req, cnt, v, n, false)
	}
}

// prefetchHybrid starts writing the summaries Hybrid will fold at its
// next step, once the conversation is within PrefetchTurns turns' growth
// of it, unless they are written at the step (ahead).
func (c *Compactor) prefetchHybrid(in Input, v *conv) {
	if !c.cfg.ahead(in.Request) {
		return
	}
	n, _ := c.cfg.hybridFold(v, in, PrefetchTurns*turnGrowth(in.Messages, in.Counter))
	n = v.trimEmpty(n)
	if got, _ := c.chain(v.keysTo(n)); got < n {
		c.ensure(scopeOf(in.Request.Session, v), in.Request, in.Counter, v, n, false)
	}
}

// link is one summary of a chain: its text, and how many iterations it
// condenses.
type link struct {
	text string
	span int
}

// chain returns how many of the iterations keys stand for (oldest first)
// the summaries in memory fold: the largest n ≤ len(keys) such that
// summaries of one iteration or of a batch (Summary.Span) cover iterations
// 0 to n-1 one after another, and those summaries, oldest first.
func (c *Compactor) chain(keys []string) (int, []link) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chainLocked(keys)
}

// chainLocked is chain with c.mu held.
func (c *Compactor) chainLocked(keys []string) (int, []link) {
	from := make([]int, len(keys)+1) // from[e]: where the summary ending before e begins; -1: none
	links := make([]link, len(keys)+1)
	from[0] = 0
	best := 0
	for e, k := range keys {
		from[e+1] = -1
		s, ok := c.summaries.Get(k)
		if !ok {
			continue
		}
		span := max(s.Span, 1)
		if b := e + 1 - span; b >= 0 && (b == 0 || from[b] >= 0) {
			from[e+1], links[e+1], best = b, link{s.Text, span}, e+1
		}
	}
	var out []link
	for e := best; e > 0; e = from[e] {
		out = append(out, links[e])
	}
	slices.Reverse(out)
	return best, out
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
		n, _ := c.chainLocked(keys)
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
