package fleet

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/ctxproxy/ctxproxy/backend"
)

// server returns a Node over an httptest server that lists models
// (with loaded among them loaded) once polled.
func server(t *testing.T, name string, models, loaded []string) *Node {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/version":
			w.Write([]byte(`{"version":"0.17.4"}`))
		case "/api/tags":
			w.Write([]byte(`{"models":[`))
			for i, m := range models {
				if i > 0 {
					w.Write([]byte(`,`))
				}
				w.Write([]byte(`{"name":"` + m + `","digest":"d"}`))
			}
			w.Write([]byte(`]}`))
		case "/api/ps":
			w.Write([]byte(`{"models":[`))
			for i, m := range loaded {
				if i > 0 {
					w.Write([]byte(`,`))
				}
				w.Write([]byte(`{"name":"` + m + `"}`))
			}
			w.Write([]byte(`]}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(ts.Close)
	u, _ := url.Parse(ts.URL)
	be := backend.New(backend.Config{URL: u, Client: ts.Client(), Prepare: backend.Preparation{Mode: backend.PrepareNone, List: true}})
	p := backend.NewPoller(be)
	p.Run(t.Context()) // interval 0: one poll
	return &Node{Name: name, URL: u, Backend: be}
}

func names(ss []*Node) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestOrder(t *testing.T) {
	a := server(t, "a", []string{"qwen3:latest", "llama3.1:8b"}, nil)
	b := server(t, "b", []string{"qwen3:latest"}, []string{"qwen3:latest"})
	c := server(t, "c", []string{"llama3.1:8b"}, nil)
	r, err := New([]*Node{a, b, c}, "")
	if err != nil {
		t.Fatal(err)
	}
	// A new session: the server with the model loaded first, those
	// without the model last.
	if got := names(r.Order("qwen3", "", "s1").Order); got[0] != "b" || got[1] != "a" || got[2] != "c" {
		t.Fatalf("new session: %v, want b a c", got)
	}
	// The previous server first while it is up.
	ch := r.Order("qwen3", "a", "s1")
	if got := names(ch.Order); got[0] != "a" || ch.Moved != "" {
		t.Fatalf("previous a: %v moved %q", got, ch.Moved)
	}
	// Down: it moves, and says why.
	a.Failed("dial refused")
	ch = r.Order("qwen3", "a", "s1")
	if got := names(ch.Order); got[0] != "b" || got[1] != "a" || ch.Moved != "a" || ch.Why != "it is down" {
		t.Fatalf("previous a down: %v moved %q why %q", got, ch.Moved, ch.Why)
	}
	a.Answered()
	// Saturated: it moves.
	a.MaxInFlight = 1
	a.Begin()
	if ch = r.Order("qwen3", "a", "s1"); ch.Order[0].Name != "b" || ch.Why != "it is at its in-flight cap" {
		t.Fatalf("saturated: %v %q", names(ch.Order), ch.Why)
	}
	a.End()
	if a.InFlight() != 0 {
		t.Fatalf("in flight %d after done", a.InFlight())
	}
	// A model no server lists: every server, in some order.
	if got := r.Order("nomodel", "", "s").Order; len(got) != 3 {
		t.Fatalf("unknown model: %v", names(got))
	}
	// The models filter.
	c.Models = []string{"qwen3*"}
	if !c.Serves("qwen3:8b") || c.Serves("llama3.1:8b") {
		t.Fatal("models filter")
	}
}

func TestOrderBalancesNewSessions(t *testing.T) {
	var ss []*Node
	for _, n := range []string{"a", "b", "c"} {
		ss = append(ss, server(t, n, []string{"m:latest"}, []string{"m:latest"}))
	}
	r, _ := New(ss, RouteSessions)
	count := map[string]int{}
	for i := range 12 {
		s := r.Order("m", "", "session"+string(rune('a'+i))).Order[0]
		s.Begin() // held: the next new session sees it
		count[s.Name]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if count[n] != 4 {
			t.Fatalf("12 sessions over 3 servers: %v", count)
		}
	}
}

func TestRoundRobin(t *testing.T) {
	var ss []*Node
	for _, n := range []string{"a", "b", "c"} {
		ss = append(ss, server(t, n, []string{"m:latest"}, nil))
	}
	r, _ := New(ss, RouteRoundRobin)
	var got []string
	for range 6 {
		got = append(got, r.Order("m", "a", "s").Order[0].Name)
	}
	if want := []string{"a", "b", "c", "a", "b", "c"}; !equal(got, want) {
		t.Fatalf("round robin: %v", got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNew(t *testing.T) {
	if _, err := New(nil, ""); err == nil {
		t.Fatal("no server accepted")
	}
	a := &Node{Name: "a"}
	if _, err := New([]*Node{a, {Name: "a"}}, ""); err == nil {
		t.Fatal("two servers named alike accepted")
	}
	if _, err := New([]*Node{a}, "random"); err == nil {
		t.Fatal("unknown routing accepted")
	}
	r, _ := New([]*Node{a}, "")
	if ch := r.Order("m", "", ""); len(ch.Order) != 1 || r.Several() {
		t.Fatal("one server")
	}
}

func TestTake(t *testing.T) {
	a := server(t, "a", []string{"m:latest"}, nil)
	b := server(t, "b", []string{"m:latest"}, nil)
	r, _ := New([]*Node{a, b}, "")
	ch := r.Take("m", "", "k", "b")
	if ch.Order[0] != b || b.InFlight() != 1 || a.InFlight() != 0 {
		t.Fatalf("named b: %v, in flight a %d b %d", names(ch.Order), a.InFlight(), b.InFlight())
	}
	if ch := r.Take("m", "", "k", "nowhere"); ch.Order != nil {
		t.Fatalf("unknown name: %v", names(ch.Order))
	}
	// The next new session goes to the server with fewer in flight.
	if ch := r.Take("m", "", "k", ""); ch.Order[0] != a {
		t.Fatalf("after b took one: %v", names(ch.Order))
	}
}

// TestOrderLoadedFirstButNotBuried: new sessions go to the server with
// the model loaded until it has two more in flight than one without.
func TestOrderLoadedFirstButNotBuried(t *testing.T) {
	a := server(t, "a", []string{"m:latest"}, []string{"m:latest"})
	b := server(t, "b", []string{"m:latest"}, nil)
	r, _ := New([]*Node{a, b}, "")
	var got []string
	for i := range 4 {
		ch := r.Take("m", "", fmt.Sprint("s", i), "")
		got = append(got, ch.Order[0].Name)
	}
	if want := []string{"a", "a", "a", "b"}; !equal(got, want) {
		t.Fatalf("new sessions: %v, want %v", got, want)
	}
}
