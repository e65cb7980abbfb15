package gpu

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/modelinfo"
)

// Event tells a subscriber that the guard's level changed.
type Event struct {
	Prev, Level Level
	Snapshot    Reading
}

// Low reports a low-memory event: usage rose to the compress level or
// above (the threshold is gpu.guard.compress_at).
func (e Event) Low() bool { return e.Level > e.Prev && e.Level >= LevelCompress }

// MonitorOptions are a Monitor's collaborators; every field may be nil.
type MonitorOptions struct {
	// Logger receives level changes and probe failures; nil discards.
	Logger *slog.Logger
	// Loaded lists the models Ollama has loaded (the proxy asks its
	// /api/ps). It is called with each sample so that memory and loaded
	// models agree; the Sizer needs it to count a loaded model's KV cache
	// as its own, and the guard to leave the models out of its usage (see
	// Reading.Usage). Without it both treat every model as not loaded.
	Loaded func(ctx context.Context) ([]modelinfo.Loaded, error)
	// Now and After stand in for time.Now and time.After in tests.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
}

// loadedTimeout bounds MonitorOptions.Loaded.
const loadedTimeout = 5 * time.Second

// Monitor samples a Probe off the request path: every poll_active while a
// chat request is in flight, every poll_idle otherwise. The
// request path reads a sample through Current: an atomic load, except
// for the first request after an idle spell, which samples anew.
type Monitor struct {
	probe Probe
	cfg   Config
	log   *slog.Logger
	opts  MonitorOptions

	snap   atomic.Pointer[Reading]
	active atomic.Int64
	wake   chan struct{}
	// quick is set while Run waits at most poll_active: a request that
	// begins then needs no wake-up, since Run looks again within
	// poll_active anyway (back-to-back requests would otherwise wake it
	// once each).
	quick atomic.Bool

	sampleMu sync.Mutex // one sample at a time; guards guard and seq
	guard    *Guard
	seq      uint64

	subMu sync.Mutex
	subs  map[int]func(Event)
	subID int
}

// NewMonitor returns a Monitor of p; call Run to start sampling.
func NewMonitor(p Probe, cfg Config, opts MonitorOptions) *Monitor {
	cfg = cfg.withDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.After == nil {
		opts.After = time.After
	}
	m := &Monitor{
		probe: p,
		cfg:   cfg,
		log:   opts.Logger,
		opts:  opts,
		wake:  make(chan struct{}, 1),
		guard: NewGuard(cfg.Guard),
		subs:  make(map[int]func(Event)),
	}
	m.snap.Store(&Reading{Probe: p.Name()})
	if opts.Loaded == nil {
		m.log.Warn("gpu: no source of loaded models: sizing treats models as not loaded and the memory guard counts their memory as pressure")
	}
	return m
}

// Reading returns the latest sample (Seq 0 before the first).
func (m *Monitor) Reading() Reading { return *m.snap.Load() }

// Current returns a sample no older than poll_active, taking one now when
// the latest is older: the first request after an idle spell sizes
// num_ctx from the memory free now, not from a sample up to poll_idle old
// (another program may have taken the GPU in between). While requests
// are in flight Run keeps the sample that fresh, so this is an atomic load
// on all but the first request after a pause; concurrent callers that
// find it stale share one sample.
func (m *Monitor) Current(ctx context.Context) Reading {
	if r := m.snap.Load(); r.Seq != 0 && m.opts.Now().Sub(r.Time) < m.cfg.PollActive {
		return *r
	}
	return m.sampleOlder(ctx, m.cfg.PollActive)
}

// sampleOlder takes a sample unless the latest is younger than maxAge,
// deciding under sampleMu: a request and Run that both find the sample
// stale take one sample between them, not two in a row (two would pass
// the sizer's two-sample hysteresis within a millisecond).
func (m *Monitor) sampleOlder(ctx context.Context, maxAge time.Duration) Reading {
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	if r := m.snap.Load(); r.Seq != 0 && m.opts.Now().Sub(r.Time) < maxAge {
		return *r
	}
	return m.sample(ctx)
}

// Active marks a chat request in flight until the returned func is called
// (more calls do nothing): `defer m.Active()()`. The first request after an
// idle spell wakes the sampler, which samples at once if the last sample
// is older than poll_active.
func (m *Monitor) Active() (done func()) {
	if m.active.Add(1) == 1 && !m.quick.Load() {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	var once sync.Once
	return func() { once.Do(func() { m.active.Add(-1) }) }
}

// Subscribe calls fn on each guard level change until cancel is called. fn
// runs on the sampling goroutine: it must return quickly and not call
// Sample.
func (m *Monitor) Subscribe(fn func(Event)) (cancel func()) {
	m.subMu.Lock()
	defer m.subMu.Unlock()
	id := m.subID
	m.subID++
	m.subs[id] = fn
	return func() {
		m.subMu.Lock()
		defer m.subMu.Unlock()
		delete(m.subs, id)
	}
}

// Run samples until ctx is done: once at start, then on the schedule.
func (m *Monitor) Run(ctx context.Context) {
	for {
		if ctx.Err() != nil {
			return
		}
		interval := m.cfg.PollIdle
		if m.active.Load() > 0 {
			interval = m.cfg.PollActive
		}
		m.quick.Store(interval <= m.cfg.PollActive)
		last := m.Reading()
		elapsed := m.opts.Now().Sub(last.Time)
		if last.Seq == 0 || elapsed >= interval {
			m.sampleOlder(ctx, interval)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-m.opts.After(interval - elapsed):
		case <-m.wake:
			// A request began: the loop recomputes the wait with
			// poll_active.
		}
	}
}

// Sample takes a sample now, publishes it and returns it (the `ctxproxy
// gpu` command uses it without Run).
func (m *Monitor) Sample(ctx context.Context) Reading {
	m.sampleMu.Lock()
	defer m.sampleMu.Unlock()
	return m.sample(ctx)
}

// sample is Sample with sampleMu held.
func (m *Monitor) sample(ctx context.Context) Reading {
	devices, err := m.probe.Devices(ctx)
	if err != nil {
		devices = nil
	}
	m.seq++
	s := Reading{Seq: m.seq, Probe: m.probe.Name(), Devices: devices, Err: err}
	old := m.snap.Load()
	if m.opts.Loaded != nil {
		// A backend that does not answer must not stall sampling.
		lctx, cancel := context.WithTimeout(ctx, loadedTimeout)
		models, lerr := m.opts.Loaded(lctx)
		cancel()
		s.Models, s.ModelsKnown = models, lerr == nil
		if lerr != nil && (old.Seq == 0 || old.ModelsKnown) {
			m.log.Warn("gpu: listing loaded models failed", "err", lerr)
		}
	}
	s.Time = m.opts.Now()
	prev := m.guard.Level()
	s.Level = prev // no devices: keep the level rather than call it normal
	if s.OK() {
		s.Level = m.guard.Observe(s.Usage())
	}
	m.snap.Store(&s)

	switch {
	case err != nil && (old.Err == nil || old.Seq == 0):
		m.log.Warn("gpu: memory sample failed", "probe", s.Probe, "err", err)
	case err == nil && old.Err != nil:
		m.log.Info("gpu: memory sample recovered", "probe", s.Probe)
	}
	if s.Level != prev {
		m.levelChanged(Event{Prev: prev, Level: s.Level, Snapshot: s})
	}
	return s
}

func (m *Monitor) levelChanged(e Event) {
	s := e.Snapshot
	attrs := []any{
		"from", e.Prev.String(), "to", e.Level.String(),
		"usage", int(s.Usage()*100 + 0.5), "free", formatBytes(s.Free()), "total", formatBytes(s.Total()),
	}
	if e.Level > e.Prev {
		m.log.Warn("gpu: memory guard level rose", attrs...)
	} else {
		m.log.Info("gpu: memory guard level fell", attrs...)
	}
	m.subMu.Lock()
	subs := make([]func(Event), 0, len(m.subs))
	for _, fn := range m.subs {
		subs = append(subs, fn)
	}
	m.subMu.Unlock()
	for _, fn := range subs {
		fn(e)
	}
}
