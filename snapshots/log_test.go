package snapshots

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/redistest"
)

// logStores runs fn against each kind of store, opened by open (calling it
// again is a restart on the same data).
func logStores(t *testing.T, fn func(t *testing.T, open func(cfg Config) Store)) {
	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		fn(t, func(cfg Config) Store { return newFileStore(t, dir, cfg) })
	})
	t.Run("redis", func(t *testing.T) {
		addr := startRedis(t)
		prefix := fmt.Sprintf("log%d:", prefixes.Add(1))
		fn(t, func(cfg Config) Store { return newRedisStore(t, addr, prefix, cfg) })
	})
	t.Run("redis cluster", func(t *testing.T) {
		addrs := redistest.StartCluster(t)
		prefix := fmt.Sprintf("log%d:", prefixes.Add(1))
		fn(t, func(cfg Config) Store { return newClusterStore(t, addrs, prefix, cfg) })
	})
}

// A turn writes the turn: the bytes stored for turn 500 are those of the
// turn and the changed fields, not of the 500 messages before it.
func TestLogTurnWritesTheTurn(t *testing.T) {
	logStores(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		mustUpdate(t, st, "long", func(s *Session) { s.Messages = conversation(500, 600, "long") })
		before := st.Counters().WriteBytes
		turn := conversation(2, 600, "turn")
		mustUpdate(t, st, "long", func(s *Session) {
			s.Messages = append(s.Messages, turn...)
			s.Stats.Requests++
		})
		if n := st.Counters().WriteBytes - before; n > 4000 {
			t.Errorf("a turn of 1.2 KB of text wrote %d bytes to a 300 KB session", n)
		}
		// A client that resends its history with the last reply in
		// another form rewrites that reply, not the history.
		before = st.Counters().WriteBytes
		mustUpdate(t, st, "long", func(s *Session) {
			s.Messages[len(s.Messages)-1] = msg("assistant", "the reply, as the client keeps it")
			s.Messages = append(s.Messages, msg("user", "next"))
		})
		if n := st.Counters().WriteBytes - before; n > 2000 {
			t.Errorf("replacing the last reply wrote %d bytes", n)
		}
		got := mustGet(t, open(Config{}), "long")
		if n := len(got.Messages); n != 503 || got.Messages[501].Content != "the reply, as the client keeps it" ||
			got.Messages[502].Content != "next" || got.Stats.Requests != 1 {
			t.Errorf("after a restart: %d messages, requests %d", n, got.Stats.Requests)
		}
	})
}

// Every kind of change replays to what was written: turns appended,
// history replaced, metadata set and removed, stats, summaries, model.
func TestLogReplaysEveryChange(t *testing.T) {
	logStores(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		steps := []func(s *Session){
			func(s *Session) { *s = *fullSession("all") },
			func(s *Session) { s.Messages = append(s.Messages, msg("user", "appended")) },
			func(s *Session) { s.Metadata = map[string]any{"phase": "two"} },
			func(s *Session) { s.Metadata = nil },
			func(s *Session) { s.Stats.Tokens, s.Stats.Usage = 99, 0.5 },
			func(s *Session) {
				s.Summaries = append(s.Summaries, Summary{Key: "k2", Covers: 2, Text: "more", Created: t0})
			},
			func(s *Session) { s.Summaries = nil },
			func(s *Session) { s.Model = "another" },
			func(s *Session) { s.Messages[2].Importance = ptr(0.1) }, // an edit inside the history
			func(s *Session) { s.Messages = conversation(2, 30, "restored") },
			func(s *Session) { s.clear() },
			func(s *Session) { s.Messages = conversation(3, 30, "after clear") },
		}
		for i, step := range steps {
			mustUpdate(t, st, "all", step)
			want := mustGet(t, st, "all")
			if d := diff(want, mustGet(t, open(Config{}), "all")); d != "" {
				t.Errorf("step %d: replayed (-cached +replayed):\n%s", i, d)
			}
		}
	})
}

// A log whose appended records outweigh its last whole copy is compacted
// in the background into one replace record; nothing changes for readers.
func TestLogCompaction(t *testing.T) {
	dir := t.TempDir()
	st := newFileStore(t, dir, Config{})
	mustUpdate(t, st, "c", func(s *Session) { s.Messages = conversation(10, 200, "c") })
	path := filepath.Join(dir, sessionsDir, key("c")+logExt)
	for i := range 150 {
		mustUpdate(t, st, "c", func(s *Session) {
			s.Messages = append(s.Messages, conversation(2, 600, fmt.Sprint("turn", i))...)
		})
	}
	st.compactor.wait()
	want := mustGet(t, st, "c")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	records := 0
	for b := data[len(logMagic):]; len(b) > 0; records++ {
		p, n, state := nextFrame(b)
		if state != frameOK {
			t.Fatalf("record %d: state %d", records, state)
		}
		if records == 0 && p[0] != kindReplace {
			t.Errorf("a log starts with a %q record", p[0])
		}
		b = b[n:]
	}
	// Compaction keeps up: the log holds the last copy and the few
	// changes since, not a record for most of the 151 changes.
	if records > 20 {
		t.Errorf("%d records after 151 changes: compaction did not keep up", records)
	}
	e := st.cache.get(key("c"))
	if e == nil || e.needsCompaction() || e.size != int64(len(data)) {
		t.Errorf("cache entry after compaction: %+v, log %d bytes", e, len(data))
	}
	if d := diff(want, mustGet(t, newFileStore(t, dir, Config{}), "c")); d != "" {
		t.Errorf("after compaction and a restart (-before +after):\n%s", d)
	}
}

// The cache is bounded: sessions evicted from it are replayed from their
// logs, and nothing is lost.
func TestLogCacheBound(t *testing.T) {
	logStores(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		small := newStateCache(20 << 10)
		switch st := st.(type) {
		case *FileStore:
			st.cache = small
		case *RedisStore:
			st.cache = small
		}
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				id := fmt.Sprint("s", i)
				for j := range 10 {
					if err := st.Update(ctx, id, func(s *Session) error {
						s.Messages = append(s.Messages, msg("user", fmt.Sprint(j)))
						return nil
					}); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if small.bytes > small.max || small.lru.Len() >= 20 {
			t.Errorf("cache holds %d bytes in %d sessions, bound %d", small.bytes, small.lru.Len(), small.max)
		}
		for i := range 20 {
			if s := mustGet(t, st, fmt.Sprint("s", i)); len(s.Messages) != 10 || s.Messages[9].Content != "9" {
				t.Errorf("session s%d: %d messages", i, len(s.Messages))
			}
		}
	})
}

// Observe hears of every operation, with the store's kind and the error.
func TestObserve(t *testing.T) {
	logStores(t, func(t *testing.T, open func(Config) Store) {
		var mu sync.Mutex
		seen := map[string]int{}
		cfg := Config{Observe: func(store, op string, err error) {
			mu.Lock()
			defer mu.Unlock()
			result := "ok"
			switch {
			case errors.Is(err, ErrNotFound):
				result = "not found"
			case err != nil:
				result = "error"
			}
			seen[store+" "+op+" "+result]++
		}}
		st := open(cfg)
		kind := StoreFile
		if _, ok := st.(*RedisStore); ok {
			kind = StoreRedis
		}
		st.Get(ctx, "o")
		mustUpdate(t, st, "o", func(s *Session) { s.Messages = conversation(2, 10, "o") })
		st.Update(ctx, "o", func(*Session) error { return errors.New("refused") })
		info, _ := TakeSnapshot(ctx, st, "o", ReasonManual)
		st.ListSnapshots(ctx, "o")
		st.LoadSnapshot(ctx, "o", info.ID)
		st.DeleteSnapshot(ctx, "o", info.ID)
		st.Clear(ctx, "o")
		st.List(ctx)
		st.Delete(ctx, "o")
		want := map[string]int{
			OpGet + " not found": 1, OpGet + " ok": 1, OpUpdate + " ok": 1, OpUpdate + " error": 1,
			OpSaveSnapshot + " ok": 1, OpListSnapshots + " ok": 1, OpLoadSnapshot + " ok": 1,
			OpDeleteSnapshot + " ok": 1, OpClear + " ok": 1, OpList + " ok": 1, OpDelete + " ok": 1,
		}
		mu.Lock()
		defer mu.Unlock()
		for k, n := range want {
			if seen[kind+" "+k] != n {
				t.Errorf("%s %s observed %d times, want %d (all: %v)", kind, k, seen[kind+" "+k], n, seen)
			}
		}
	})
}

// RedisStore compacts a session's list the same way, in a transaction;
// another replica reads the same state from the compacted list.
func TestLogCompactionRedis(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "redis", true: "redis cluster"}[cluster], func(t *testing.T) {
			var open func() *RedisStore
			if cluster {
				addrs := redistest.StartCluster(t)
				open = func() *RedisStore { return newClusterStore(t, addrs, "compact:", Config{}) }
			} else {
				addr := startRedis(t)
				open = func() *RedisStore { return newRedisStore(t, addr, "compact:", Config{}) }
			}
			st := open()
			mustUpdate(t, st, "c", func(s *Session) { s.Messages = conversation(10, 200, "c") })
			for i := range 150 {
				mustUpdate(t, st, "c", func(s *Session) {
					s.Messages = append(s.Messages, conversation(2, 600, fmt.Sprint("turn", i))...)
				})
			}
			st.compactor.wait()
			n, err := st.rdb.LLen(ctx, st.keys.log(key("c"))).Result()
			if err != nil || n > 20 {
				t.Errorf("%d records after 151 changes (%v): compaction did not keep up", n, err)
			}
			want := mustGet(t, st, "c")
			if d := diff(want, mustGet(t, open(), "c")); d != "" {
				t.Errorf("another replica after compaction (-want +got):\n%s", d)
			}
			if list, err := open().List(ctx); err != nil || len(list) != 1 || list[0].Messages != len(want.Messages) {
				t.Errorf("listed after compaction: %+v, %v", list, err)
			}
		})
	}
}
