package snapshots

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crashDirEnv makes the test binary a writer for the kill -9 test.
const crashDirEnv = "CTXPROXY_SNAPSHOTS_CRASH_DIR"

// killRoundsEnv sets the number of kills (scripts/killtest.sh runs 1,000).
const killRoundsEnv = "CTXPROXY_KILL_ROUNDS"

// crashIDs are the sessions the crash writer changes in turn.
var crashIDs = []string{"alpha", "beta/../gamma", "δ session", "ε"}

// crashMessages is version v of session id's conversation: 16 messages of
// 1 KB of hex, which compresses poorly, so that each record is a few
// writes' worth of bytes and a kill lands inside one often.
func crashMessages(id string, v int) []Message {
	msgs := make([]Message, 16)
	for j := range msgs {
		msgs[j] = msg("user", fmt.Sprintf("v%d %s", v, crashText(id, v, j, 16)))
	}
	return msgs
}

// crashTurn is turn n appended to version v: two messages of 8 KB, so
// that an append record spans several pages and a kill can cut it.
func crashTurn(id string, v, n int) []Message {
	return []Message{
		msg("user", fmt.Sprintf("v%d turn %d %s", v, n, crashText(id, v, 100+2*n, 128))),
		msg("assistant", fmt.Sprintf("v%d reply %d %s", v, n, crashText(id, v, 101+2*n, 128))),
	}
}

func crashText(id string, v, j, repeat int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", id, v, j))
	return strings.Repeat(hex.EncodeToString(sum[:]), repeat)
}

// crashState is what a crash session says it holds: version v of the
// conversation and n turns appended to it.
type crashState struct{ v, n int }

func (a crashState) less(b crashState) bool { return a.v < b.v || a.v == b.v && a.n < b.n }

func stateOf(md map[string]any) crashState {
	v, _ := md["version"].(float64)
	n, _ := md["turns"].(float64)
	return crashState{int(v), int(n)}
}

// crashTurns is how many turns are appended to a version before the
// writer replaces the conversation with the next version.
const crashTurns = 6

// TestHelperWriter is not a test: run by the kill -9 test as a child
// process, it appends turns, replaces conversations and saves snapshots
// until it is killed, and prints "ack I V N" once Update has returned for
// state V, N of session crashIDs[I].
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("child process of TestAtomicWriteSurvivesKill9")
	}
	st, err := NewFileStore(Config{Dir: dir, MaxCount: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout)
	out.WriteString("ready\n")
	out.Flush()
	for i := 0; ; i++ {
		id := crashIDs[i%len(crashIDs)]
		var now crashState
		err := st.Update(ctx, id, func(s *Session) error {
			now = stateOf(s.Metadata)
			if now.v == 0 || now.n == crashTurns {
				now = crashState{now.v + 1, 0}
				s.Messages = crashMessages(id, now.v)
			} else {
				now.n++
				s.Messages = append(s.Messages, crashTurn(id, now.v, now.n)...)
			}
			s.Metadata = map[string]any{"version": float64(now.v), "turns": float64(now.n)}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(out, "ack %d %d %d\n", i%len(crashIDs), now.v, now.n)
		out.Flush()
		if i%5 == 0 {
			if _, err := TakeSnapshot(ctx, st, id, ReasonAuto); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Writes are atomic: a process appending turns, replacing conversations
// and saving snapshots in a loop is killed with SIGKILL at random moments;
// after each kill the store must reopen with every session and snapshot
// whole and none corrupt, holding at least every change the writer was
// told was stored: a kill loses at most the change being written.
func TestAtomicWriteSurvivesKill9(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 30
	}
	if n, err := strconv.Atoi(os.Getenv(killRoundsEnv)); err == nil && n > 0 {
		rounds = n
	}
	dir := t.TempDir()
	acked := map[string]crashState{} // newest state acknowledged per session
	seen := map[string]crashState{}  // newest state found stored
	temps, torn := 0, 0              // kills that left a temporary file, a torn log
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		var early []string
		for lines.Scan() && lines.Text() != "ready" {
			early = append(early, lines.Text())
		}
		if lines.Err() != nil || lines.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the writer did not start:\n%s", round, strings.Join(early, "\n"))
		}
		acks := make(chan map[string]crashState)
		go func() {
			m := map[string]crashState{}
			for lines.Scan() {
				var i int
				var s crashState
				if _, err := fmt.Sscanf(lines.Text(), "ack %d %d %d", &i, &s.v, &s.n); err == nil {
					m[crashIDs[i]] = s
				}
			}
			acks <- m
		}()
		// Up to 30 ms into the writes; on a loaded machine (CI beside
		// other work) a writer may not reach its first write that soon,
		// so the window widens while no kill has landed in one.
		window := 30 * time.Millisecond
		if temps+torn == 0 && round >= rounds/4 {
			window = 120 * time.Millisecond
		}
		time.Sleep(time.Duration(rand.Int64N(int64(window))))
		cmd.Process.Kill() // SIGKILL
		for id, s := range <-acks {
			acked[id] = s
		}
		cmd.Wait()

		temps += countTemp(dir)
		torn += checkCrashDir(t, round, dir, acked, seen)
		if t.Failed() {
			return
		}
	}
	total := 0
	for _, s := range seen {
		total += s.v*(crashTurns+1) + s.n
	}
	t.Logf("%d kills: %d left a temporary file, %d a torn log tail; %d session changes stored", rounds, temps, torn, total)
	if temps+torn == 0 {
		t.Error("no kill landed during a write: the test tested nothing")
	}
}

// countTemp counts the temporary files a killed writer left.
func countTemp(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tempPrefix) {
			n++
		}
		return nil
	})
	return n
}

// checkCrashDir reopens the store after a kill, checks every session and
// snapshot, and returns how many torn log tails the reopening cut.
func checkCrashDir(t *testing.T, round int, dir string, acked, seen map[string]crashState) int {
	t.Helper()
	st, err := NewFileStore(Config{Dir: dir, MaxCount: 3}, nil)
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer st.Close()
	if c := st.Counters(); c.Corrupt != 0 {
		t.Fatalf("round %d: %d corrupt records after a kill", round, c.Corrupt)
	}
	// Compared by hand: cmp walks byte slices one reflected byte at a
	// time, which costs more than the rest of the round.
	consistent := func(id, what string, s crashState, msgs []Message) {
		want := crashMessages(id, s.v)
		for n := 1; n <= s.n; n++ {
			want = append(want, crashTurn(id, s.v, n)...)
		}
		ok := len(msgs) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = msgs[i].Content == want[i].Content && bytes.Equal(msgs[i].Raw, want[i].Raw)
		}
		if !ok {
			t.Errorf("round %d: %s %q, version %d turn %d, is not that state (%d messages)", round, what, id, s.v, s.n, len(msgs))
		}
	}
	for _, id := range crashIDs {
		s, err := st.Get(ctx, id)
		if errors.Is(err, ErrNotFound) && acked[id] == (crashState{}) {
			continue
		}
		if err != nil {
			t.Fatalf("round %d: session %q: %v", round, id, err)
		}
		now := stateOf(s.Metadata)
		if now.less(acked[id]) {
			t.Errorf("round %d: session %q holds %+v, but %+v was acknowledged", round, id, now, acked[id])
		}
		if now.less(seen[id]) {
			t.Errorf("round %d: session %q went back from %+v to %+v", round, id, seen[id], now)
		}
		seen[id] = now
		consistent(id, "session", now, s.Messages)
		snaps, _ := st.ListSnapshots(ctx, id)
		if len(snaps) > 3 {
			t.Errorf("round %d: %d snapshots of %q, max_count is 3", round, len(snaps), id)
		}
		for _, info := range snaps {
			snap, err := st.LoadSnapshot(ctx, id, info.ID)
			if err != nil {
				t.Fatalf("round %d: snapshot %s of %q: %v", round, info.ID, id, err)
			}
			consistent(id, "snapshot "+info.ID+" of", stateOf(snap.Metadata), snap.Messages)
		}
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && (strings.Contains(d.Name(), corruptExt) || strings.HasPrefix(d.Name(), tempPrefix)) {
			t.Errorf("round %d: %s left after reopening", round, path)
		}
		return nil
	})
	return int(st.Counters().Torn)
}
