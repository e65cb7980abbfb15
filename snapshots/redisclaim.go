package snapshots

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claimer is implemented by a store that replicas share (RedisStore): a
// claim on a name within a session, held by one caller at a time, so that
// work the replicas would otherwise all do (a summary of the same part of
// a conversation) is done once. A claim ends when its holder releases it,
// or when its time to live passes (its holder died or hangs), whichever
// comes first. FileStore, used by one process, has none.
type Claimer interface {
	// Claim claims name within session id for ttl. When no one holds it,
	// it is the caller's: Claim returns a token for Release and true.
	// When another caller holds it, Claim returns false and changes
	// nothing.
	Claim(ctx context.Context, id, name string, ttl time.Duration) (token string, ok bool, err error)
	// Release ends the claim that token stands for, if it still holds:
	// a claim that expired and was taken by another caller stays theirs.
	Release(ctx context.Context, id, name, token string) error
}

var _ Claimer = (*RedisStore)(nil)

// redisClaims is a RedisStore's Claimer, on its client and keys: a claim
// is a key (PREFIX claim:KEY:NAME) holding a random token, set only when
// absent and expiring after the claim's time to live.
type redisClaims struct {
	rdb      redis.UniversalClient
	keys     redisKeys
	writeErr func(error) error
}

// releaseClaim deletes a claim's key only while it holds the caller's token.
var releaseClaim = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// Claim implements Claimer with SET key token NX PX ttl.
func (c *redisClaims) Claim(ctx context.Context, id, name string, ttl time.Duration) (string, bool, error) {
	if err := CheckID(id); err != nil {
		return "", false, err
	}
	if name == "" || ttl < time.Millisecond {
		return "", false, fmt.Errorf("snapshots: claim %q for %v: a claim needs a name and a time to live of 1ms or more", name, ttl)
	}
	token := rand.Text()
	ok, err := c.rdb.SetArgs(ctx, c.keys.claim(key(id), name), token, redis.SetArgs{Mode: "NX", TTL: ttl}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, c.writeErr(err)
	case ok != "OK":
		return "", false, nil
	}
	return token, true, nil
}

// Release implements Claimer, comparing the token and deleting the key in
// one script.
func (c *redisClaims) Release(ctx context.Context, id, name, token string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	if token == "" {
		return nil
	}
	if err := releaseClaim.Run(ctx, c.rdb, []string{c.keys.claim(key(id), name)}, token).Err(); err != nil {
		return c.writeErr(err)
	}
	return nil
}
