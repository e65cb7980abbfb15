package snapshots

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// TurnOrder is implemented by a store that replicas share (RedisStore). A
// replica that builds a turn on the stored history (accumulate mode) reads
// it only once the turns of that session begun on other replicas are
// stored: the replica that answered a turn stores it off the request path,
// and a client that sends its next turn the moment the reply ends, through
// a load balancer, may reach another replica first.
type TurnOrder interface {
	// AwaitTurns waits until the turns of session id begun so far (on
	// any replica) are stored or given up, at most the store's turn wait.
	// It reports how long it waited and whether they were; on a timeout
	// it gives those turns up (their replica died, or its write failed),
	// so that later turns do not wait for them again.
	AwaitTurns(ctx context.Context, id string) (waited time.Duration, complete bool, err error)
	// BeginTurn announces a turn of session id that will be stored, and
	// returns its number for EndTurn.
	BeginTurn(ctx context.Context, id string) (seq int64, err error)
	// EndTurn says that turn seq of session id is stored, or will not be.
	EndTurn(ctx context.Context, id string, seq int64) error
}

// redisTurns is a RedisStore's TurnOrder, on its client and keys.
type redisTurns struct {
	rdb  redis.UniversalClient
	keys redisKeys
	// turnWait bounds AwaitTurns (RedisConfig.TurnWait).
	turnWait          time.Duration
	readErr, writeErr func(error) error
}

// DefaultTurnWait is RedisConfig.TurnWait's default.
const DefaultTurnWait = 200 * time.Millisecond

// turnsTTL is how long a session's turn counters outlive its last turn.
const turnsTTL = 7 * 24 * time.Hour

// endTurn raises a session's "ended" counter to ARGV[1], never lowering
// it: turns may end out of order, and a turn given up may still end.
var endTurn = redis.NewScript(`
local e = tonumber(redis.call('HGET', KEYS[1], 'ended') or '0')
if tonumber(ARGV[1]) > e then redis.call('HSET', KEYS[1], 'ended', ARGV[1]) end
return 0`)

// AwaitTurns implements TurnOrder: it polls the session's counters
// (PREFIX turns:KEY, a hash of begun and ended), every 1 ms at first and
// every 10 ms at most.
func (st *redisTurns) AwaitTurns(ctx context.Context, id string) (time.Duration, bool, error) {
	k := st.keys.turns(key(id))
	start := time.Now()
	deadline := start.Add(st.turnWait)
	var begun int64
	for i := 0; ; i++ {
		vals, err := st.rdb.HMGet(ctx, k, "begun", "ended").Result()
		if err != nil {
			return time.Since(start), false, st.readErr(err)
		}
		b, e := counter(vals[0]), counter(vals[1])
		if i == 0 {
			begun = b // turns begun later are not this turn's past
		}
		if e >= begun {
			return time.Since(start), true, nil
		}
		if !time.Now().Before(deadline) {
			if err := endTurn.Run(ctx, st.rdb, []string{k}, begun).Err(); err != nil && !errors.Is(err, redis.Nil) {
				return time.Since(start), false, st.writeErr(err)
			}
			return time.Since(start), false, nil
		}
		t := time.NewTimer(min(time.Duration(1<<min(i, 4))*time.Millisecond, 10*time.Millisecond, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Since(start), false, ctx.Err()
		case <-t.C:
		}
	}
}

// BeginTurn implements TurnOrder.
func (st *redisTurns) BeginTurn(ctx context.Context, id string) (int64, error) {
	k := st.keys.turns(key(id))
	var seq *redis.IntCmd
	_, err := st.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		seq = p.HIncrBy(ctx, k, "begun", 1)
		p.Expire(ctx, k, turnsTTL)
		return nil
	})
	if err != nil {
		return 0, st.writeErr(err)
	}
	return seq.Val(), nil
}

// EndTurn implements TurnOrder.
func (st *redisTurns) EndTurn(ctx context.Context, id string, seq int64) error {
	err := endTurn.Run(ctx, st.rdb, []string{st.keys.turns(key(id))}, seq).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return st.writeErr(err)
	}
	return nil
}

// counter reads a counter of HMGET: absent is 0.
func counter(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

var _ TurnOrder = (*RedisStore)(nil)
