//go:build e2e

package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/fleetbench"
)

// TestRealOllama_Backends is the short version of scripts/backends.sh:
// three real Ollama servers behind one ctxproxy (backends:, routing
// sessions), three chat sessions of six turns sent at once as a chat UI
// sends them. Every answer is 200, each session's turns go to one server
// (X-Ctxproxy-Backend), the sessions are spread over more than one, and
// the merged /api/tags lists the model once. Then the server of the
// first session is SIGKILLed, and that session's next turns are answered
// 200 by another server, the first saying it moved (X-Ctxproxy-Backend:
// "b; moved-from=a"). No prompt time is asserted (the harness
// measures it).
func TestRealOllama_Backends(t *testing.T) {
	need(t)
	script, err := findStartScript()
	if err != nil {
		t.Fatal(err)
	}
	servers := make([]*fleetbench.Ollama, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, name := range []string{"a", "b", "c"} {
		wg.Go(func() {
			servers[i], errs[i] = fleetbench.StartOllama(t.Context(), script, name, filepath.Join(t.TempDir(), name),
				[]string{"OLLAMA_NUM_PARALLEL=2"}, prefixWriter("realollama "+name+": ", os.Stderr))
		})
	}
	wg.Wait()
	for _, s := range servers {
		if s != nil && s.PGID > 1 {
			suite.watchdog.add(s.PGID)
			t.Cleanup(func() { s.Stop(); suite.watchdog.remove(s.PGID) })
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	p := startCtxproxy(t, servers[0].URL, fleetbench.Config(servers, "sessions", "tiny", 4096, ""))

	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := fleetbench.GetJSON(p.url+"/api/tags", &tags); err != nil {
		t.Fatal(err)
	}
	if n := countNamed(tags.Models, "tiny:latest"); n != 1 {
		t.Errorf("/api/tags through ctxproxy lists tiny:latest %d times, want once: %+v", n, tags.Models)
	}

	const pause, turns = 6, 8
	killed := ""
	done, err := fleetbench.Run(t.Context(), fleetbench.Plan{
		URLs: []string{p.url}, Model: "tiny", Sessions: 3, Concurrency: 3, Turns: turns,
		UserChars: 100, Seed: 1, ID: "backends", Pause: pause,
		AtPause: func(done []fleetbench.Turn) {
			for _, turn := range done {
				if turn.Session == 1 && turn.Turn == pause {
					killed = turn.Backend
				}
			}
			for _, s := range servers {
				if s.Name == killed {
					s.Kill()
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var before, after []fleetbench.Turn
	for _, turn := range done {
		t.Logf("session %d turn %d: HTTP %d, server %q, prompt %d tokens in %s, first byte after %s %s",
			turn.Session, turn.Turn, turn.Status, turn.Backend, turn.PromptCount, turn.PromptEval, turn.TTFB, turn.Err)
		if !turn.OK() {
			t.Errorf("session %d turn %d: %s", turn.Session, turn.Turn, turn.Err)
		}
		if turn.Turn <= pause {
			before = append(before, turn)
		} else {
			after = append(after, turn)
		}
	}
	used := map[string]bool{}
	for session, list := range fleetbench.ServersOf(before) {
		if len(list) != 1 || list[0] == "" {
			t.Errorf("session %d: its turns went to servers %q, want one named in X-Ctxproxy-Backend", session, list)
		}
		for _, s := range list {
			used[s] = true
		}
	}
	if len(used) < 2 {
		t.Errorf("the three sessions went to %d server(s), want them spread over more than one", len(used))
	}
	if killed == "" {
		t.Fatal("session 1 named no server at its turn 6: nothing to kill")
	}
	moved := fleetbench.ServersOf(after)[1]
	if len(moved) != 1 || moved[0] == "" || moved[0] == killed {
		t.Errorf("session 1 after its server %s was killed: turns went to %q, want one other server", killed, moved)
	}
	for _, turn := range after {
		if turn.Session == 1 && turn.Turn == pause+1 && turn.MovedFrom != killed {
			t.Errorf("session 1 turn %d: X-Ctxproxy-Backend says moved-from=%q, want %q", turn.Turn, turn.MovedFrom, killed)
		}
	}
}

// countNamed counts the models named name.
func countNamed(models []struct {
	Name string `json:"name"`
}, name string) int {
	n := 0
	for _, m := range models {
		if m.Name == name {
			n++
		}
	}
	return n
}
