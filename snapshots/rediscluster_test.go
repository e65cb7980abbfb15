package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/testkit/redistest"
)

// newClusterStore opens a Redis store on the cluster whose nodes are
// addrs, under prefix, with the tests' clock.
func newClusterStore(t testing.TB, addrs []string, prefix string, cfg Config) *RedisStore {
	t.Helper()
	cfg.Redis.ClusterAddrs, cfg.Redis.Prefix = addrs, prefix
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	st, err := NewRedisStore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.now = ticker()
	t.Cleanup(func() { st.Close() })
	return st
}

// clusterClient is a client of the cluster at addrs, for looking at what
// the store wrote.
func clusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestRedisClusterStoreContract(t *testing.T) {
	addrs := redistest.StartCluster(t)
	testContract(t, func(t *testing.T) opener {
		prefix := fmt.Sprintf("cluster%d:", prefixes.Add(1))
		return func(t *testing.T, cfg Config) Store { return newClusterStore(t, addrs, prefix, cfg) }
	})
}

// The key names: a single Redis keeps the names it always had; a cluster
// puts the hashed session id in a hash tag, in every key of the session.
func TestRedisKeyNames(t *testing.T) {
	for _, tc := range []struct {
		keys redisKeys
		want []string
	}{
		{redisKeys{prefix: "p:"}, []string{"p:log:K", "p:log:K:corrupt-T", "p:ver:K", "p:turns:K", "p:session:K",
			"p:sessions", "p:snapshots:K", "p:snapshot:K:S"}},
		{redisKeys{prefix: "p:", tag: true}, []string{"p:log:{K}", "p:log:{K}:corrupt-T", "p:ver:{K}", "p:turns:{K}",
			"p:session:{K}", "p:sessions", "p:snapshots:{K}", "p:snapshot:{K}:S"}},
	} {
		p := tc.keys
		got := []string{p.log("K"), p.aside("K", "T"), p.ver("K"), p.turns("K"), p.session("K"), p.index(),
			p.snapIndex("K"), p.snap("K", "S")}
		if d := diff(tc.want, got); d != "" {
			t.Errorf("keys of %+v (-want +got):\n%s", p, d)
		}
	}
}

// TestRedisCluster: on a three-node cluster, sessions spread over every
// primary, each session's keys share one hash slot, and updates, reads,
// snapshots, the listing, deletes and the turn order all work; two
// stores (two replicas) updating one session at once lose nothing.
func TestRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t)
	rdb := clusterClient(t, addrs)
	a := newClusterStore(t, addrs, "spread:", Config{})
	b := newClusterStore(t, addrs, "spread:", Config{})
	const sessions = 30
	snaps := map[string]string{}
	for i := range sessions {
		id := fmt.Sprint("s", i)
		mustUpdate(t, a, id, func(s *Session) { s.Messages = conversation(4, 40, id) })
		mustUpdate(t, b, id, func(s *Session) { s.Messages = append(s.Messages, msg("user", "from b")) })
		info, err := TakeSnapshot(ctx, b, id, ReasonManual)
		if err != nil {
			t.Fatal(err)
		}
		snaps[id] = info.ID
		seq, err := a.BeginTurn(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.EndTurn(ctx, id, seq); err != nil {
			t.Fatal(err)
		}
	}

	primaries := map[string]int{}
	for i := range sessions {
		id := fmt.Sprint("s", i)
		k := key(id)
		names := []string{a.keys.log(k), a.keys.ver(k), a.keys.turns(k), a.keys.snapIndex(k), a.keys.snap(k, snaps[id])}
		slot := slotOf(t, rdb, names[0])
		for _, name := range names {
			if n, _ := rdb.Exists(ctx, name).Result(); n != 1 {
				t.Errorf("%s: no key %s", id, name)
			}
			if s := slotOf(t, rdb, name); s != slot {
				t.Errorf("%s: %s is in slot %d, %s in %d", id, names[0], slot, name, s)
			}
		}
		primaries[primaryOf(t, rdb, slot)]++
		if s := mustGet(t, b, id); len(s.Messages) != 5 {
			t.Errorf("%s: %d messages, want 5", id, len(s.Messages))
		}
	}
	if len(primaries) != 3 {
		t.Errorf("%d sessions on %d primaries, want all 3: %v", sessions, len(primaries), primaries)
	}

	// Open, as ctxproxy starts, makes the same store.
	opened, err := Open(ctx, Config{Store: StoreRedis, Redis: RedisConfig{ClusterAddrs: addrs, Prefix: "spread:"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	list, err := opened.List(ctx)
	if err != nil || len(list) != sessions {
		t.Fatalf("List: %d sessions, %v; want %d", len(list), err, sessions)
	}
	for _, l := range list {
		if l.Snapshots != 1 || l.Messages != 5 {
			t.Errorf("listed %s: %d snapshots, %d messages; want 1, 5", l.SessionID, l.Snapshots, l.Messages)
		}
	}
	for i := range sessions / 2 {
		id := fmt.Sprint("s", i)
		if err := a.Delete(ctx, id); err != nil {
			t.Fatalf("Delete(%s): %v", id, err)
		}
		if _, err := b.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%s) after Delete: %v", id, err)
		}
		k := key(id)
		if n, _ := rdb.Exists(ctx, a.keys.log(k), a.keys.ver(k), a.keys.snapIndex(k), a.keys.snap(k, snaps[id])).Result(); n != 0 {
			t.Errorf("%s: %d keys left after Delete", id, n)
		}
	}
	if list, err := a.List(ctx); err != nil || len(list) != sessions-sessions/2 {
		t.Errorf("List after deleting half: %d sessions, %v", len(list), err)
	}
	if _, err := b.LoadSnapshot(ctx, "s29", snaps["s29"]); err != nil {
		t.Errorf("LoadSnapshot: %v", err)
	}

	t.Run("TurnOrder", func(t *testing.T) {
		cfg := Config{Redis: RedisConfig{TurnWait: 2 * time.Second}}
		a, b := newClusterStore(t, addrs, "turns:", cfg), newClusterStore(t, addrs, "turns:", cfg)
		seq, err := a.BeginTurn(ctx, "t")
		if err != nil || seq != 1 {
			t.Fatalf("BeginTurn = %d, %v", seq, err)
		}
		go func() {
			time.Sleep(20 * time.Millisecond)
			a.EndTurn(ctx, "t", seq)
		}()
		if waited, done, err := b.AwaitTurns(ctx, "t"); !done || err != nil || waited < 10*time.Millisecond {
			t.Errorf("waited %v for the turn begun on the other store: %v, %v", waited, done, err)
		}
	})

	t.Run("ConcurrentReplicas", func(t *testing.T) {
		replicas := []*RedisStore{newClusterStore(t, addrs, "both:", Config{}), newClusterStore(t, addrs, "both:", Config{})}
		const each = 40
		var wg sync.WaitGroup
		for r, st := range replicas {
			for i := range each {
				wg.Go(func() {
					if err := st.Update(ctx, "shared", func(s *Session) error {
						s.Stats.Requests++
						s.Messages = append(s.Messages, msg("user", fmt.Sprintf("%d/%d", r, i)))
						return nil
					}); err != nil {
						t.Errorf("replica %d update %d: %v", r, i, err)
					}
				})
			}
		}
		wg.Wait()
		for r, st := range replicas {
			if s := mustGet(t, st, "shared"); s.Stats.Requests != 2*each || len(s.Messages) != 2*each {
				t.Errorf("replica %d sees %d requests, %d messages; want %d", r, s.Stats.Requests, len(s.Messages), 2*each)
			}
		}
		if list, _ := replicas[1].List(ctx); len(list) != 1 || list[0].Messages != 2*each {
			t.Errorf("List after concurrent updates: %+v", list)
		}
	})
}

// slotOf returns the hash slot of key, as the cluster computes it.
func slotOf(t *testing.T, rdb *redis.ClusterClient, key string) int64 {
	t.Helper()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return slot
}

// primaryOf returns the primary that holds slot (its id).
func primaryOf(t *testing.T, rdb *redis.ClusterClient, slot int64) string {
	t.Helper()
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return n.ID
					}
				}
			}
		}
	}
	t.Fatalf("no primary holds slot %d", slot)
	return ""
}

// On a cluster, damaged records are set aside and logs rewritten in the
// session's slot: the keys set aside are in it too.
func TestRedisClusterCorrupt(t *testing.T) {
	addrs := redistest.StartCluster(t)
	rdb := clusterClient(t, addrs)
	st := newClusterStore(t, addrs, "corrupt:", Config{})
	writeTurns(t, st, "mid")
	mustUpdate(t, st, "bad", func(s *Session) { s.Messages = conversation(4, 50, "bad") })
	snap, _ := TakeSnapshot(ctx, st, "bad", ReasonManual)

	mid, bad := key("mid"), key("bad")
	v, _ := rdb.LIndex(ctx, st.keys.log(mid), lostTurn).Bytes()
	v[len(v)/2] ^= 0x10
	rdb.LSet(ctx, st.keys.log(mid), lostTurn, v)
	v, _ = rdb.LIndex(ctx, st.keys.log(bad), 0).Bytes()
	rdb.LSet(ctx, st.keys.log(bad), 0, v[:len(v)/2])
	v, _ = rdb.Get(ctx, st.keys.snap(bad, snap.ID)).Bytes()
	rdb.Set(ctx, st.keys.snap(bad, snap.ID), v[:len(v)/2], 0)

	st2 := newClusterStore(t, addrs, "corrupt:", Config{}) // nothing cached
	checkRecovered(t, mustGet(t, st2, "mid"))
	if _, err := st2.LoadSnapshot(ctx, "bad", snap.ID); !isCorrupt(err) {
		t.Errorf("LoadSnapshot of a truncated snapshot: %v, want ErrCorrupt", err)
	}
	if _, err := st2.Get(ctx, "bad"); !isCorrupt(err) {
		t.Errorf("Get of a truncated session: %v, want ErrCorrupt", err)
	}
	mustUpdate(t, st2, "bad", func(s *Session) { s.Messages = []Message{msg("user", "again")} })

	aside := clusterKeys(t, rdb, "corrupt:*corrupt*")
	want := map[string]int64{st.keys.log(bad) + ":corrupt": slotOf(t, rdb, st.keys.log(bad)),
		st.keys.snap(bad, snap.ID) + ":corrupt": slotOf(t, rdb, st.keys.log(bad))}
	for _, k := range aside {
		if strings.HasPrefix(k, st.keys.log(mid)+":corrupt-") {
			want[k] = slotOf(t, rdb, st.keys.log(mid))
		}
	}
	if len(aside) != 3 || len(want) != 3 {
		t.Fatalf("keys set aside: %q, want the record of mid, the log of bad and its snapshot", aside)
	}
	for k, slot := range want {
		if s := slotOf(t, rdb, k); s != slot {
			t.Errorf("%s is in slot %d, its session in %d", k, s, slot)
		}
		if n, _ := rdb.Exists(ctx, k).Result(); n != 1 {
			t.Errorf("%s was not set aside", k)
		}
	}
}

// clusterKeys returns the keys that match pattern on every primary.
func clusterKeys(t *testing.T, rdb *redis.ClusterClient, pattern string) []string {
	t.Helper()
	var mu sync.Mutex
	var all []string
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		defer mu.Unlock()
		all = append(all, keys...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// On a cluster the index of sessions is written after the session's
// transaction; a replica that dies between the two leaves the entry of a
// deleted session, which List skips and Delete removes.
func TestRedisClusterIndexLeftBehind(t *testing.T) {
	addrs := redistest.StartCluster(t)
	rdb := clusterClient(t, addrs)
	st := newClusterStore(t, addrs, "index:", Config{})
	mustUpdate(t, st, "kept", func(s *Session) { s.Messages = conversation(2, 10, "kept") })
	ib, _ := json.Marshal(Listing{SessionRow: adminapi.SessionRow{SessionID: "gone"}})
	rdb.HSet(ctx, st.keys.index(), key("gone"), ib)
	list, err := st.List(ctx)
	if err != nil || len(list) != 1 || list[0].SessionID != "kept" {
		t.Errorf("List with the entry of a deleted session = %+v, %v; want kept alone", list, err)
	}
	if err := st.Delete(ctx, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete of the deleted session: %v, want ErrNotFound", err)
	}
	if n, _ := rdb.HLen(ctx, st.keys.index()).Result(); n != 1 {
		t.Errorf("the index holds %d entries after the Delete, want 1", n)
	}
}

// TestRedisClusterConfig: cluster_addrs excludes Sentinel, takes database
// 0 only and a prefix without braces; every problem is reported at once.
func TestRedisClusterConfig(t *testing.T) {
	ok := Config{Store: StoreRedis, Redis: RedisConfig{ClusterAddrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("a cluster config: %v", err)
	}
	bad := Config{Store: StoreRedis, Redis: RedisConfig{ClusterAddrs: []string{"10.0.0.1:7000", ""}, DB: 2,
		Prefix: "{app}:", SentinelMaster: "m", SentinelAddrs: []string{"10.0.0.3:26379"}}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted a cluster with sentinels, database 2 and braces in the prefix")
	}
	want := []string{
		"snapshots.redis.cluster_addrs and sentinel_master exclude each other: " +
			"Redis Cluster fails over by itself, without sentinels; set one of them",
		"snapshots.redis.db: 2 with cluster_addrs; Redis Cluster has only database 0",
		`snapshots.redis.prefix: "{app}:" holds { or } with cluster_addrs; ctxproxy puts each session's keys in one hash slot with {} of its own`,
		"snapshots.redis.cluster_addrs: an empty address",
	}
	if d := diff(want, strings.Split(err.Error(), "\n")); d != "" {
		t.Errorf("Validate (-want +got):\n%s", d)
	}
	if where := bad.Redis.where(); where != "cluster 10.0.0.1:7000," {
		t.Errorf("where = %q", where)
	}
	// Without a cluster, db and the prefix are as free as before.
	if err := (Config{Redis: RedisConfig{DB: 2, Prefix: "{app}:"}}).Validate(); err != nil {
		t.Errorf("a single Redis with db 2 and braces in its prefix: %v", err)
	}
}

// TestRedisClusterSlotMoves: a session's slot moves to another primary,
// as redis-cli --cluster reshard moves it, while replicas update the
// session: updates made while its keys are on their way wait for the move
// to end, and none is lost.
func TestRedisClusterSlotMoves(t *testing.T) {
	addrs := redistest.StartCluster(t)
	rdb := clusterClient(t, addrs)
	st := newClusterStore(t, addrs, "moves:", Config{})
	turn := func(text string) func(*Session) error {
		return func(s *Session) error { s.Messages = append(s.Messages, msg("user", text)); return nil }
	}
	if err := st.Update(ctx, "m", turn("before")); err != nil {
		t.Fatal(err)
	}
	slot := slotOf(t, rdb, st.keys.log(key("m")))
	src, dst, all := moveNodes(t, rdb, slot)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	update := func(text string) {
		st := newClusterStore(t, addrs, "moves:", Config{}) // another replica
		wg.Go(func() {
			if err := st.Update(ctx, "m", turn(text)); err != nil {
				t.Errorf("update %s: %v", text, err)
			}
		})
	}
	// The steps of redis-cli --cluster reshard for one slot.
	must(all[dst].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", nodeID(t, all[src])).Err())
	must(all[src].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", nodeID(t, all[dst])).Err())
	update("while migrating")          // TRYAGAIN: WATCH of the log and the absent v1 key
	time.Sleep(300 * time.Millisecond) // longer than go-redis's own retries

	keys, err := all[src].ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
	must(err)
	host, port, _ := strings.Cut(dst, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	must(all[src].Do(ctx, args...).Err())
	update("while migrated") // ASK from the source, MOVED from the target
	time.Sleep(100 * time.Millisecond)
	for _, c := range all {
		must(c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", nodeID(t, all[dst])).Err())
	}
	wg.Wait()
	if err := st.Update(ctx, "m", turn("after")); err != nil {
		t.Fatalf("update after the move: %v", err)
	}
	got := map[string]bool{}
	for _, m := range mustGet(t, newClusterStore(t, addrs, "moves:", Config{}), "m").Messages {
		got[m.Content] = true
	}
	for _, want := range []string{"before", "while migrating", "while migrated", "after"} {
		if !got[want] {
			t.Errorf("the update %q was lost in the move of slot %d from %s to %s (messages %v)", want, slot, src, dst, got)
		}
	}
}

// moveNodes returns the primary that holds slot and another, by address,
// and a client of each primary.
func moveNodes(t *testing.T, rdb *redis.ClusterClient, slot int64) (src, dst string, all map[string]*redis.Client) {
	t.Helper()
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	all = map[string]*redis.Client{}
	for _, sh := range shards {
		addr := fmt.Sprintf("%s:%d", sh.Nodes[0].IP, sh.Nodes[0].Port)
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		all[addr] = c
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				src = addr
			}
		}
	}
	for addr := range all {
		if addr != src {
			dst = addr
		}
	}
	return src, dst, all
}

// nodeID returns the cluster id of the node c is connected to.
func nodeID(t *testing.T, c *redis.Client) string {
	t.Helper()
	id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	return id
}
