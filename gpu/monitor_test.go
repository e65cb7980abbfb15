package gpu

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ctxproxy/ctxproxy/modelinfo"
)

// fakeProbe reports the devices a test sets, and counts samples.
type fakeProbe struct {
	mu      sync.Mutex
	devices []Device
	err     error
	calls   int
	closed  bool
}

func (p *fakeProbe) Name() string { return "fake" }

func (p *fakeProbe) Devices(context.Context) ([]Device, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.err != nil {
		return nil, p.err
	}
	return append([]Device(nil), p.devices...), nil
}

func (p *fakeProbe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

func (p *fakeProbe) set(free uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devices = []Device{newDevice("nvidia", "fake GPU", 100*gb, free)}
	p.err = err
}

// fakeClock lets a test see each wait the monitor starts and end it: the
// monitor blocks in After until the test takes the wait from waits, so the
// test always knows where the loop is without sleeping.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits chan wait
}

type wait struct {
	d    time.Duration
	fire chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), waits: make(chan wait)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	w := wait{d: d, fire: make(chan time.Time, 1)}
	c.waits <- w
	return w.fire
}

// next returns the wait the monitor is in now.
func (c *fakeClock) next(t *testing.T) wait {
	t.Helper()
	select {
	case w := <-c.waits:
		return w
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("monitor never waited")
		return wait{}
	}
}

// elapse moves the clock by d and ends wait w.
func (c *fakeClock) elapse(w wait, d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	w.fire <- now
}

func startMonitor(t *testing.T, p Probe, cfg Config, opts MonitorOptions) (*Monitor, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	opts.Now, opts.After = clock.Now, clock.After
	m := NewMonitor(p, cfg, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		// Release a wait in progress so Run sees the cancel.
		select {
		case w := <-clock.waits:
			w.fire <- clock.Now()
		case <-done:
		}
		<-done
	})
	return m, clock
}

// While inference is active the monitor polls every 5 s; idle,
// every 60 s.
func TestMonitorPollsEvery5sDuringInference(t *testing.T) {
	p := &fakeProbe{}
	p.set(50*gb, nil)
	m, clock := startMonitor(t, p, Config{}, MonitorOptions{})

	w := clock.next(t) // after the first sample
	if got := m.Reading().Seq; got != 1 {
		t.Fatalf("Seq after start = %d, want 1", got)
	}
	if w.d != 60*time.Second {
		t.Errorf("idle wait = %v, want 60s", w.d)
	}

	// A request begins 10 s into the idle wait: the monitor wakes and,
	// since its sample is older than 5 s, samples at once.
	clock.mu.Lock()
	clock.now = clock.now.Add(10 * time.Second)
	clock.mu.Unlock()
	done := m.Active()
	w = clock.next(t)
	if got := m.Reading().Seq; got != 2 {
		t.Errorf("Seq after a request began = %d, want 2", got)
	}
	if w.d != 5*time.Second {
		t.Errorf("active wait = %v, want 5s", w.d)
	}
	for want := uint64(3); want <= 5; want++ {
		clock.elapse(w, w.d)
		w = clock.next(t)
		if got := m.Reading().Seq; got != want {
			t.Errorf("Seq = %d, want %d", got, want)
		}
		if w.d != 5*time.Second {
			t.Errorf("active wait = %v, want 5s", w.d)
		}
	}

	// Request over: back to the idle interval, counted from the last
	// sample.
	done()
	done()                         // a second call changes nothing
	clock.elapse(w, 2*time.Second) // wakes early; not yet due
	w = clock.next(t)
	if w.d != 58*time.Second {
		t.Errorf("idle wait after the request = %v, want 58s", w.d)
	}
	if got := m.Reading().Seq; got != 5 {
		t.Errorf("Seq = %d, want 5 (no sample before it was due)", got)
	}
}

// Back-to-back requests while the monitor already polls at poll_active
// do not wake it one by one: it looks again within poll_active anyway, and
// still samples every poll_active while one is in flight. It runs in a
// synctest bubble so that "no wake-up came" is known once the monitor's
// goroutine is blocked, rather than after a fixed wait.
func TestMonitorBackToBackRequestsDoNotWakeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeProbe{}
		p.set(50*gb, nil)
		m, clock := startMonitor(t, p, Config{PollActive: 5 * time.Second, PollIdle: 60 * time.Second}, MonitorOptions{})
		clock.next(t)
		clock.mu.Lock()
		clock.now = clock.now.Add(10 * time.Second)
		clock.mu.Unlock()
		first := m.Active() // the first request after the idle spell wakes it
		w := clock.next(t)
		if w.d != 5*time.Second {
			t.Fatalf("wait after a request = %v, want 5s", w.d)
		}
		first()
		done := m.Active() // the next one, while it waits at most 5 s
		// Once the monitor is blocked, a wake-up would have it blocked
		// handing a new wait to clock.waits.
		synctest.Wait()
		select {
		case extra := <-clock.waits:
			t.Fatalf("a request woke the monitor again (new wait %v) though it was polling at poll_active", extra.d)
		default:
		}
		clock.elapse(w, 5*time.Second)
		w = clock.next(t)
		if got := m.Reading().Seq; got != 3 || w.d != 5*time.Second {
			t.Errorf("after poll_active with a request in flight: Seq %d, wait %v; want a sample and another 5s wait", got, w.d)
		}
		done()
	})
}

func TestMonitorRecentSampleIsNotRepeated(t *testing.T) {
	p := &fakeProbe{}
	p.set(50*gb, nil)
	m, clock := startMonitor(t, p, Config{PollActive: 5 * time.Second}, MonitorOptions{})
	clock.next(t)
	clock.mu.Lock()
	clock.now = clock.now.Add(2 * time.Second)
	clock.mu.Unlock()
	defer m.Active()()
	w := clock.next(t)
	if w.d != 3*time.Second {
		t.Errorf("wait after waking 2 s after a sample = %v, want 3s", w.d)
	}
	if got := m.Reading().Seq; got != 1 {
		t.Errorf("Seq = %d, want 1", got)
	}
}

// A sample has total, used, available and model-loaded
// memory, taken together.
func TestSnapshotHasTotalUsedFreeAndModelMemory(t *testing.T) {
	p := &fakeProbe{}
	p.set(60*gb, nil)
	models := []modelinfo.Loaded{
		{Name: "llama3.1:8b", Size: 20 * gb, SizeVRAM: 20 * gb, NumCtx: 65536},
		{Name: "qwen2.5:7b", Size: 10 * gb, SizeVRAM: 6 * gb, NumCtx: 8192},
	}
	var listed int
	m := NewMonitor(p, Config{}, MonitorOptions{Loaded: func(context.Context) ([]modelinfo.Loaded, error) {
		listed++
		return models, nil
	}})
	s := m.Sample(context.Background())
	got := [4]uint64{s.Total(), s.Used(), s.Free(), s.ModelMemory()}
	if want := [4]uint64{100 * gb, 40 * gb, 60 * gb, 26 * gb}; got != want {
		t.Errorf("total, used, free, model = %v, want %v", got, want)
	}
	if !s.ModelsKnown || listed != 1 || p.calls != 1 {
		t.Errorf("ModelsKnown %v, listed %d times, sampled %d times", s.ModelsKnown, listed, p.calls)
	}
	if lm, ok := s.Model("llama3.1:8b"); !ok || lm.NumCtx != 65536 {
		t.Errorf("Model(llama3.1:8b) = %+v, %v", lm, ok)
	}
	if m.Reading().Seq != s.Seq {
		t.Error("Snapshot() is not the sample just taken")
	}
}

func TestMonitorLoadedFails(t *testing.T) {
	p := &fakeProbe{}
	p.set(10*gb, nil)
	m := NewMonitor(p, Config{}, MonitorOptions{Loaded: func(context.Context) ([]modelinfo.Loaded, error) {
		return nil, errors.New("connection refused")
	}})
	s := m.Sample(context.Background())
	if s.ModelsKnown || !s.OK() {
		t.Errorf("snapshot = %+v; want devices but no models", s)
	}
}

// Falling free memory (down to the emergency level too) raises a
// low-memory event to subscribers; the levels it passes are announced once
// each.
func TestMonitorLowMemoryEvent(t *testing.T) {
	p := &fakeProbe{}
	m := NewMonitor(p, Config{}, MonitorOptions{})
	var events []Event
	cancel := m.Subscribe(func(e Event) { events = append(events, e) })
	ctx := context.Background()

	for _, free := range []uint64{50 * gb, 30 * gb, 19 * gb, 18 * gb, 4 * gb, 50 * gb} {
		p.set(free, nil)
		m.Sample(ctx)
	}
	type change struct {
		prev, level Level
		low         bool
	}
	var got []change
	for _, e := range events {
		got = append(got, change{e.Prev, e.Level, e.Low()})
	}
	want := []change{
		{LevelNormal, LevelCompress, true},
		{LevelCompress, LevelEmergency, true},
		{LevelEmergency, LevelNormal, false},
	}
	if len(got) != len(want) {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if events[1].Snapshot.Free() != 4*gb {
		t.Errorf("emergency event snapshot free = %d", events[1].Snapshot.Free())
	}

	cancel()
	p.set(1*gb, nil)
	m.Sample(ctx)
	if len(events) != 3 {
		t.Errorf("event after cancel: %+v", events[3:])
	}
}

// A failing probe leaves the level where it was rather than calling memory
// fine, and the next good sample recovers.
func TestMonitorProbeFailure(t *testing.T) {
	p := &fakeProbe{}
	m := NewMonitor(p, Config{}, MonitorOptions{})
	ctx := context.Background()
	p.set(10*gb, nil)
	if s := m.Sample(ctx); s.Level != LevelShrink {
		t.Fatalf("level = %v, want shrink", s.Level)
	}
	p.set(0, errors.New("gpu is lost"))
	s := m.Sample(ctx)
	if s.OK() || s.Err == nil || s.Level != LevelShrink {
		t.Errorf("failed sample = %+v", s)
	}
	p.set(90*gb, nil)
	if s := m.Sample(ctx); !s.OK() || s.Err != nil || s.Level != LevelNormal {
		t.Errorf("recovered sample = %+v", s)
	}
}

func TestMonitorConcurrentReaders(t *testing.T) {
	p := &fakeProbe{}
	p.set(50*gb, nil)
	m := NewMonitor(p, Config{}, MonitorOptions{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				done := m.Active()
				_ = m.Reading().Free()
				done()
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			m.Sample(ctx)
		}
	})
	wg.Wait()
	if m.Reading().Seq != 50 {
		t.Errorf("Seq = %d, want 50", m.Reading().Seq)
	}
}

func TestMonitorRunStopsOnCancel(t *testing.T) {
	p := &fakeProbe{}
	p.set(50*gb, nil)
	m := NewMonitor(p, Config{}, MonitorOptions{}) // real clock: 60 s idle wait
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		m.Run(ctx)
		close(done)
	}()
	cancel()
	<-done
}

// BenchmarkRequestPath is what a chat request pays: mark itself active and
// read the cached snapshot.
func BenchmarkRequestPath(b *testing.B) {
	p := &fakeProbe{}
	p.set(50*gb, nil)
	m := NewMonitor(p, Config{}, MonitorOptions{})
	m.Sample(context.Background())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			done := m.Active()
			_ = m.Reading().Free()
			done()
		}
	})
}

// The first request after an idle spell sizes from the memory free now:
// a sample older than poll_active is taken again, once however many
// requests ask at the same moment; a younger one is reused.
func TestMonitorCurrentAfterIdle(t *testing.T) {
	p := &fakeProbe{}
	p.set(50*gb, nil)
	clock := newFakeClock()
	m := NewMonitor(p, Config{PollActive: 5 * time.Second, PollIdle: time.Minute}, MonitorOptions{Now: clock.Now})
	ctx := context.Background()
	if r := m.Current(ctx); r.Seq != 1 || r.Free() != 50*gb {
		t.Fatalf("first Current = seq %d free %d, want a first sample of 50 GB free", r.Seq, r.Free())
	}
	p.set(10*gb, nil) // another program takes 40 GB
	clock.mu.Lock()
	clock.now = clock.now.Add(2 * time.Second)
	clock.mu.Unlock()
	if r := m.Current(ctx); r.Seq != 1 {
		t.Errorf("Current 2 s after a sample took a new one (seq %d)", r.Seq)
	}
	clock.mu.Lock()
	clock.now = clock.now.Add(30 * time.Second)
	clock.mu.Unlock()
	var wg sync.WaitGroup
	got := make([]Reading, 8)
	for i := range got {
		wg.Go(func() { got[i] = m.Current(ctx) })
	}
	wg.Wait()
	for i, r := range got {
		if r.Seq != 2 || r.Free() != 10*gb {
			t.Errorf("caller %d after 32 s idle: seq %d free %d, want the new sample (seq 2, 10 GB free)", i, r.Seq, r.Free())
		}
	}
	p.mu.Lock()
	calls := p.calls
	p.mu.Unlock()
	if calls != 2 {
		t.Errorf("probe sampled %d times, want 2 (concurrent stale callers share one sample)", calls)
	}
}
