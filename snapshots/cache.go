package snapshots

import (
	"container/list"
	"sync"
)

// stateCache keeps the decoded state of the sessions used most recently,
// up to a number of bytes, so that an update of a session in use reads
// nothing and decodes nothing: it costs the change it writes. A session
// not in the cache is replayed from its log once.
type stateCache struct {
	mu    sync.Mutex
	max   int
	bytes int
	lru   list.List // of *cached, most recently used first
	m     map[string]*list.Element
}

// cached is one session's state and where its log stands. Its fields
// change only under the session's key lock.
type cached struct {
	k     string
	s     *Session
	bytes int // sessionBytes(s), as counted in the cache's total
	// size is the log's length in bytes (FileStore: where the next record
	// goes); base the length up to the end of its last replace record.
	// What lies beyond base is what compaction folds away.
	size, base int64
	// seq is RedisStore's change counter of the session when s was read.
	seq int64
}

// defaultCacheBytes bounds the cache: some hundreds of long
// conversations.
const defaultCacheBytes = 64 << 20

func newStateCache(max int) *stateCache {
	return &stateCache{max: max, m: make(map[string]*list.Element)}
}

// get returns session k's entry, or nil.
func (c *stateCache) get(k string) *cached {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.m[k]
	if el == nil {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cached)
}

// put adds or refreshes e after its state changed, and evicts the least
// recently used entries beyond the bound (never e itself).
func (c *stateCache) put(e *cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.m[e.k]; el != nil {
		c.bytes -= el.Value.(*cached).bytes
		c.lru.Remove(el)
	}
	e.bytes = sessionBytes(e.s)
	c.bytes += e.bytes
	c.m[e.k] = c.lru.PushFront(e)
	for c.bytes > c.max && c.lru.Len() > 1 {
		old := c.lru.Back().Value.(*cached)
		c.lru.Remove(c.lru.Back())
		delete(c.m, old.k)
		c.bytes -= old.bytes
	}
}

// drop forgets session k.
func (c *stateCache) drop(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.m[k]; el != nil {
		c.bytes -= el.Value.(*cached).bytes
		c.lru.Remove(el)
		delete(c.m, k)
	}
}

// compactRatio and minCompact decide when a log is compacted: when the
// records after its last replace record exceed compactRatio times the
// bytes up to it, and minCompact bytes. Compacting rewrites the session
// whole, so a log is rewritten only after it has grown by a multiple of
// itself: each turn pays a constant share of the rewrites, however long
// the conversation. The replace record is gzip-compressed (about 4× on
// chat text) and appended records are not, so at 4 the log is compacted
// when its plain records hold about as much as the whole session does,
// and a log takes at most about twice the session's plain size.
const (
	compactRatio = 4
	minCompact   = 64 << 10
)

func (e *cached) needsCompaction() bool {
	tail := e.size - e.base
	return tail > minCompact && tail > compactRatio*e.base
}

// compactor compacts logs in the background, one at a time, so that the
// update that made a log due does not wait for the rewrite.
type compactor struct {
	fn      func(k, id string)
	mu      sync.Mutex
	cond    *sync.Cond
	pending map[string]string // key → session id
	busy    bool
	closed  bool
	done    chan struct{}
}

func newCompactor(fn func(k, id string)) *compactor {
	c := &compactor{fn: fn, pending: make(map[string]string), done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	go c.run()
	return c
}

// request queues session id (key k) for compaction; a session already
// queued is queued once.
func (c *compactor) request(k, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.pending[k] = id
		c.cond.Broadcast()
	}
}

func (c *compactor) run() {
	defer close(c.done)
	c.mu.Lock()
	for {
		for len(c.pending) == 0 && !c.closed {
			c.cond.Wait()
		}
		if c.closed {
			c.mu.Unlock()
			return
		}
		var k, id string
		for k, id = range c.pending {
			break
		}
		delete(c.pending, k)
		c.busy = true
		c.mu.Unlock()
		c.fn(k, id)
		c.mu.Lock()
		c.busy = false
		c.cond.Broadcast()
	}
}

// wait returns once nothing is queued or being compacted.
func (c *compactor) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for (len(c.pending) > 0 || c.busy) && !c.closed {
		c.cond.Wait()
	}
}

// close stops the compactor after the compaction in progress; queued ones
// are dropped: a log not compacted is still whole.
func (c *compactor) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	<-c.done
}
