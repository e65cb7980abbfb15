package snapshots

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A record damaged in the middle of a Redis log is skipped with the later
// ones kept, its bytes copied to PREFIX log:KEY:corrupt-TIME, and the log
// rewritten without it by the read that found it, or by the update.
func TestRedisStoreCorruptRecordMidLog(t *testing.T) {
	addr := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for _, tc := range []struct {
		name   string
		damage func(v []byte) []byte
	}{
		{"bit flipped", func(v []byte) []byte { v[len(v)/2] ^= 0x10; return v }},
		{"truncated", func(v []byte) []byte { return v[:len(v)-7] }},
		{"length damaged", func(v []byte) []byte { binary.LittleEndian.PutUint32(v, 1<<20); return v }},
		{"another session's", func([]byte) []byte {
			p, _ := encodeReplace(&Session{ID: "someone else", Messages: []Message{msg("user", "not yours")}})
			return frame(p)
		}},
	} {
		for _, by := range []string{"read", "update"} {
			t.Run(tc.name+" "+by, func(t *testing.T) {
				prefix := fmt.Sprintf("midlog%d:", prefixes.Add(1))
				st := newRedisStore(t, addr, prefix, Config{})
				writeTurns(t, st, "s")
				k := key("s")
				if n, _ := rdb.LLen(ctx, st.keys.log(k)).Result(); n != 1+recoverTurns {
					t.Fatalf("the log has %d records, want %d", n, 1+recoverTurns)
				}
				v, _ := rdb.LIndex(ctx, st.keys.log(k), lostTurn).Bytes()
				v = tc.damage(v)
				rdb.LSet(ctx, st.keys.log(k), lostTurn, v)

				st2 := newRedisStore(t, addr, prefix, Config{}) // nothing cached
				extra := []string{}
				if by == "update" {
					mustUpdate(t, st2, "s", func(s *Session) { s.Messages = append(s.Messages, msg("assistant", "after")) })
					extra = append(extra, "after")
				}
				checkRecovered(t, mustGet(t, st2, "s"), extra...)
				if c := st2.Counters(); c.Corrupt != 1 || c.Skipped != 1 {
					t.Errorf("Counters: corrupt %d, skipped %d; want 1, 1", c.Corrupt, c.Skipped)
				}
				if n, _ := rdb.LLen(ctx, st.keys.log(k)).Result(); n != 1 {
					t.Errorf("the log has %d records after the repair, want 1: rewritten whole", n)
				}
				aside, _ := rdb.Keys(ctx, st.keys.log(k)+":corrupt*").Result()
				if len(aside) != 1 || !strings.HasPrefix(aside[0], st.keys.log(k)+":corrupt-") {
					t.Fatalf("keys set aside: %q, want one %s:corrupt-TIME", aside, st.keys.log(k))
				}
				if kept, _ := rdb.LRange(ctx, aside[0], 0, -1).Result(); len(kept) != 1 || kept[0] != string(v) {
					t.Errorf("%s holds %d records, want the damaged one as it was", aside[0], len(kept))
				}
				if c := st2.Counters().CorruptCopies; c != "Redis keys "+prefix+"*:corrupt*" {
					t.Errorf("CorruptCopies = %q", c)
				}

				st3 := newRedisStore(t, addr, prefix, Config{})
				checkRecovered(t, mustGet(t, st3, "s"), extra...)
				if c := st3.Counters(); c.Corrupt != 0 || c.Skipped != 0 {
					t.Errorf("a second read counts corrupt %d, skipped %d", c.Corrupt, c.Skipped)
				}
				if aside, _ := rdb.Keys(ctx, prefix+"*corrupt*").Result(); len(aside) != 1 {
					t.Errorf("keys set aside after more reads: %q", aside)
				}
			})
		}
	}
}
