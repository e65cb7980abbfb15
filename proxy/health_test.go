package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// TestReadyzCorruptRecords: a corrupt record the store set aside keeps
// ctxproxy ready (the session still loads), and readyz says how many and
// where the copies are; /metrics counts it.
func TestReadyzCorruptRecords(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	dir := t.TempDir()
	open := func() *snapshots.FileStore {
		st, err := snapshots.NewFileStore(snapshots.Config{Dir: dir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	// get asks a server on store for path.
	serve := func(store sessions.Store) func(path string) (int, string) {
		trimmer, _ := rewrite.NewTrimmer(rewrite.Config{}, nil)
		srv, err := New(Config{Backend: be.URL}, Deps{Tokens: budget.NewRegistry(budget.Config{}, nil),
			Trimmer: trimmer, Sizer: gpu.NewSizer(gpu.Config{}), Store: store}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv)
		t.Cleanup(ts.Close)
		return func(path string) (int, string) {
			t.Helper()
			resp, err := http.Get(ts.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
	}

	// A session of a few turns.
	store := open()
	ctx := context.Background()
	sum := sha256.Sum256([]byte("s"))
	path := filepath.Join(dir, "sessions", hex.EncodeToString(sum[:])+".log")
	var ends []int64
	for i := range 4 {
		err := store.Update(ctx, "s", func(s *snapshots.Session) error {
			s.Messages = append(s.Messages, snapshots.Message{Role: "user", Content: fmt.Sprintf("turn %d", i)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(path)
		ends = append(ends, fi.Size())
	}
	if code, body := serve(store)("/ctxproxy/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("readyz before: %d %q", code, body)
	}
	store.Close()

	// Its second record's length field damaged: the store skips the
	// record and keeps the turns after it.
	data, _ := os.ReadFile(path)
	binary.LittleEndian.PutUint32(data[ends[0]:], uint32(len(data)))
	os.WriteFile(path, data, 0o600)
	store = open()
	if s, err := store.Get(ctx, "s"); err != nil || len(s.Messages) != 3 {
		t.Fatalf("Get after the damage: %v, %+v", err, s)
	}
	get := serve(store)
	code, body := get("/ctxproxy/readyz")
	want := "ready\n1 corrupt session record set aside since start; copies in " + dir + "\n"
	if code != 200 || body != want {
		t.Errorf("readyz after a corrupt record: %d %q, want 200 %q", code, body, want)
	}
	_, metrics := get("/metrics")
	for _, m := range []string{"ctxproxy_store_corrupt_records_total 1\n", "ctxproxy_store_corrupt_records_skipped_total 1\n"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics does not say %q", m)
		}
	}
}
