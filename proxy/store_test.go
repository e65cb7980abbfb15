package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// flakyStore is a store whose reads and writes can be made to fail, as
// a full disk or a Redis that went away does.
type flakyStore struct {
	snapshots.Store
	down      atomic.Bool // reads and writes fail
	writeDown atomic.Bool // writes fail
}

var errStoreDown = errors.New("store down")

func (f *flakyStore) Get(ctx context.Context, id string) (*snapshots.Session, error) {
	if f.down.Load() {
		return nil, errStoreDown
	}
	return f.Store.Get(ctx, id)
}

func (f *flakyStore) Update(ctx context.Context, id string, fn func(*snapshots.Session) error) error {
	if f.down.Load() || f.writeDown.Load() {
		return errStoreDown
	}
	return f.Store.Update(ctx, id, fn)
}

// TestStoreFailureVisible: while the store refuses writes, /readyz says
// degraded and why, every response carries X-Ctxproxy-Store, and the
// turns are saved once it recovers; in accumulate mode a store that
// cannot be read gets the client a 503, never a silently shorter
// conversation.
func TestStoreFailureVisible(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	log := testLogger(t)
	fs, err := snapshots.NewFileStore(snapshots.Config{Dir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	store := &flakyStore{Store: fs}
	writer := snapshots.NewWriter(store, snapshots.Config{}, log)
	t.Cleanup(func() { writer.Close(context.Background()) })
	trimmer, _ := rewrite.NewTrimmer(rewrite.Config{}, log)
	srv, err := New(Config{Backend: be.URL, Planning: plan.Config{Accumulate: true}}, Deps{Tokens: budget.NewRegistry(budget.Config{}, log),
		Trimmer: trimmer, Sizer: gpu.NewSizer(gpu.Config{}), Store: store, Writer: writer}, log)
	if err != nil {
		t.Fatal(err)
	}
	px := httptestServer(t, srv)
	turn := func(text string) (*http.Response, string) {
		resp := post(t, px+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"`+text+`"}]}`),
			map[string]string{"X-Session-ID": "s"})
		return resp, readAll(t, resp.Body)
	}
	readyz := func() (int, string) {
		r, err := http.Get(px + "/ctxproxy/readyz")
		if err != nil {
			t.Fatal(err)
		}
		return r.StatusCode, readAll(t, r.Body)
	}
	if resp, _ := turn("one"); resp.StatusCode != 200 || resp.Header.Get("X-Ctxproxy-Store") != "" {
		t.Fatalf("healthy: %d %q", resp.StatusCode, resp.Header.Get("X-Ctxproxy-Store"))
	}
	writer.Flush(context.Background())

	// Reads fail: accumulate refuses the turn rather than drop history.
	store.down.Store(true)
	resp, body := turn("two")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "history") {
		t.Errorf("accumulate with the store down: %d %s", resp.StatusCode, body)
	}

	// Writes fail: the next responses say so, readyz says why.
	store.down.Store(false)
	store.writeDown.Store(true)
	turn("three")
	deadline := time.Now().Add(5 * time.Second)
	for !writer.Unsaved("s") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "store down") {
		t.Errorf("readyz while the store fails: %d %s", code, body)
	}
	store.writeDown.Store(false)
	resp, _ = turn("four")
	if got := resp.Header.Get("X-Ctxproxy-Store"); got != "degraded; last turn not saved" {
		t.Errorf("the response after an unsaved turn: X-Ctxproxy-Store %q", got)
	}
	// Recovered: the retried turn and the new one are stored, in order.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	writer.Flush(ctx)
	sess, err := fs.Get(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	var contents []string
	for _, m := range sess.Messages {
		if m.Role == "user" {
			contents = append(contents, m.Content)
		}
	}
	if strings.Join(contents, ",") != "one,three,four" {
		for _, m := range sess.Messages {
			t.Logf("%s %q", m.Role, m.Content)
		}
		t.Errorf("stored user turns %v, want one, three, four", contents)
	}
	if code, _ := readyz(); code != 200 {
		t.Errorf("readyz after recovery: %d", code)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestAccumulateFastTurns: 100 turns of one session in accumulate mode,
// each sent the moment the reply before it ends, all arrive in the
// conversation the backend sees and in the store, in order (the writer
// used to be overtaken: counts went 1, 1, 3, 5…).
func TestAccumulateFastTurns(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{cfg: Config{Planning: plan.Config{Accumulate: true}}, strategy: rewrite.Config{Mode: "none"}})
	for i := range 100 {
		resp := post(t, sys.url+"/api/chat", []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"turn `+strconv.Itoa(i)+`"}]}`),
			map[string]string{"X-Session-ID": "fast"})
		readAll(t, resp.Body)
		got, _ := be.Last("/api/chat")
		if n := len(forwardedMessages(t, got.Body)); n != 2*i+1 {
			t.Fatalf("turn %d: the backend got %d messages, want %d", i, n, 2*i+1)
		}
	}
	sys.flush(t)
	sess, err := sys.store.Get(context.Background(), "fast")
	if err != nil || len(sess.Messages) != 200 {
		t.Fatalf("stored %d messages (%v), want 200", len(sess.Messages), err)
	}
	for i := range 100 {
		if want := "turn " + strconv.Itoa(i); sess.Messages[2*i].Content != want {
			t.Fatalf("message %d is %q, want %q", 2*i, sess.Messages[2*i].Content, want)
		}
	}
}

// hangingStore never answers a read until the caller gives up.
type hangingStore struct{ snapshots.Store }

func (hangingStore) Get(ctx context.Context, _ string) (*snapshots.Session, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hangingStore) List(ctx context.Context) ([]snapshots.Listing, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestAdminReadTimeout: admin reads of a store that hangs answer 503 in
// about a second, with a clear message.
func TestAdminReadTimeout(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	log := testLogger(t)
	fs, err := snapshots.NewFileStore(snapshots.Config{Dir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Backend: be.URL}, Deps{Store: hangingStore{fs}}, log)
	if err != nil {
		t.Fatal(err)
	}
	px := httptestServer(t, srv)
	for _, path := range []string{"/ctxproxy/sessions", "/ctxproxy/sessions/s"} {
		start := time.Now()
		resp, err := http.Get(px + path)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "did not answer in time") || time.Since(start) > 5*time.Second {
			t.Errorf("%s: %d %s after %s", path, resp.StatusCode, body, time.Since(start))
		}
	}
}
