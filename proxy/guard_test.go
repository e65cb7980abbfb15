package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/proxy/edge"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// heldWriter is a Writer whose updates wait in memory until Flush, as a
// snapshots.Writer's do while the store is slow.
type heldWriter struct {
	store sessions.Store
	mu    sync.Mutex
	held  []func(context.Context) error
}

func (w *heldWriter) hold(fn func(context.Context) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = append(w.held, fn)
	return nil
}

func (w *heldWriter) Update(id string, fn func(*snapshots.Session) error) error {
	return w.hold(func(ctx context.Context) error { return w.store.Update(ctx, id, fn) })
}

func (w *heldWriter) UpdateThen(id string, fn func(*snapshots.Session) error, done func()) error {
	return w.hold(func(ctx context.Context) error {
		err := w.store.Update(ctx, id, fn)
		if done != nil {
			done()
		}
		return err
	})
}

func (w *heldWriter) Snapshot(string, string) error { return nil }

func (w *heldWriter) Health() (time.Time, error) { return time.Time{}, nil }
func (w *heldWriter) Unsaved(string) bool        { return false }
func (w *heldWriter) Settle(ctx context.Context, _ string) error {
	return w.Flush(ctx)
}

func (w *heldWriter) SaveSnapshot(snap *snapshots.Snapshot) error {
	return w.hold(func(ctx context.Context) error { _, err := w.store.SaveSnapshot(ctx, snap); return err })
}

func (w *heldWriter) Flush(ctx context.Context) error {
	w.mu.Lock()
	held := w.held
	w.held = nil
	w.mu.Unlock()
	for _, fn := range held {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	return nil
}

// TestEmergencySnapshotHasQueuedTurns: the memory guard's emergency
// snapshot is the session's last state, turns still queued for the store
// included; the clear that follows must not lose them.
func TestEmergencySnapshotHasQueuedTurns(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	store, err := snapshots.NewFileStore(snapshots.Config{Dir: t.TempDir()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w := &heldWriter{store: store}
	s, err := New(Config{Backend: be.URL}, Deps{Store: store, Writer: w}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	px := ts.URL
	h := map[string]string{"X-Session-ID": "busy"}
	for i, body := range []string{
		`{"model":"m","stream":false,"messages":[{"role":"user","content":"one"}]}`,
		`{"model":"m","stream":false,"messages":[{"role":"user","content":"one"},{"role":"assistant","content":"ok"},{"role":"user","content":"two"}]}`,
	} {
		resp := post(t, px+"/api/chat", []byte(body), h)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i == 0 {
			if err := w.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.guard.emergency()
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	snaps, err := store.ListSnapshots(context.Background(), "busy")
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots %+v, %v", snaps, err)
	}
	snap, err := store.LoadSnapshot(context.Background(), "busy", snaps[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.Messages); n != 4 {
		t.Errorf("emergency snapshot holds %d messages, want the 4 of the last turn", n)
	}
}

// TestBodyHeldUntilStored: a turn's messages share its body's bytes until
// the session store has them, so the body's share of the memory budget
// is given back then, not when the answer ends: while the store holds
// the first turn, a second body that would pass the budget is refused;
// once it is stored, the second is served.
func TestBodyHeldUntilStored(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "ok"})
	store, err := snapshots.NewFileStore(snapshots.Config{Dir: t.TempDir()}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w := &heldWriter{store: store}
	s, err := New(Config{Backend: be.URL, MaxBody: 4000, Limits: edge.Limits{BodyMemory: 5000, QueueWait: 50 * time.Millisecond}},
		Deps{Store: store, Writer: w}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	body := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`)
	send := func() int {
		resp := post(t, ts.URL+"/api/chat", body, map[string]string{"X-Session-ID": "held"})
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := send(); got != 200 {
		t.Fatalf("first: %d", got)
	}
	if got := send(); got != http.StatusServiceUnavailable {
		t.Errorf("second, while the first turn waits for the store: %d, want 503", got)
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := send(); got != 200 {
		t.Errorf("after the first turn was stored: %d, want 200", got)
	}
}
