package snapshots

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
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

// benchStores runs fn against each kind of store (Redis when installed).
func benchStores(b *testing.B, fn func(b *testing.B, st Store)) {
	b.Run("file", func(b *testing.B) { fn(b, newFileStore(b, b.TempDir(), Config{MaxCount: 1 << 30})) })
	b.Run("redis", func(b *testing.B) {
		addr := startRedis(b)
		fn(b, newRedisStore(b, addr, "bench:", Config{MaxCount: 1 << 30}))
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
// writer's worker, and what the interval saves (BENCHMARKS.md).
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
