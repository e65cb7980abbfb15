package snapshots

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/check"
	"github.com/redis/go-redis/v9"
)

// Store kinds for Config.Store.
const (
	StoreFile  = "file"
	StoreRedis = "redis"
)

// Config is the snapshots section of ctxproxy's configuration. Its zero
// value works: a file store under ./ctxproxy-data, automatic snapshots at
// 80% usage, at most 20 snapshots per session.
type Config struct {
	// Store is "file" (default) or "redis" (several replicas sharing
	// sessions).
	Store string `mapstructure:"store"`
	// Dir is the file store's directory; default ./ctxproxy-data.
	Dir string `mapstructure:"dir"`
	// AutoThreshold is the usage at which Writer takes an automatic
	// snapshot when a session crosses it; default 0.80. A negative value
	// turns automatic snapshots off.
	AutoThreshold float64 `mapstructure:"auto_threshold"`
	// MaxCount is how many snapshots a session keeps; the oldest beyond it
	// are deleted; default 20.
	MaxCount int `mapstructure:"max_count"`
	// QueueSize bounds how many sessions may wait in Writer's queue;
	// default 1024.
	QueueSize int `mapstructure:"queue_size"`
	// Workers is how many of Writer's writes run at once; default 4.
	Workers int `mapstructure:"workers"`
	// FsyncInterval is how soon the file store fsyncs a turn appended to
	// a session log; default 1s. A negative value fsyncs each record
	// before Update returns (0 is the default, as for every key). The
	// record is in the kernel's page cache the moment its write returns,
	// so a crash of ctxproxy (kill -9, a panic, the OOM killer) loses
	// nothing acknowledged; only an OS crash or a power cut can lose the
	// turns of the last interval, the trade SQLite's WAL makes with
	// synchronous=NORMAL and Redis with appendfsync everysec. A log that
	// lost its tail that way is cut at its last whole record when read.
	// Whole files (new logs, replaced histories, compactions, snapshots)
	// are fsynced before they are renamed into place, always.
	FsyncInterval time.Duration `mapstructure:"fsync_interval"`
	Redis         RedisConfig   `mapstructure:"redis"`
	// Observe, when set, is called after every store operation with the
	// store's kind (StoreFile, StoreRedis), the operation (OpGet,
	// OpUpdate, …) and its error, nil on success: the proxy counts
	// operations and failures per store and operation with it. ErrNotFound
	// and ErrInvalidID come through as they are, for the caller to tell
	// from failures. It runs on the operation's goroutine, so it must be
	// quick (a counter increment) and must not call the store.
	Observe func(store, op string, err error) `mapstructure:"-"`
}

// RedisConfig says where the Redis store is.
type RedisConfig struct {
	// Addr is host:port; default 127.0.0.1:6379.
	Addr     string `mapstructure:"addr"`
	Password string `mapstructure:"password"`
	DB       int    `mapstructure:"db"`
	// Prefix starts every key ctxproxy writes; default "ctxproxy:".
	Prefix string `mapstructure:"prefix"`
	// SentinelMaster, when set, finds the primary through Redis Sentinel:
	// it is the name the sentinels at SentinelAddrs monitor it under, and
	// Addr is not used. SentinelPassword is the sentinels' own password
	// ("" for none); Password is the primary's.
	SentinelMaster   string   `mapstructure:"sentinel_master"`
	SentinelAddrs    []string `mapstructure:"sentinel_addrs"`
	SentinelPassword string   `mapstructure:"sentinel_password"`
	// ClusterAddrs, when set, uses Redis Cluster: they are some of its
	// nodes (host:port each), from which the client learns the others and
	// which node holds which hash slot. Addr is not used, DB must be 0
	// (a cluster has only database 0), and Password is the nodes'.
	ClusterAddrs []string `mapstructure:"cluster_addrs"`
	// TurnWait bounds how long a turn built on the stored history waits
	// for the session's turns that other replicas have not stored yet
	// (TurnOrder); default DefaultTurnWait.
	TurnWait time.Duration `mapstructure:"turn_wait"`
}

// Defaults.
const (
	DefaultDir           = "./ctxproxy-data"
	DefaultAutoThreshold = 0.80
	DefaultMaxCount      = 20
	DefaultQueueSize     = 1024
	DefaultWorkers       = 4
	DefaultFsyncInterval = time.Second
	DefaultRedisAddr     = "127.0.0.1:6379"
	DefaultRedisPrefix   = "ctxproxy:"
)

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Store == "" {
		c.Store = StoreFile
	}
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.AutoThreshold == 0 {
		c.AutoThreshold = DefaultAutoThreshold
	}
	if c.MaxCount == 0 {
		c.MaxCount = DefaultMaxCount
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.FsyncInterval == 0 {
		c.FsyncInterval = DefaultFsyncInterval
	}
	if c.Redis.Addr == "" {
		c.Redis.Addr = DefaultRedisAddr
	}
	if c.Redis.Prefix == "" {
		c.Redis.Prefix = DefaultRedisPrefix
	}
	if c.Redis.TurnWait <= 0 {
		c.Redis.TurnWait = DefaultTurnWait
	}
	return c
}

// Validate reports every problem in c at once (zero fields count as their
// defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Store != StoreFile && c.Store != StoreRedis {
		errs = append(errs, fmt.Errorf("snapshots.store: %q is neither %q nor %q", c.Store, StoreFile, StoreRedis))
	}
	if !(c.AutoThreshold <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("snapshots.auto_threshold: %v is above 1 (a negative value turns it off)", c.AutoThreshold))
	}
	errs = append(errs, check.NotNegative("snapshots.max_count", c.MaxCount),
		check.NotNegative("snapshots.queue_size", c.QueueSize),
		check.NotNegative("snapshots.workers", c.Workers),
		check.NotNegative("snapshots.redis.db", c.Redis.DB))
	if (c.Redis.SentinelMaster == "") != (len(c.Redis.SentinelAddrs) == 0) {
		errs = append(errs, errors.New("snapshots.redis.sentinel_master and sentinel_addrs go together: "+
			"the name of the primary, and the sentinels that monitor it"))
	}
	errs = append(errs, c.Redis.clusterProblems()...)
	return errors.Join(errs...)
}

// clusterProblems reports what does not go with ClusterAddrs.
func (c RedisConfig) clusterProblems() []error {
	if len(c.ClusterAddrs) == 0 {
		return nil
	}
	var errs []error
	if c.SentinelMaster != "" || len(c.SentinelAddrs) > 0 {
		errs = append(errs, errors.New("snapshots.redis.cluster_addrs and sentinel_master exclude each other: "+
			"Redis Cluster fails over by itself, without sentinels; set one of them"))
	}
	if c.DB != 0 {
		errs = append(errs, fmt.Errorf("snapshots.redis.db: %d with cluster_addrs; Redis Cluster has only database 0", c.DB))
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("snapshots.redis.prefix: %q holds { or } with cluster_addrs; "+
			"ctxproxy puts each session's keys in one hash slot with {} of its own", c.Prefix))
	}
	if slices.Contains(c.ClusterAddrs, "") {
		errs = append(errs, errors.New("snapshots.redis.cluster_addrs: an empty address"))
	}
	return errs
}

// client returns a client of the Redis c describes: the cluster's nodes
// when ClusterAddrs is set (it follows MOVED and ASK redirections and a
// failover), the primary the sentinels name when SentinelMaster is set
// (it follows a failover), else the server at Addr.
func (c RedisConfig) client() redis.UniversalClient {
	if c.cluster() {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.ClusterAddrs, Password: c.Password})
	}
	if c.SentinelMaster != "" {
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: c.SentinelMaster, SentinelAddrs: c.SentinelAddrs, SentinelPassword: c.SentinelPassword,
			Password: c.Password, DB: c.DB,
		})
	}
	return redis.NewClient(&redis.Options{Addr: c.Addr, Password: c.Password, DB: c.DB})
}

// cluster reports whether c is a Redis Cluster.
func (c RedisConfig) cluster() bool { return len(c.ClusterAddrs) > 0 }

// where says which Redis c is, for logs and errors.
func (c RedisConfig) where() string {
	if c.cluster() {
		return "cluster " + strings.Join(c.ClusterAddrs, ",")
	}
	if c.SentinelMaster != "" {
		return fmt.Sprintf("primary %q of the sentinels %s", c.SentinelMaster, strings.Join(c.SentinelAddrs, ","))
	}
	return c.Addr
}
