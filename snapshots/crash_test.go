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
	"strings"
	"testing"
	"time"
)

// crashDirEnv makes the test binary a writer for the kill -9 test.
const crashDirEnv = "CTXPROXY_SNAPSHOTS_CRASH_DIR"

// crashIDs are the sessions the crash writer rewrites in turn.
var crashIDs = []string{"alpha", "beta/../gamma", "δ session", "ε"}

// crashMessages is version v of session id's conversation: 16 messages of
// 1 KB of hex, which compresses poorly, so that each record is a few
// writes' worth of bytes and a kill lands inside one often.
func crashMessages(id string, v int) []Message {
	msgs := make([]Message, 16)
	for j := range msgs {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", id, v, j))
		text := strings.Repeat(hex.EncodeToString(sum[:]), 16)
		msgs[j] = msg("user", fmt.Sprintf("v%d %s", v, text))
	}
	return msgs
}

func version(s *Session) int {
	v, _ := s.Metadata["version"].(float64)
	return int(v)
}

// TestHelperWriter is not a test: run by the kill -9 test as a child
// process, it rewrites sessions and saves snapshots until it is killed.
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("child process of TestSeed004_R4_2_AtomicWriteSurvivesKill9")
	}
	st, err := NewFileStore(Config{Dir: dir, MaxCount: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	for i := 0; ; i++ {
		id := crashIDs[i%len(crashIDs)]
		err := st.Update(ctx, id, func(s *Session) error {
			v := version(s) + 1
			s.Metadata = map[string]any{"version": float64(v)}
			s.Messages = crashMessages(id, v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := TakeSnapshot(ctx, st, id, ReasonAuto); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Seed 004 4.2 and 10.2: atomic writes. A process writing sessions and
// snapshots in a loop is killed with SIGKILL at random moments, hundreds
// of times; after each kill the store must reopen with every file whole:
// the old version or the new one, never a mix, never corrupt.
func TestSeed004_R4_2_AtomicWriteSurvivesKill9(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 30
	}
	dir := t.TempDir()
	seen := map[string]int{} // newest version seen per session
	torn := 0                // kills that left a half-written temporary file
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
		if lines.Err() != nil || len(early) > 0 && !strings.Contains(strings.Join(early, "\n"), "ready") && lines.Text() != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the writer did not start:\n%s", round, strings.Join(early, "\n"))
		}
		// Up to 8 ms into the writes; on a loaded machine (CI beside
		// other work) a writer may not reach its first write that soon,
		// so the window widens while no kill has landed in one.
		window := 8 * time.Millisecond
		if torn == 0 && round >= rounds/4 {
			window = 60 * time.Millisecond
		}
		time.Sleep(time.Duration(rand.Int64N(int64(window))))
		cmd.Process.Kill() // SIGKILL
		cmd.Wait()

		torn += countTemp(dir)
		checkCrashDir(t, round, dir, seen)
		if t.Failed() {
			return
		}
	}
	total := 0
	for _, v := range seen {
		total += v
	}
	t.Logf("%d kills, %d of them during a write; %d session versions written", rounds, torn, total)
	if torn == 0 {
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

// checkCrashDir reopens the store after a kill and checks every record.
func checkCrashDir(t *testing.T, round int, dir string, seen map[string]int) {
	t.Helper()
	st, err := NewFileStore(Config{Dir: dir, MaxCount: 3}, nil)
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	if c := st.Counters(); c.Corrupt != 0 {
		t.Fatalf("round %d: %d corrupt files after a kill", round, c.Corrupt)
	}
	// Compared by hand: cmp walks byte slices one reflected byte at a
	// time, which costs more than the rest of the round.
	consistent := func(id, what string, v int, msgs []Message) {
		want := crashMessages(id, v)
		ok := len(msgs) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = msgs[i].Content == want[i].Content && bytes.Equal(msgs[i].Raw, want[i].Raw)
		}
		if !ok {
			t.Errorf("round %d: %s %q, version %d, is not that version", round, what, id, v)
		}
	}
	for _, id := range crashIDs {
		s, err := st.Get(ctx, id)
		if errors.Is(err, ErrNotFound) && seen[id] == 0 {
			continue
		}
		if err != nil {
			t.Fatalf("round %d: session %q: %v", round, id, err)
		}
		v := version(s)
		if v < seen[id] {
			t.Errorf("round %d: session %q went back from version %d to %d", round, id, seen[id], v)
		}
		seen[id] = v
		consistent(id, "session", v, s.Messages)
		snaps, _ := st.ListSnapshots(ctx, id)
		if len(snaps) > 3 {
			t.Errorf("round %d: %d snapshots of %q, max_count is 3", round, len(snaps), id)
		}
		for _, info := range snaps {
			snap, err := st.LoadSnapshot(ctx, id, info.ID)
			if err != nil {
				t.Fatalf("round %d: snapshot %s of %q: %v", round, info.ID, id, err)
			}
			consistent(id, "snapshot "+info.ID+" of", version(&Session{Metadata: snap.Metadata}), snap.Messages)
		}
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && (strings.HasSuffix(path, corruptExt) || strings.HasPrefix(d.Name(), tempPrefix)) {
			t.Errorf("round %d: %s left after reopening", round, path)
		}
		return nil
	})
}
