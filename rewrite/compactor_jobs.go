package rewrite

// The Compactor's background jobs: one per scope (a session), writing the
// summaries a request asked for in order, each with the ones before it
// as context.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A job writes the summaries of one scope in order, one call at a time.
type job struct {
	scope, session string // fixed
	// The latest request's wishes: its iterations' keys, the messages of
	// those not yet summarized, and what the calls need of it.
	keys  []string
	iters map[int][]Message
	req   Request
	cnt   Counter
	// claimFailed: a claim failed in this job, and was logged (once).
	claimFailed bool
}

// ensure makes sure a job is writing the summaries of v's first n
// iterations, and reports whether one is (false: nothing is missing, the
// Compactor is closed, or the scope failed less than retryAfter ago and
// force is not set).
func (c *Compactor) ensure(scope string, req Request, cnt Counter, v *conv, n int, force bool) bool {
	keys := slices.Clone(v.keysTo(n))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	have, _ := c.chainLocked(keys)
	if have == len(keys) {
		return false
	}
	iters := make(map[int][]Message, len(keys)-have)
	for i := have; i < len(keys); i++ {
		iters[i] = v.iterMessages(i)
	}
	if j, ok := c.jobs[scope]; ok {
		// A job in flight keeps a longer wish of the same conversation
		// (a prefetch beyond what this request needs).
		if len(keys) >= len(j.keys) || !slices.Equal(j.keys[:len(keys)], keys) {
			j.keys, j.iters = keys, iters
		}
		j.req, j.cnt = req, cnt
		return true
	}
	if f, ok := c.retry.Peek(scope); ok && !force {
		if c.now().Before(f.until) {
			return false
		}
		c.retry.Remove(scope)
	}
	j := &job{scope: scope, session: req.Session, keys: keys, iters: iters, req: req, cnt: cnt}
	c.jobs[scope] = j
	c.stats.jobs.Add(1)
	c.wg.Add(1)
	go c.run(j)
	return true
}

// run is a job: it loads what the store has, then summarizes the missing
// iterations in order, in batches (see batch), each call with the
// summaries before it as context.
func (c *Compactor) run(j *job) {
	defer c.wg.Done()
	if j.session != "" && c.store != nil {
		c.load(j)
	}
	for {
		c.mu.Lock()
		from, links := c.chainLocked(j.keys)
		end := j.batch(from, c.cfg.batchSize(j.req))
		if end == from || c.ctx.Err() != nil {
			delete(c.jobs, j.scope)
			c.broadcast()
			c.mu.Unlock()
			return
		}
		var msgs []Message
		for i := from; i < end; i++ {
			msgs = append(msgs, j.iters[i]...)
		}
		first, key, req, cnt := j.keys[from], j.keys[end-1], j.req, j.cnt
		prev := c.previous(links, cnt)
		c.mu.Unlock()

		release, write := c.claim(j, first)
		if !write {
			continue // written elsewhere, or the wish changed: look again
		}
		s, err := c.call(req, cnt, msgs, prev, key, end, end-from)
		if err != nil {
			err = fmt.Errorf("summarizing iterations %d to %d: %w", from+1, end, err)
			if c.ctx.Err() == nil {
				c.log.Warn("summarizer failed; trimming instead until it works again",
					"session", req.Session, "err", err)
			}
			c.mu.Lock()
			c.retry.Add(j.scope, failure{until: c.now().Add(retryAfter), err: err})
			delete(c.jobs, j.scope)
			c.broadcast()
			c.mu.Unlock()
			return
		}
		// Stored before it is used, so that what a request folds is what
		// every replica finds.
		if j.session != "" && c.store != nil {
			if err := c.store.Put(c.ctx, j.session, s); err != nil {
				c.stats.storeErrors.Add(1)
				c.log.Warn("saving a summary failed", "session", j.session, "err", err)
			}
		}
		release()
		c.mu.Lock()
		c.summaries.Add(s.Key, s)
		c.broadcast()
		c.mu.Unlock()
	}
}

// claimMargin is how much longer than a summarizer call (summarize.timeout)
// a claim lasts: the time to store the summary it is made for.
const claimMargin = 10 * time.Second

// Between two looks at a summary claimed by another replica, a job waits
// claimPoll at first, then twice as long each time, up to claimPollMax.
const (
	claimPoll    = 20 * time.Millisecond
	claimPollMax = time.Second
)

// claim claims the batch of j that begins with the iteration key stands
// for, when the store is shared by replicas (SummaryClaimer), and reports
// whether to write it now, with the function that releases the claim once
// the summary is stored. While another replica holds the claim, it looks
// at the store now and then and returns false as soon as that replica's
// summary is there (or j no longer wants key); it returns true once the
// claim is free and its own. A claim that fails writes anyway.
func (c *Compactor) claim(j *job, key string) (release func(), write bool) {
	none := func() {}
	cl, ok := c.store.(SummaryClaimer)
	if !ok || j.session == "" {
		return none, true
	}
	ttl := c.cfg.Timeout + claimMargin
	for i := 0; ; i++ {
		free, ok, err := cl.ClaimSummary(c.ctx, j.session, key, ttl)
		if err != nil {
			if c.ctx.Err() != nil {
				return none, false
			}
			c.stats.storeErrors.Add(1)
			if !j.claimFailed {
				j.claimFailed = true
				c.log.Warn("claiming a summary failed; writing it without a claim (another replica may write it too)",
					"session", j.session, "err", err)
			}
			return none, true
		}
		if ok && free == nil {
			return none, true // a store of one process: nothing to share
		}
		if ok {
			release = func() {
				if err := free(c.ctx); err != nil {
					c.stats.storeErrors.Add(1)
					c.log.Debug("releasing a summary claim failed; it expires", "session", j.session, "err", err)
				}
			}
			// A replica may have stored the summary and released its
			// claim between this job's last look at the store and now.
			c.load(j)
			if c.written(j, key) {
				release()
				return none, false
			}
			return release, true
		}
		if i == 0 {
			c.stats.deferred.Add(1)
		}
		t := time.NewTimer(min(claimPoll<<min(i, 6), claimPollMax))
		select {
		case <-c.ctx.Done():
			t.Stop()
			return none, false
		case <-t.C:
		}
		c.load(j)
		if c.written(j, key) {
			return none, false
		}
	}
}

// written reports whether the summaries in memory cover the iteration key
// stands for, or j no longer wants it.
func (c *Compactor) written(j *job, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(j.keys, key)
	n, _ := c.chainLocked(j.keys)
	return i < 0 || n > i
}

// failure is a scope's last summarizer failure.
type failure struct {
	until time.Time // no new job before
	err   error
}

// batch returns the end of the next batch, starting at iteration from:
// the iterations of the wish it holds the messages of, up to most and
// maxSummaryInput bytes of contents (at least one). It returns from when
// there is nothing to write.
func (j *job) batch(from, most int) int {
	end, size := from, 0
	for end < len(j.keys) && end-from < most {
		msgs, ok := j.iters[end]
		if !ok {
			break
		}
		for _, m := range msgs {
			size += len(m.Content)
		}
		if end > from && size > maxSummaryInput {
			break
		}
		end++
	}
	return end
}

// load copies the summaries of the job's keys from the store into memory.
func (c *Compactor) load(j *job) {
	session := j.session
	c.mu.Lock()
	want := make(map[string]bool, len(j.keys))
	for _, k := range j.keys {
		want[k] = true
	}
	c.mu.Unlock()
	ss, err := c.store.Get(c.ctx, session)
	if err != nil {
		c.stats.storeErrors.Add(1)
		c.log.Warn("loading summaries failed", "session", session, "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range ss {
		if want[s.Key] && s.Text != "" {
			c.summaries.Add(s.Key, s)
		}
	}
	c.broadcast()
}

// previous returns the context of the next call: the newest of links as
// far as max_tokens·4 tokens go, oldest first in the text.
func (c *Compactor) previous(links []link, cnt Counter) string {
	room := 4 * c.cfg.MaxTokens
	first := len(links)
	for first > 0 {
		room -= max(textCost(links[first-1].text, cnt), 1)
		if room < 0 && first < len(links) {
			break
		}
		first--
	}
	out := ""
	for _, l := range links[first:] {
		out = joinNotices(out, l.text)
	}
	return out
}

// call makes one summarizer call and returns its cleaned result.
func (c *Compactor) call(req Request, cnt Counter, msgs []Message, prev, key string, covers, span int) (Summary, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.Timeout)
	defer cancel()
	model := c.cfg.Model
	if model == "" {
		model = req.Model
	}
	start := c.now()
	text, err := c.sum.Summarize(ctx, SummaryRequest{
		Model: model, Messages: msgs, Previous: prev, MaxTokens: c.cfg.MaxTokens,
		NumCtx: req.NumCtx, Auth: req.Auth, System: c.cfg.Prompt, Instructions: req.Instructions,
	})
	d := c.now().Sub(start)
	var cut bool
	if err == nil {
		text, cut = TrimSummary(text, c.cfg.MaxTokens, cnt)
		if text == "" {
			err = ErrEmptySummary
		}
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // an answer after the deadline is not trusted
	}
	c.stats.calls.Add(1)
	c.stats.latency.Add(int64(d))
	if cut {
		c.stats.cut.Add(1)
	}
	if err != nil {
		c.stats.failures.Add(1)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("rewrite: summarizer timed out after %v: %w", c.cfg.Timeout, err)
		}
	}
	if c.onCall != nil {
		c.onCall(d, err)
	}
	if err != nil {
		return Summary{}, err
	}
	return Summary{Key: key, Covers: covers, Span: span, Text: text, Tokens: textCost(text, cnt), Created: c.now()}, nil
}
