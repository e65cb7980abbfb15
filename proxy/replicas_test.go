package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/redistest"
)

// newReplica is one ctxproxy replica in front of backendURL, with a
// Redis store of its own (its own cache and writer) on the shared Redis
// at addr, as replicas behind a load balancer run.
func newReplica(t *testing.T, backendURL, addr string) (string, *snapshots.RedisStore) {
	t.Helper()
	log := testLogger(t)
	scfg := snapshots.Config{Store: snapshots.StoreRedis, Redis: snapshots.RedisConfig{Addr: addr, Prefix: "replicas:",
		TurnWait: 100 * time.Millisecond}}
	store, err := snapshots.NewRedisStore(context.Background(), scfg, log)
	if err != nil {
		t.Fatal(err)
	}
	writer := snapshots.NewWriter(store, scfg, log)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		writer.Close(ctx)
		store.Close()
	})
	probe := &fixedProbe{devices: []gpu.Device{{Vendor: "nvidia", Name: "Fake GPU", Total: 24 << 30, Used: 4 << 30, Free: 20 << 30}}}
	mon := gpu.NewMonitor(probe, gpu.Config{}, gpu.MonitorOptions{Logger: log})
	mon.Sample(context.Background())
	trimmer, err := rewrite.NewTrimmer(rewrite.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Backend: backendURL}, Deps{Tokens: budget.NewRegistry(budget.Config{}, log), Trimmer: trimmer,
		Sizer: gpu.NewSizer(gpu.Config{}), Monitor: mon, Store: store, Writer: writer}, log)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts.URL, store
}

// TestReplicasReadTheirWrites: three replicas on one Redis, a client in
// accumulate mode (it sends only its new turn) whose turns go round robin,
// each sent the moment the previous reply ends. Every forwarded request
// carries the whole conversation so far, in order: the replica that takes
// a turn waits for the previous turn, stored by another replica, before it
// builds on the history.
func TestReplicasReadTheirWrites(t *testing.T) {
	addr := redistest.Start(t)
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	var replicas []string
	var store *snapshots.RedisStore
	for range 3 {
		url, st := newReplica(t, be.URL, addr)
		replicas, store = append(replicas, url), st
	}
	const turns = 60
	h := map[string]string{"X-Session-ID": "round-robin", "X-Ctxproxy-Accumulate": "1"}
	missing := 0
	start := time.Now()
	for i := range turns {
		if i == turns/2 {
			// A replica announces a turn and dies before it stores it:
			// the next turn waits for it once, up to turn_wait, and
			// says so; the turns after it do not wait.
			if _, err := store.BeginTurn(context.Background(), "round-robin"); err != nil {
				t.Fatal(err)
			}
		}
		body := fmt.Sprintf(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"question %d"}]}`, i)
		resp := post(t, replicas[i%len(replicas)]+"/api/chat", []byte(body), h)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: status %d", i, resp.StatusCode)
		}
		warned := strings.Contains(strings.Join(resp.Header.Values("X-Ctxproxy-Warning"), " "), "turn_wait")
		if i == turns/2 && !warned {
			t.Errorf("turn %d, after a replica died mid-turn: no warning", i)
		} else if i != turns/2 && warned {
			t.Errorf("turn %d warned of a turn not stored", i)
		}
		got, _ := be.Last("/api/chat")
		var sent struct {
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(got.Body, &sent); err != nil {
			t.Fatal(err)
		}
		var questions []string
		for _, m := range sent.Messages {
			if m.Role == "user" {
				questions = append(questions, m.Content)
			}
		}
		want := make([]string, i+1)
		for k := range want {
			want[k] = fmt.Sprintf("question %d", k)
		}
		if strings.Join(questions, "|") != strings.Join(want, "|") {
			missing++
			t.Logf("turn %d (replica %d): forwarded %d of %d questions", i, i%len(replicas), len(questions), i+1)
		}
	}
	t.Logf("%d turns in %v (one of them waited turn_wait for a turn never stored)", turns, time.Since(start))
	if missing > 0 {
		t.Errorf("%d of %d forwarded requests lacked earlier turns", missing, turns)
	}
}
