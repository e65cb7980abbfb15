package backend

// Tokenizers prepared before a model's first request: a verbose /api/show
// is megabytes for a real vocabulary, and reading it and building the
// tokenizer takes a second or more that no request should wait for.

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"sync"
	"time"
)

// What Preparation.Mode prepares.
const (
	// PrepareLoaded prepares the models the server has loaded (/api/ps).
	PrepareLoaded = "loaded"
	// PrepareAll prepares every model the server lists (/api/tags), the
	// loaded ones first.
	PrepareAll = "all"
	// PrepareNone prepares nothing: each model on its first request.
	PrepareNone = "none"
)

// DefaultPrepareMax is Preparation.MaxModels when it is 0.
const DefaultPrepareMax = 16

// DefaultPrepareMemory is Preparation.MaxMemory when it is 0: room for
// the tables of 20 to 40 vocabularies of 128,000–200,000 tokens.
const DefaultPrepareMemory = 256 << 20

// Preparation is what a Backend prepares in the background.
type Preparation struct {
	// Mode is PrepareLoaded ("" too), PrepareAll or PrepareNone. Unless
	// it is PrepareNone, a model named in any request is prepared too.
	Mode string
	// Interval is how often Poller.Run asks the server for its models;
	// 0 asks once, at start.
	Interval time.Duration
	// MaxModels is how many models are prepared in the background at
	// most; 0 is DefaultPrepareMax. Others are prepared on first use.
	MaxModels int
	// MaxMemory is how many bytes the vocabularies prepared in the
	// background may hold at most (exact.Tokenizer.Footprint, each
	// vocabulary counted once however many models share it); 0 is
	// DefaultPrepareMemory. Once they hold that much, other models are
	// prepared on first use.
	MaxMemory int64
	// List has the Poller list the server's models (Backend.Listing)
	// even with PrepareNone: a router of several servers reads them.
	List bool
}

// preparer holds the names given to Prepare and prepares them one after
// another on a goroutine of its own that ends when none is left.
type preparer struct {
	b     *Backend
	mode  string
	every time.Duration
	max   int
	room  int64 // the bytes prepared vocabularies may hold
	list  bool

	mu     sync.Mutex
	held   map[string]bool // prepared or queued: counted against max
	queue  []string
	busy   bool         // the goroutine runs
	full   bool         // max or room was reached (said once)
	vocabs map[any]bool // the vocabularies prepared (Footprint)
	bytes  int64        // what they hold
}

func newPreparer(b *Backend, p Preparation) *preparer {
	mode := p.Mode
	if mode == "" {
		mode = PrepareLoaded
	}
	return &preparer{b: b, mode: mode, every: p.Interval, max: cmp.Or(p.MaxModels, DefaultPrepareMax),
		room: cmp.Or(p.MaxMemory, DefaultPrepareMemory), list: p.List, held: map[string]bool{}, vocabs: map[any]bool{}}
}

// add queues the names not given before, up to max.
func (p *preparer) add(names []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range names {
		if n == "" || p.held[n] {
			continue
		}
		if len(p.held) >= p.max {
			if !p.full {
				p.full = true
				p.b.log.Info("tokens.prepare_max_models reached: other models are prepared on their first request", "max", p.max)
			}
			break
		}
		p.held[n] = true
		p.queue = append(p.queue, n)
	}
	p.start()
}

// again prepares name anew if Prepare was given it: the server lists it
// with another digest. Its cached details are dropped whether or not, so
// that its next request reads the new model.
func (p *preparer) again(name string) {
	p.b.models.drop(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held[name] || slices.Contains(p.queue, name) {
		return
	}
	p.queue = append(p.queue, name)
	p.start()
}

// start starts the goroutine that prepares the queue unless it runs
// (p.mu held).
func (p *preparer) start() {
	if len(p.queue) > 0 && !p.busy {
		p.busy = true
		go p.run()
	}
}

// run prepares the queued names until none is left. A name that could
// not be read is forgotten, to be prepared when given again.
func (p *preparer) run() {
	b := p.b
	ctx := context.Background()
	for {
		p.mu.Lock()
		if len(p.queue) > 0 && p.bytes >= p.room {
			if !p.full {
				p.full = true
				b.log.Info("tokens.prepare_max_memory reached: other models are prepared on their first request",
					"max_bytes", p.room, "held_bytes", p.bytes, "vocabularies", len(p.vocabs))
			}
			for _, n := range p.queue {
				delete(p.held, n)
			}
			p.queue = nil
		}
		if len(p.queue) == 0 {
			p.busy = false
			p.mu.Unlock()
			return
		}
		name := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()

		start := b.now()
		var m Details
		if b.Kind(ctx) == KindOllama {
			m = b.Model(ctx, name)
		}
		switch {
		case m.Name == "" || m.Err != nil:
			p.mu.Lock()
			delete(p.held, name)
			p.mu.Unlock()
		case m.Tokenizer != nil:
			vocab, size := m.Tokenizer.Footprint()
			p.mu.Lock()
			if !p.vocabs[vocab] {
				p.vocabs[vocab] = true
				p.bytes += size
			}
			p.mu.Unlock()
			b.log.Debug("tokenizer prepared before the model's first request", "model", name,
				"took", b.now().Sub(start).Round(time.Millisecond), "vocabulary_bytes", size)
		}
	}
}

// drop forgets name's details unless a fetch of them is under way.
func (c *modelCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries.Get(name); ok {
		select {
		case <-e.ready:
			c.entries.Remove(name)
		default:
		}
	}
}

// tag is a model /api/tags lists.
type tag struct {
	Name   string `json:"name"`
	Model  string `json:"model"`
	Size   uint64 `json:"size"`
	Digest string `json:"digest"`
}

// tags returns the models b's server lists (/api/tags).
func tags(ctx context.Context, b *Backend) ([]tag, error) {
	var tags struct {
		Models []tag `json:"models"`
	}
	_, err := b.JSON(ctx, http.MethodGet, "/api/tags", nil, &tags, 64<<20)
	return tags.Models, err
}

// Poller watches one server's models and prepares (Backend.Prepare)
// those Preparation.Mode names as they appear: the loaded ones (/api/ps)
// and, with PrepareAll, every one /api/tags lists, the loaded first. A
// model /api/tags lists with a new digest (pulled or created again) is
// prepared anew. Run one per server.
type Poller struct {
	b        *Backend
	interval time.Duration
	// tick, when set, replaces the ticker (tests).
	tick <-chan time.Time
	// mu makes one poll at a time: Run's and Poke's.
	mu sync.Mutex
	// digests are the models /api/tags listed at the last poll.
	digests map[string]string
}

// NewPoller returns the poller of b's server, with b's Preparation.
func NewPoller(b *Backend) *Poller {
	return &Poller{b: b, interval: b.prep.every}
}

// Active reports whether the poller lists its server's models at all:
// not with PrepareNone, unless Preparation.List asks for the listing.
func (p *Poller) Active() bool { return p.b.prep.mode != PrepareNone || p.b.prep.list }

// Poke polls now, in the background, as Run would at its next tick: the
// server's models changed (WatchModels, which tells a burst of changes
// once). It does nothing where the poller is not Active.
func (p *Poller) Poke() {
	if p.Active() {
		go p.poll(context.Background())
	}
}

// Run polls at once and then every Preparation.Interval (never with an
// interval of 0) until ctx ends. It returns at once unless the poller
// is Active.
func (p *Poller) Run(ctx context.Context) {
	if !p.Active() {
		return
	}
	p.poll(ctx)
	tick := p.tick
	if tick == nil {
		if p.interval <= 0 {
			return
		}
		t := time.NewTicker(p.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			p.poll(ctx)
		}
	}
}

// pollTimeout bounds the listing of one poll.
const pollTimeout = 30 * time.Second

// poll asks the server for its models and prepares what is new, one
// poll at a time.
func (p *Poller) poll(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	if p.b.Kind(ctx) != KindOllama {
		return
	}
	tags, err := tags(ctx, p.b)
	if err != nil {
		p.b.log.Debug("could not list the backend's models; asking again at the next poll", "err", err)
		return
	}
	loaded, _ := p.b.LoadedModels(ctx)
	listing := Listing{At: p.b.now(), Models: make(map[string]bool, len(tags)), Loaded: make(map[string]bool, len(loaded))}
	var names []string
	for _, l := range loaded {
		names = append(names, l.Name)
		listing.Loaded[l.Name] = true
	}
	digests := make(map[string]string, len(tags))
	for _, t := range tags {
		listing.Models[t.Name] = true
		digests[t.Name] = t.Digest
		if old, ok := p.digests[t.Name]; ok && old != t.Digest {
			p.b.prep.again(t.Name)
		}
		if p.b.prep.mode == PrepareAll {
			names = append(names, t.Name)
		}
	}
	p.digests = digests
	p.b.listing.Store(&listing)
	if p.b.prep.mode != PrepareNone {
		p.b.Prepare(names)
	}
}
