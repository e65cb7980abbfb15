package snapshots

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// t0 is the tests' fixed clock start.
var t0 = time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC)

func ptr[T any](v T) *T { return &v }

// msg makes a message with a raw object as a client would send it.
func msg(role, content string) Message {
	raw, _ := json.Marshal(map[string]string{"role": role, "content": content})
	return Message{Role: role, Content: content, Raw: raw}
}

// conversation makes n alternating user/assistant messages of about size
// bytes each, tagged with tag so that versions differ.
func conversation(n, size int, tag string) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		text := fmt.Sprintf("%s message %d: ", tag, i)
		text += strings.Repeat("the quick brown fox jumps over the lazy dog <b>&</b> ", size/52+1)
		m := msg(role, text[:size])
		m.Timestamp = t0.Add(time.Duration(i) * time.Second)
		msgs[i] = m
	}
	return msgs
}

// cmpOpts compares stored values: empty and nil alike.
var cmpOpts = []cmp.Option{cmpopts.EquateEmpty()}

func diff(want, got any) string { return cmp.Diff(want, got, cmpOpts...) }

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got):\n%s", path, d)
	}
}

// newFileStore opens a file store in dir with cfg and a fixed clock that
// ticks one millisecond per call.
func newFileStore(t testing.TB, dir string, cfg Config) *FileStore {
	t.Helper()
	cfg.Dir = dir
	st, err := NewFileStore(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.now = ticker()
	t.Cleanup(func() { st.Close() })
	return st
}

// ticker returns a clock that starts at t0 and moves 1ms per call.
func ticker() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return t0.Add(time.Duration(n.Add(1)) * time.Millisecond) }
}

func isCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

// waitFor polls cond until it holds, for what happens in the background
// (a worker's write, the syncer's fsync): no fixed sleep to guess long
// enough. The few seconds it allows are a bound for a hung test, not a
// timing that is checked.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
