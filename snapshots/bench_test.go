package snapshots

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/redistest"
)

// benchSession is a 100-message session of chat-sized messages (about 600
// bytes of text each, 60 KB of conversation), in words drawn at random so
// that it compresses about as well as real chat text.
func benchSession(id string) *Session {
	s := fullSession(id)
	s.Messages = conversation(100, 600, "bench")
	r := rand.New(rand.NewPCG(1, 2))
	for i := range s.Messages {
		var text strings.Builder
		for text.Len() < 600 {
			text.WriteString(benchWords[r.IntN(len(benchWords))])
			text.WriteByte(" \n.,"[r.IntN(20)%4])
		}
		s.Messages[i] = msg(s.Messages[i].Role, text.String())
		s.Messages[i].Timestamp = t0
	}
	return s
}

var benchWords = strings.Fields(`the of and to in is you that it for are with on as this be at have
or from not by but what all were when we there can an your which their said if do will each about how
up out them then she many some so these would other into has more her two like him see time could no
make than first been its who now people my made over did down only way find use may water long little
very after words called just where most know get through back much before go good new write our used me
man too any day same right look think also around another came come work three word must because does
part even place well such here take why things help put years different away again off went old number
func return err nil string int struct package import type var const range defer go select chan map make
error context request response header token tokens model session snapshot window limit usage summary
{ } ( ) [ ] := == != <= >= && || ; // # * - 1 2 3 10 42 100 1024 4096 8192 http://localhost:11434`)

// benchStores runs fn against each kind of store (Redis, and a Redis
// Cluster of three primaries, when installed).
func benchStores(b *testing.B, fn func(b *testing.B, st Store)) {
	b.Run("file", func(b *testing.B) { fn(b, newFileStore(b, b.TempDir(), Config{MaxCount: 1 << 30})) })
	b.Run("redis", func(b *testing.B) {
		addr := startRedis(b)
		fn(b, newRedisStore(b, addr, "bench:", Config{MaxCount: 1 << 30}))
	})
	b.Run("redis cluster", func(b *testing.B) {
		addrs := redistest.StartCluster(b)
		fn(b, newClusterStore(b, addrs, "bench:", Config{MaxCount: 1 << 30}))
	})
}

// Update of a 100-message session: read, decode, change, encode, write
// (the file store fsyncs once a second, in the background, by default).
func BenchmarkUpdate100(b *testing.B) {
	benchStores(b, func(b *testing.B, st Store) {
		s := benchSession("bench")
		mustUpdate(b, st, "bench", func(x *Session) { *x = *s.Clone() })
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if err := st.Update(ctx, "bench", incr); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(st.Counters().WriteBytes)/float64(st.Counters().Writes), "B/record")
	})
}

// Get of a 100-message session.
func BenchmarkGet100(b *testing.B) {
	benchStores(b, func(b *testing.B, st Store) {
		s := benchSession("bench")
		mustUpdate(b, st, "bench", func(x *Session) { *x = *s.Clone() })
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := st.Get(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// SaveSnapshot of a 100-message conversation.
func BenchmarkSaveSnapshot(b *testing.B) {
	benchStores(b, func(b *testing.B, st Store) {
		snap := NewSnapshot(benchSession("bench"), ReasonAuto)
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := st.SaveSnapshot(ctx, snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// List with 1000 sessions.
func BenchmarkList1000(b *testing.B) {
	benchStores(b, func(b *testing.B, st Store) {
		for i := range 1000 {
			id := fmt.Sprintf("session-%d", i)
			mustUpdate(b, st, id, func(s *Session) { s.Messages = conversation(4, 50, id) })
		}
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			list, err := st.List(ctx)
			if err != nil || len(list) != 1000 {
				b.Fatal(len(list), err)
			}
		}
	})
}

// The record codec alone, without the store: what a write costs in CPU.
func BenchmarkCodec100(b *testing.B) {
	s := benchSession("bench")
	data, _, _ := sessionRecord(s)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if _, _, err := sessionRecord(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := readSession(data, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The gzip level behind the choice of BestSpeed in format.go.
func BenchmarkGzipLevel(b *testing.B) {
	body, _ := encodeSession(benchSession("bench"))
	for _, level := range []int{gzip.BestSpeed, gzip.DefaultCompression} {
		b.Run(fmt.Sprint("level=", level), func(b *testing.B) {
			var out bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&out, level)
			b.SetBytes(int64(len(body)))
			defer reportCPU(b)()
			for b.Loop() {
				out.Reset()
				zw.Reset(&out)
				zw.Write(body)
				zw.Close()
			}
			b.ReportMetric(float64(out.Len()), "B/record")
		})
	}
}

// nopStore applies updates to a throwaway session and writes nothing.
type nopStore struct{ Store }

func (nopStore) Update(_ context.Context, id string, fn func(*Session) error) error {
	return fn(&Session{ID: id})
}

// What handing a session change to the Writer costs the request path.
func BenchmarkWriterUpdate(b *testing.B) {
	w := NewWriter(nopStore{}, Config{}, nil)
	defer w.Close(context.Background())
	msgs := benchSession("bench").Messages
	b.ReportAllocs()
	defer reportCPU(b)()
	i := 0
	for b.Loop() {
		i++
		w.Update(fmt.Sprint("session-", i%64), func(s *Session) error {
			s.Messages = msgs
			s.Stats.Requests++
			return nil
		})
	}
}

// Storing a turn of a session that holds 5 turns, and of one that holds
// 500 (1,000 messages of 600 bytes, 600 KB of text): the cost must not
// grow with the conversation. Each op stores a new last turn, as a client
// that resends its history with a new turn at the end does (the record
// keeps all but the last turn and carries the new one), so the session
// stays at its size however many ops run; compactions, which that makes
// due as appends do, run in the background and their CPU is in cpu-ns/op.
func BenchmarkAppendTurn(b *testing.B) {
	for _, turns := range []int{5, 500} {
		b.Run(fmt.Sprint("turn=", turns), func(b *testing.B) {
			benchStores(b, func(b *testing.B, st Store) { appendTurns(b, st, turns) })
		})
	}
}

// One turn's Update of a warm 5-turn session in the file store, its
// record fsynced before Update returns (fsync_interval -1s) or by the
// syncer once per interval (the default 1s): what a turn costs the
// writer's worker, and what the interval saves (docs/benchmarks.md).
func BenchmarkAppendTurnFsync(b *testing.B) {
	for _, every := range []time.Duration{-1, time.Second} {
		name := "fsync=each"
		if every > 0 {
			name = fmt.Sprint("fsync=", every)
		}
		b.Run(name, func(b *testing.B) {
			appendTurns(b, newFileStore(b, b.TempDir(), Config{MaxCount: 1 << 30, FsyncInterval: every}), 5)
		})
	}
}

// appendTurns stores a new last turn of a session of turns turns per op.
func appendTurns(b *testing.B, st Store, turns int) {
	base := benchSession("bench").Messages
	msgs := make([]Message, 0, 2*turns)
	for len(msgs) < 2*turns {
		msgs = append(msgs, base[len(msgs)%len(base)])
	}
	mustUpdate(b, st, "bench", func(s *Session) { s.Messages = msgs })
	b.ReportAllocs()
	defer reportCPU(b)()
	i := 0
	for b.Loop() {
		i++
		user, reply := base[i%len(base)], base[(i+1)%len(base)]
		user.Content = fmt.Sprint(i, user.Content)
		err := st.Update(ctx, "bench", func(s *Session) error {
			s.Messages = append(s.Messages[:len(s.Messages)-2], user, reply)
			s.Stats.Requests++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	c := st.Counters()
	b.ReportMetric(float64(c.WriteBytes)/float64(c.Writes), "B/record")
}

// turnRecord returns a warm 5-turn session and the payload of the append
// record that stores its next turn (two chat-sized messages with raw JSON,
// and the stats), as a store writes it.
func turnRecord(tb testing.TB) (old *Session, p []byte) {
	base := benchSession("bench")
	old = &Session{ID: "bench", Created: t0, Updated: t0, Stats: base.Stats}
	old.Messages = slices.Clone(base.Messages[:10])
	s := old.Clone()
	s.Messages = append(s.Messages, base.Messages[10:12]...)
	s.Stats.Requests++
	s.Updated = t0.Add(time.Second)
	p, err := encodeChange(old, s)
	if err != nil || p[0] != kindAppend {
		tb.Fatalf("%q: %v", p[:1], err)
	}
	return old, p
}

// Applying a turn's append record to the cached session, as a store does
// after writing it (and replay does per record): decoding the record.
func BenchmarkApplyAppend(b *testing.B) {
	old, p := turnRecord(b)
	s := old.Clone()
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := apply(s, "bench", p); err != nil {
			b.Fatal(err)
		}
	}
}

// Encoding a turn's append record: the messages, the delta and the
// listing entry.
func BenchmarkEncodeTurn(b *testing.B) {
	old, _ := turnRecord(b)
	base := benchSession("bench")
	s := old.Clone()
	s.Messages = append(s.Messages, base.Messages[10:12]...)
	s.Stats.Requests++
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := encodeChange(old, s); err != nil {
			b.Fatal(err)
		}
	}
}

// turnLog returns session id's log as a store writes it when a client
// sends its history with a new turn at the end, turns times, and nothing
// compacts it: a replace record of the first turn, then one append record
// per turn (two messages of base, in turn, and the stats).
func turnLog(tb testing.TB, id string, turns int, base []Message) []byte {
	log := []byte(logMagic)
	var old *Session
	for i := range turns {
		s := &Session{ID: id, Created: t0}
		if old != nil {
			s = old.Clone()
		}
		user, reply := base[(2*i)%len(base)], base[(2*i+1)%len(base)]
		user.Content = fmt.Sprint(i, user.Content)
		s.Messages = append(s.Messages, user, reply)
		s.Stats.Tokens += 300
		s.Stats.Requests++
		s.Updated = t0.Add(time.Duration(i) * time.Second)
		p, err := encodeChange(old, s)
		if err != nil {
			tb.Fatal(err)
		}
		log = append(log, frame(p)...)
		old = s
	}
	return log
}

// Reading a long session that is not cached (the first request after a
// start, or after the cache let it go): read its log and replay every
// record. 1,000 turns is 2,000 messages of 600 bytes of text, a 3 MB log
// of 1,000 records, more than a store leaves uncompacted.
func BenchmarkLoadLog(b *testing.B) {
	base := benchSession("bench").Messages
	for _, turns := range []int{100, 1000} {
		log := turnLog(b, "bench", turns, base)
		load := func(b *testing.B, drop func(), st Store) {
			b.ReportAllocs()
			b.SetBytes(int64(len(log)))
			defer reportCPU(b)()
			for b.Loop() {
				drop()
				s, err := st.Get(ctx, "bench")
				if err != nil || len(s.Messages) != 2*turns {
					b.Fatal(err)
				}
			}
		}
		b.Run(fmt.Sprint("turns=", turns), func(b *testing.B) {
			b.Run("file", func(b *testing.B) {
				dir := b.TempDir()
				if err := os.MkdirAll(filepath.Join(dir, sessionsDir), privateDir); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, sessionsDir, key("bench")+logExt), log, 0o600); err != nil {
					b.Fatal(err)
				}
				st := newFileStore(b, dir, Config{MaxCount: 1 << 30})
				load(b, func() { st.cache.drop(key("bench")) }, st)
			})
			b.Run("redis", func(b *testing.B) {
				st := newRedisStore(b, startRedis(b), "bench:", Config{MaxCount: 1 << 30})
				var recs []any
				for rest := log[len(logMagic):]; len(rest) > 0; {
					_, n, _ := nextFrame(rest)
					recs, rest = append(recs, rest[:n]), rest[n:]
				}
				if err := st.rdb.RPush(ctx, st.keys.log(key("bench")), recs...).Err(); err != nil {
					b.Fatal(err)
				}
				load(b, func() { st.cache.drop(key("bench")) }, st)
			})
		})
	}
}

// Opening a file store of many sessions: NewFileStore reads every log,
// checks every record's CRC and decodes the last listing entry of each,
// before the proxy serves. Each session holds 3 turns of short messages.
func BenchmarkOpenStore(b *testing.B) {
	base := conversation(6, 200, "open")
	for _, n := range []int{10000} {
		b.Run(fmt.Sprint("sessions=", n), func(b *testing.B) {
			dir := b.TempDir()
			sessDir := filepath.Join(dir, sessionsDir)
			if err := os.MkdirAll(sessDir, privateDir); err != nil {
				b.Fatal(err)
			}
			size := 0
			for i := range n {
				id := fmt.Sprint("session-", i)
				log := turnLog(b, id, 3, base)
				size += len(log)
				if err := os.WriteFile(filepath.Join(sessDir, key(id)+logExt), log, 0o600); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			defer reportCPU(b)()
			for b.Loop() {
				st, err := NewFileStore(Config{Dir: dir, MaxCount: 1 << 30}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if list, _ := st.List(ctx); len(list) != n {
					b.Fatal(len(list))
				}
				st.Close()
			}
		})
	}
}
