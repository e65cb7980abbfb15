package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/redistest"
)

// servers are n Ollama fakes as the servers of one fleet, named a, b, c….
func servers(t *testing.T, n int) ([]*fakebackend.Fake, []*fleet.Node) {
	t.Helper()
	var fakes []*fakebackend.Fake
	var out []*fleet.Node
	for i := range n {
		f := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
		u, _ := url.Parse(f.URL)
		tr := NewTransport(Config{})
		be := backend.New(backend.Config{URL: u, Kind: KindOllama, Client: &http.Client{Transport: tr},
			Prepare: backend.Preparation{Mode: backend.PrepareNone, List: true}})
		backend.NewPoller(be).Run(t.Context())
		fakes = append(fakes, f)
		out = append(out, &fleet.Node{Name: string(rune('a' + i)), URL: u, Backend: be, Transport: tr})
	}
	return fakes, out
}

// fleetProxy is a ctxproxy in front of the fleet, its sessions in store.
func fleetProxy(t *testing.T, ss []*fleet.Node, store Deps) string {
	t.Helper()
	router, err := fleet.New(ss, fleet.RouteSessions)
	if err != nil {
		t.Fatal(err)
	}
	log := testLogger(t)
	trimmer, _ := rewrite.NewTrimmer(rewrite.Config{}, log)
	deps := store
	deps.Tokens, deps.Trimmer, deps.Sizer, deps.Fleet, deps.Backend = budget.NewRegistry(budget.Config{}, log), trimmer, gpu.NewSizer(gpu.Config{}), router, ss[0].Backend
	srv, err := New(Config{Backend: ss[0].URL.String(), BackendKind: KindOllama}, deps, log)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts.URL
}

// fileStore is a file store and its writer, closed when the test ends.
func fileStore(t *testing.T) (Deps, *snapshots.FileStore, *snapshots.Writer) {
	t.Helper()
	cfg := snapshots.Config{Dir: t.TempDir()}
	store, err := snapshots.NewFileStore(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := writerOf(t, store, cfg, nil)
	return Deps{Store: store, Writer: w}, store, w
}

// writerOf is store's writer; both are closed when the test ends.
func writerOf(t testing.TB, store snapshots.Store, cfg snapshots.Config, log *slog.Logger) *snapshots.Writer {
	w := snapshots.NewWriter(store, cfg, log)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.Close(ctx)
		store.Close()
	})
	return w
}

// turn sends a session's turn and returns the server that answered it
// (X-Ctxproxy-Backend) and its warning.
func turn(t *testing.T, url, session string, n int) (backendHeader, warning string) {
	t.Helper()
	var msgs []string
	for i := range n {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"question %d of %s"}`, i, session),
			fmt.Sprintf(`{"role":"assistant","content":"answer %d"}`, i))
	}
	msgs = append(msgs, `{"role":"user","content":"and now?"}`)
	body := `{"model":"llama3.1:8b","stream":false,"messages":[` + strings.Join(msgs, ",") + `]}`
	resp := post(t, url+"/api/chat", []byte(body), map[string]string{"X-Session-ID": session})
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("session %s turn %d: %d %s", session, n, resp.StatusCode, data)
	}
	if !json.Valid(data) {
		t.Fatalf("session %s turn %d: not JSON: %s", session, n, data)
	}
	return resp.Header.Get("X-Ctxproxy-Backend"), resp.Header.Get("X-Ctxproxy-Warning")
}

func TestFleetKeepsSessionsOnTheirServer(t *testing.T) {
	fakes, ss := servers(t, 3)
	deps, store, w := fileStore(t)
	url := fleetProxy(t, ss, deps)
	where := map[string]string{}
	used := map[string]bool{}
	for n := range 4 {
		for i := range 6 {
			session := fmt.Sprintf("s%d", i)
			got, _ := turn(t, url, session, n)
			if got == "" {
				t.Fatal("no X-Ctxproxy-Backend with several servers")
			}
			if prev, ok := where[session]; ok && prev != got {
				t.Fatalf("session %s moved from %s to %s with every server up", session, prev, got)
			}
			where[session] = got
			used[got] = true
		}
	}
	if len(used) < 2 {
		t.Fatalf("six sessions all on %v", used)
	}
	for _, s := range ss {
		// The last handler closes its answer just after the client has it.
		for wait := time.Now().Add(2 * time.Second); s.InFlight() != 0 && time.Now().Before(wait); {
			time.Sleep(time.Millisecond)
		}
		if n := s.InFlight(); n != 0 {
			t.Fatalf("server %s has %d requests in flight after every answer", s.Name, n)
		}
	}
	// Each server saw only its sessions' turns.
	for i, f := range fakes {
		for _, r := range f.Requests() {
			if r.Path != "/api/chat" {
				continue
			}
			name := string(rune('a' + i))
			var req struct {
				Messages []struct{ Content string } `json:"messages"`
			}
			json.Unmarshal(r.Body, &req)
			session := strings.TrimPrefix(req.Messages[0].Content, "question 0 of ")
			if strings.HasPrefix(req.Messages[0].Content, "question") && where[session] != name {
				t.Fatalf("server %s got a turn of session %s, which is on %s", name, session, where[session])
			}
		}
	}
	// The session's record names its server.
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := store.Get(context.Background(), "s0")
	if err != nil || s.Backend != where["s0"] {
		t.Fatalf("stored backend %q (%v), want %q", s.Backend, err, where["s0"])
	}
	// And the admin API shows it.
	resp, err := http.Get(url + "/ctxproxy/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
			Backend   string `json:"backend"`
		}
	}
	json.NewDecoder(resp.Body).Decode(&list)
	for _, row := range list.Sessions {
		if row.Backend != where[row.SessionID] {
			t.Fatalf("listing: session %s on %q, want %q", row.SessionID, row.Backend, where[row.SessionID])
		}
	}
	if len(list.Sessions) != 6 {
		t.Fatalf("listing: %d sessions", len(list.Sessions))
	}
}

func TestFleetMovesASessionWhoseServerIsGone(t *testing.T) {
	fakes, ss := servers(t, 3)
	// Each server has memory of its own, so each plan has a num_ctx of
	// its own: a move must answer with the new server's.
	for i, s := range ss {
		mon := gpu.NewMonitor(memProbe{total: 24 << 30, free: uint64(6+6*i) << 30}, gpu.Config{},
			gpu.MonitorOptions{Logger: slog.New(slog.DiscardHandler)})
		mon.Sample(t.Context())
		s.Memory = fleet.Local{Monitor: mon}
	}
	deps, _, _ := fileStore(t)
	url := fleetProxy(t, ss, deps)
	numCtx := map[string]string{}
	for _, s := range ss {
		resp := post(t, url+"/api/chat", []byte(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`),
			map[string]string{"X-Ctxproxy-Backend": s.Name})
		numCtx[s.Name] = resp.Header.Get("X-Ctxproxy-Num-Ctx")
	}
	if numCtx["a"] == "" || numCtx["a"] == numCtx["b"] || numCtx["b"] == numCtx["c"] || numCtx["a"] == numCtx["c"] {
		t.Fatalf("the servers' plans do not differ: num_ctx %v", numCtx)
	}
	first, _ := turn(t, url, "moving", 0)
	fakes[first[0]-'a'].Close()
	got, warning := turn(t, url, "moving", 1)
	name, moved, _ := strings.Cut(got, "; ")
	if name == first || moved != "moved-from="+first {
		t.Fatalf("after %s went away: X-Ctxproxy-Backend %q", first, got)
	}
	// A new connection is refused; one the pool kept is closed under
	// the request.
	if !strings.Contains(warning, "backend "+first+" could not be reached") && !strings.Contains(warning, "backend "+first+" went away before answering") {
		t.Fatalf("warning %q", warning)
	}
	// The headers tell of the plan made for the new server: its num_ctx,
	// not the gone one's.
	resp := post(t, url+"/api/chat", []byte(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"X-Ctxproxy-Backend": first})
	got, _, _ = strings.Cut(resp.Header.Get("X-Ctxproxy-Backend"), "; ")
	if resp.StatusCode != http.StatusOK || got == first || resp.Header.Get("X-Ctxproxy-Tokens") == "" ||
		resp.Header.Get("X-Ctxproxy-Num-Ctx") != numCtx[got] {
		t.Fatalf("sent to the gone %s: %d on %q, headers %v; num_ctx of each server %v", first, resp.StatusCode, got, resp.Header, numCtx)
	}
	// The next turn stays where it moved, and says nothing more.
	if again, warning := turn(t, url, "moving", 2); again != name || warning != "" {
		t.Fatalf("the turn after the move: %q %q, want %q", again, warning, name)
	}
}

func TestFleetMovesARequestTheServerRefuses(t *testing.T) {
	fakes, ss := servers(t, 2)
	deps, _, _ := fileStore(t)
	url := fleetProxy(t, ss, deps)
	first, _ := turn(t, url, "busy", 0)
	fakes[first[0]-'a'].SetOptions(fakebackend.Options{Status: http.StatusServiceUnavailable, ErrorMessage: "server busy, please try again"})
	got, warning := turn(t, url, "busy", 1)
	if strings.HasPrefix(got, first) || !strings.Contains(warning, "answered 503") {
		t.Fatalf("refused with 503 on %s: answered by %q, warning %q", first, got, warning)
	}
	// Every server refuses: the last answer reaches the client.
	for _, f := range fakes {
		f.SetOptions(fakebackend.Options{Status: http.StatusServiceUnavailable, ErrorMessage: "server busy"})
	}
	resp := post(t, url+"/api/chat", []byte(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`), nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("every server busy: %d", resp.StatusCode)
	}
}

func TestOneBackendSaysNoBackend(t *testing.T) {
	_, ss := servers(t, 1)
	deps, _, _ := fileStore(t)
	url := fleetProxy(t, ss, deps)
	if got, _ := turn(t, url, "one", 0); got != "" {
		t.Fatalf("X-Ctxproxy-Backend %q with one server", got)
	}
}

// TestFleetReplicasRouteASessionAlike: three replicas on one Redis in
// front of the same three servers; a session's turns, sent to the
// replicas in turn, all go to one server.
func TestFleetReplicasRouteASessionAlike(t *testing.T) {
	addr := redistest.Start(t)
	_, ss := servers(t, 3)
	var urls []string
	for range 3 {
		// Each replica has its own view of the servers, as separate
		// processes do.
		var own []*fleet.Node
		for _, s := range ss {
			be := backend.New(backend.Config{URL: s.URL, Kind: KindOllama, Client: &http.Client{Transport: s.Transport},
				Prepare: backend.Preparation{Mode: backend.PrepareNone, List: true}})
			backend.NewPoller(be).Run(t.Context())
			own = append(own, &fleet.Node{Name: s.Name, URL: s.URL, Backend: be, Transport: s.Transport})
		}
		cfg := snapshots.Config{Store: snapshots.StoreRedis, Redis: snapshots.RedisConfig{Addr: addr, Prefix: "fleet:"}}
		store, err := snapshots.NewRedisStore(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, fleetProxy(t, own, Deps{Store: store, Writer: writerOf(t, store, cfg, nil)}))
	}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			session := fmt.Sprintf("r%d", i)
			var first string
			for n := range 6 {
				got, _ := turn(t, urls[(i+n)%3], session, n)
				if n == 0 {
					first = got
				} else if got != first {
					t.Errorf("session %s: turn %d on %s, turn 0 on %s", session, n, got, first)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestFleetSendsWhereTheClientSays(t *testing.T) {
	_, ss := servers(t, 3)
	deps, _, _ := fileStore(t)
	url := fleetProxy(t, ss, deps)
	for _, name := range []string{"c", "a", "b"} {
		resp := post(t, url+"/api/chat", []byte(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`),
			map[string]string{"X-Ctxproxy-Backend": name, "X-Session-ID": "pinned"})
		if got := resp.Header.Get("X-Ctxproxy-Backend"); resp.StatusCode != http.StatusOK || got != name {
			t.Fatalf("pinned to %s: %d on %q", name, resp.StatusCode, got)
		}
		resp = post(t, url+"/api/generate", []byte(`{"model":"llama3.1:8b","stream":false,"prompt":"hi"}`),
			map[string]string{"X-Ctxproxy-Backend": name})
		if got := resp.Header.Get("X-Ctxproxy-Backend"); resp.StatusCode != http.StatusOK || got != name {
			t.Fatalf("generate pinned to %s: %d on %q", name, resp.StatusCode, got)
		}
	}
	resp := post(t, url+"/api/chat", []byte(`{"model":"llama3.1:8b","messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"X-Ctxproxy-Backend": "nowhere"})
	if data, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), `no server is named \"nowhere\"`) {
		t.Fatalf("unknown server: %d %s", resp.StatusCode, data)
	}
}

func TestFleetAllGone(t *testing.T) {
	fakes, ss := servers(t, 2)
	deps, _, _ := fileStore(t)
	url := fleetProxy(t, ss, deps)
	for _, f := range fakes {
		f.Close()
	}
	resp := post(t, url+"/api/chat", []byte(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`), nil)
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(data), "could not reach the backend at "+fakes[0].URL) &&
		!strings.Contains(string(data), "could not reach the backend at "+fakes[1].URL) {
		t.Fatalf("every server gone: %d %s", resp.StatusCode, data)
	}
}

// TestFleetSpreadsNewSessions: twelve sessions whose first turns arrive
// at once go four to each of three servers.
func TestFleetSpreadsNewSessions(t *testing.T) {
	fakes, ss := servers(t, 3)
	hold := make(chan struct{})
	for _, f := range fakes {
		f.SetOptions(fakebackend.Options{Hold: hold})
	}
	deps, _, _ := fileStore(t)
	url := fleetProxy(t, ss, deps)
	var wg sync.WaitGroup
	got := make([]string, 12)
	for i := range 12 {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":"llama3.1:8b","messages":[{"role":"user","content":"session %d"}]}`, i)
			resp := post(t, url+"/api/chat", []byte(body), map[string]string{"X-Session-ID": fmt.Sprint("new", i)})
			got[i] = resp.Header.Get("X-Ctxproxy-Backend")
			io.Copy(io.Discard, resp.Body)
		})
	}
	for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); time.Sleep(5 * time.Millisecond) {
		n := 0
		for _, s := range ss {
			n += s.InFlight()
		}
		if n == 12 {
			break
		}
	}
	for _, s := range ss {
		if s.InFlight() != 4 {
			t.Errorf("server %s has %d of 12 new sessions in flight", s.Name, s.InFlight())
		}
	}
	close(hold)
	wg.Wait()
	count := map[string]int{}
	for _, g := range got {
		count[g]++
	}
	if count["a"] != 4 || count["b"] != 4 || count["c"] != 4 {
		t.Fatalf("twelve new sessions: %v", count)
	}
}
