package snapshots

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ctxproxy/ctxproxy/testkit/redistest"
)

// startRedis starts a throwaway redis-server (redistest.Start).
func startRedis(t testing.TB) string { return redistest.Start(t) }

var prefixes atomic.Int64

// newRedisStore opens a Redis store on addr under prefix, with the tests'
// clock.
func newRedisStore(t testing.TB, addr, prefix string, cfg Config) *RedisStore {
	t.Helper()
	cfg.Redis.Addr, cfg.Redis.Prefix = addr, prefix
	st, err := NewRedisStore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.now = ticker()
	t.Cleanup(func() { st.Close() })
	return st
}

func TestRedisStoreContract(t *testing.T) {
	addr := startRedis(t)
	testContract(t, func(t *testing.T) opener {
		prefix := fmt.Sprintf("test%d:", prefixes.Add(1))
		return func(t *testing.T, cfg Config) Store { return newRedisStore(t, addr, prefix, cfg) }
	})
}

// Replicas behind a load balancer update one session at once: the
// optimistic transaction must keep every update.
func TestRedisStoreReplicasShareSessions(t *testing.T) {
	addr := startRedis(t)
	replicas := []*RedisStore{
		newRedisStore(t, addr, "shared:", Config{}),
		newRedisStore(t, addr, "shared:", Config{}),
		newRedisStore(t, addr, "shared:", Config{}),
	}
	const perReplica = 40
	var wg sync.WaitGroup
	for r, st := range replicas {
		for i := range perReplica {
			wg.Go(func() {
				err := st.Update(ctx, "shared", func(s *Session) error {
					s.Stats.Requests++
					s.Messages = append(s.Messages, msg("user", fmt.Sprintf("%d/%d", r, i)))
					return nil
				})
				if err != nil {
					t.Errorf("replica %d update %d: %v", r, i, err)
				}
			})
		}
	}
	wg.Wait()
	want := len(replicas) * perReplica
	for r, st := range replicas {
		s := mustGet(t, st, "shared")
		if s.Stats.Requests != want || len(s.Messages) != want {
			t.Errorf("replica %d sees %d requests, %d messages; want %d", r, s.Stats.Requests, len(s.Messages), want)
		}
	}
	// A snapshot saved by one replica is listed and loaded by another.
	info, err := TakeSnapshot(ctx, replicas[0], "shared", ReasonManual)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replicas[2].LoadSnapshot(ctx, "shared", info.ID); err != nil {
		t.Errorf("another replica cannot load the snapshot: %v", err)
	}
}

// A record damaged in Redis is reported and set aside; the rest loads.
// The damage is seen by a replica that has nothing cached (a replica that
// wrote the session serves it from memory while its version stands).
func TestRedisStoreCorruptRecord(t *testing.T) {
	addr := startRedis(t)
	st := newRedisStore(t, addr, "corrupt:", Config{})
	mustUpdate(t, st, "bad", func(s *Session) { s.Messages = conversation(4, 50, "bad") })
	mustUpdate(t, st, "good", func(s *Session) { s.Messages = conversation(4, 50, "good") })
	mustUpdate(t, st, "tail", func(s *Session) { s.Messages = conversation(4, 50, "tail") })
	mustUpdate(t, st, "tail", func(s *Session) { s.Messages = append(s.Messages, msg("user", "five")) })
	good, _ := TakeSnapshot(ctx, st, "good", ReasonManual)
	badSnap, _ := TakeSnapshot(ctx, st, "bad", ReasonManual)

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	v, _ := rdb.LIndex(ctx, st.keys.log(key("bad")), 0).Bytes()
	rdb.LSet(ctx, st.keys.log(key("bad")), 0, v[:len(v)/2]) // truncated
	v, _ = rdb.Get(ctx, st.keys.snap(key("bad"), badSnap.ID)).Bytes()
	rdb.Set(ctx, st.keys.snap(key("bad"), badSnap.ID), v[:len(v)/2], 0)
	v, _ = rdb.LIndex(ctx, st.keys.log(key("tail")), 1).Bytes()
	v[len(v)-2] ^= 0x10 // the appended record: skipped, the rest loads
	rdb.LSet(ctx, st.keys.log(key("tail")), 1, v)

	st2 := newRedisStore(t, addr, "corrupt:", Config{})
	if _, err := st2.Get(ctx, "bad"); !isCorrupt(err) {
		t.Errorf("Get of a truncated session: %v, want ErrCorrupt", err)
	}
	if _, err := st2.LoadSnapshot(ctx, "bad", badSnap.ID); !isCorrupt(err) {
		t.Errorf("LoadSnapshot of a truncated snapshot: %v, want ErrCorrupt", err)
	}
	if list, _ := st2.ListSnapshots(ctx, "bad"); len(list) != 0 {
		t.Errorf("the corrupt snapshot is still listed: %+v", list)
	}
	mustGet(t, st2, "good")
	if _, err := st2.LoadSnapshot(ctx, "good", good.ID); err != nil {
		t.Errorf("a healthy snapshot no longer loads: %v", err)
	}
	if s := mustGet(t, st2, "tail"); len(s.Messages) != 4 {
		t.Errorf("a log with a bad last record loads %d messages, want the 4 before it", len(s.Messages))
	}
	// The read rewrote the log without its bad record, kept aside.
	if n, _ := rdb.LLen(ctx, st.keys.log(key("tail"))).Result(); n != 1 {
		t.Errorf("the log with a bad record has %d records after a read, want 1: rewritten whole", n)
	}
	if aside, _ := rdb.Keys(ctx, st.keys.log(key("tail"))+":corrupt-*").Result(); len(aside) != 1 {
		t.Errorf("the bad record was not kept aside: %q", aside)
	}
	// The sessions stay usable: the next update starts the bad one again
	// and keeps the damaged log aside.
	mustUpdate(t, st2, "bad", func(s *Session) { s.Messages = []Message{msg("user", "again")} })
	if s := mustGet(t, st2, "bad"); len(s.Messages) != 1 {
		t.Errorf("after an update of a corrupt session: %d messages", len(s.Messages))
	}
	if n, _ := rdb.Exists(ctx, st.keys.log(key("bad"))+":corrupt").Result(); n != 1 {
		t.Error("the damaged session log was not kept aside")
	}
	mustUpdate(t, st2, "tail", func(s *Session) { s.Messages = append(s.Messages, msg("user", "5")) })
	if s := mustGet(t, newRedisStore(t, addr, "corrupt:", Config{}), "tail"); len(s.Messages) != 5 {
		t.Errorf("the repaired session has %d messages after an update, want 5", len(s.Messages))
	}
	if c := st2.Counters(); c.Corrupt != 4 || c.Skipped != 1 { // bad ×2, its snapshot, tail once
		t.Errorf("Counters: corrupt %d, skipped %d; want 4, 1", c.Corrupt, c.Skipped)
	}
}

// A session stored before the log (one gzip-compressed record under
// PREFIX session:KEY) is read as it is, and its next update converts it
// to a log and removes the old key.
func TestRedisStoreMigratesV1(t *testing.T) {
	addr := startRedis(t)
	st := newRedisStore(t, addr, "v1:", Config{})
	old := fullSession("legacy")
	old.Created, old.Updated = t0, t0
	rec, info, err := sessionRecord(old)
	if err != nil {
		t.Fatal(err)
	}
	ib, _ := json.Marshal(info)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rdb.Set(ctx, st.keys.session(key("legacy")), rec, 0)
	rdb.HSet(ctx, st.keys.index(), key("legacy"), ib)

	if d := diff(old, mustGet(t, st, "legacy")); d != "" {
		t.Errorf("a v1 session (-want +got):\n%s", d)
	}
	if list, _ := st.List(ctx); len(list) != 1 || list[0].SessionID != "legacy" {
		t.Errorf("List = %+v", list)
	}
	mustUpdate(t, st, "legacy", func(s *Session) { s.Messages = append(s.Messages, msg("user", "after")) })
	if n, _ := rdb.Exists(ctx, st.keys.session(key("legacy"))).Result(); n != 0 {
		t.Error("the v1 key is still there after an update")
	}
	got := mustGet(t, newRedisStore(t, addr, "v1:", Config{}), "legacy")
	if len(got.Messages) != len(old.Messages)+1 || got.Metadata["agent"] != "test" {
		t.Errorf("after converting: %d messages, metadata %v", len(got.Messages), got.Metadata)
	}
}

func TestRedisStoreUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := NewRedisStore(ctx, Config{Redis: RedisConfig{Addr: addr}}, nil); err == nil {
		t.Error("NewRedisStore succeeded without a Redis")
	}
}

// TestOpenRedisDownAtStart: a Redis that is down when ctxproxy starts
// does not stop it: Open returns a store that fails until Redis comes
// up, then works, without a restart.
func TestOpenRedisDownAtStart(t *testing.T) {
	bin := redistest.Binary(t)
	port := redistest.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	st, err := Open(ctx, Config{Store: StoreRedis, Redis: RedisConfig{Addr: addr, Prefix: "down:"}}, nil)
	if err != nil {
		t.Fatalf("Open with Redis down: %v", err)
	}
	defer st.Close()
	rs := st.(*RedisStore)
	if err := rs.Ping(context.Background()); err == nil {
		t.Fatal("Ping answered with Redis down")
	}
	incr := func(s *Session) error { s.Stats.Requests++; return nil }
	if err := st.Update(context.Background(), "s", incr); err == nil {
		t.Fatal("a write succeeded with Redis down")
	}
	redistest.StartOn(t, bin, port)
	if err := st.Update(context.Background(), "s", incr); err != nil {
		t.Fatalf("after Redis came up: %v", err)
	}
}

// TestRedisTurnOrder: a turn waits for the turns begun before it until
// they end, not for those begun after; a turn that never ends (its
// replica died) is waited for once, up to the turn wait, then given up.
func TestRedisTurnOrder(t *testing.T) {
	addr := startRedis(t)
	cfg := Config{Redis: RedisConfig{TurnWait: 50 * time.Millisecond}}
	a := newRedisStore(t, addr, "turns:", cfg)
	b := newRedisStore(t, addr, "turns:", cfg)
	ctx := context.Background()
	if _, done, err := b.AwaitTurns(ctx, "s"); !done || err != nil {
		t.Fatalf("a new session waited: %v, %v", done, err)
	}
	seq, err := a.BeginTurn(ctx, "s")
	if err != nil || seq != 1 {
		t.Fatalf("BeginTurn = %d, %v", seq, err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		a.EndTurn(ctx, "s", seq)
	}()
	if waited, done, err := b.AwaitTurns(ctx, "s"); !done || err != nil || waited < 5*time.Millisecond {
		t.Fatalf("waited %v for the turn begun on the other store: %v, %v", waited, done, err)
	}
	// A turn that never ends: waited for once, then given up.
	if _, err := a.BeginTurn(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if waited, done, err := b.AwaitTurns(ctx, "s"); done || err != nil || waited < 50*time.Millisecond {
		t.Fatalf("a turn that never ended: waited %v, complete %v, %v", waited, done, err)
	}
	if waited, done, err := b.AwaitTurns(ctx, "s"); !done || err != nil || waited > 20*time.Millisecond {
		t.Fatalf("the turn given up was waited for again: %v, %v, %v", waited, done, err)
	}
	// Turns that end out of order: the later end does not let a turn skip
	// one still in flight after it.
	s3, _ := a.BeginTurn(ctx, "s")
	s4, _ := a.BeginTurn(ctx, "s")
	a.EndTurn(ctx, "s", s4)
	a.EndTurn(ctx, "s", s3) // lower: changes nothing
	if _, done, _ := b.AwaitTurns(ctx, "s"); !done {
		t.Fatal("both turns ended, still waiting")
	}
}

// TestRedisSentinel: with snapshots.redis.sentinel_master the store finds
// the primary through Redis Sentinel, and follows it when it fails over:
// the primary is killed, the sentinel promotes its replica, and the
// sessions written before are read, and written again, through the new
// primary.
func TestRedisSentinel(t *testing.T) {
	primary := redistest.StartServer(t)
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := redistest.StartServer(t, "--replicaof", host, port)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	waitFor(t, "the replica to sync", func() bool {
		info, _ := rc.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	sentinel := redistest.StartSentinel(t, "primary", primary.Addr)
	cfg := Config{Redis: RedisConfig{SentinelMaster: "primary", SentinelAddrs: []string{sentinel}, Prefix: "sentinel:"}}
	st, err := NewRedisStore(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	turn := func(s *Session) error {
		s.Messages = append(s.Messages, Message{Role: "user", Content: "hello"})
		return nil
	}
	if err := st.Update(ctx, "s", turn); err != nil {
		t.Fatal(err)
	}
	// The sentinel must know the replica before the primary goes.
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	waitFor(t, "the sentinel to see the replica", func() bool {
		rs, _ := sc.Replicas(ctx, "primary").Result()
		return len(rs) > 0
	})
	waitFor(t, "the write to reach the replica", func() bool {
		n, _ := rc.DBSize(ctx).Result()
		return n > 0
	})
	primary.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := st.Get(ctx, "s")
		if err == nil && len(got.Messages) == 1 && st.Update(ctx, "s", turn) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover within 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := st.Get(ctx, "s")
	if err != nil || len(got.Messages) != 2 {
		t.Fatalf("after the failover: %v, %d messages", err, len(got.Messages))
	}
}
