package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// DefaultFile is read when it exists and no --config names another;
// serve watches for it to appear.
const DefaultFile = "ctxproxy.yaml"

// normalize fixes what a user plainly meant: a backend URL that names the
// OpenAI layer (http://host:11434/v1) is the server's root, since
// ctxproxy adds /v1 and /api itself; otherwise every route would go to
// /v1/v1/… and answer 404. What it changed is in Notes.
func (c *Config) normalize() {
	u, err := url.Parse(c.Backend.URL)
	if err != nil {
		return
	}
	if p := strings.TrimRight(u.Path, "/"); strings.HasSuffix(p, "/v1") {
		u.Path = strings.TrimSuffix(p, "/v1")
		c.Notes = append(c.Notes, fmt.Sprintf("backend.url %s ends in /v1: using the server's root %s (ctxproxy adds /v1 and /api itself)",
			RedactURL(c.Backend.URL), u.Redacted()))
		c.Backend.URL = u.String()
	}
}

// Config is ctxproxy's whole configuration, as read from the YAML file,
// CTXPROXY_* environment variables and flags (flags > env > file >
// defaults). Keys are snake_case; config.example.yaml documents each one.
type Config struct {
	Listen        string        `mapstructure:"listen"`
	MaxBody       ByteSize      `mapstructure:"max_body"`
	ShutdownGrace time.Duration `mapstructure:"shutdown_grace"`
	// AllowedHosts and AllowedOrigins extend the Host and Origin checks
	// against DNS rebinding (edge.HostPolicy).
	AllowedHosts   []string `mapstructure:"allowed_hosts"`
	AllowedOrigins []string `mapstructure:"allowed_origins"`
	// Notes say what normalize changed, for the start-up log.
	Notes []string `mapstructure:"-"`

	Backend Backend `mapstructure:"backend"`
	// Backends are several servers behind one ctxproxy (backends.go);
	// empty: the one backend.url.
	Backends  []Server                `mapstructure:"backends"`
	Session   Session                 `mapstructure:"session"`
	Tokens    Tokens                  `mapstructure:"tokens"`
	Context   Context                 `mapstructure:"context"`
	Strategy  Strategy                `mapstructure:"strategy"`
	Summarize rewrite.SummarizeConfig `mapstructure:"summarize"`
	GPU       GPU                     `mapstructure:"gpu"`
	Snapshots Snapshots               `mapstructure:"snapshots"`
	Models    map[string]Model        `mapstructure:"models"`
	Commands  Commands                `mapstructure:"commands"`
	Admin     Admin                   `mapstructure:"admin"`
	Limits    Limits                  `mapstructure:"limits"`
	Log       Log                     `mapstructure:"log"`
}

// Backend is the server ctxproxy forwards to.
type Backend struct {
	URL                   string        `mapstructure:"url"`
	Kind                  string        `mapstructure:"kind"`
	TranslateOpenAI       string        `mapstructure:"translate_openai"`
	ResponseHeaderTimeout time.Duration `mapstructure:"response_header_timeout"`
	DialTimeout           time.Duration `mapstructure:"dial_timeout"`
	// Routing chooses among backends:: sessions (each session where its
	// prompt cache is) or round_robin.
	Routing string `mapstructure:"routing"`
	// ProbeInterval is how often each of backends: is probed between
	// requests.
	ProbeInterval time.Duration `mapstructure:"probe_interval"`
}

// Session says how requests map to sessions.
type Session struct {
	Header      string `mapstructure:"header"`
	Fingerprint bool   `mapstructure:"fingerprint"`
	// ClientIDs names a session after the id a coding agent sends of its
	// own (Claude Code's, Codex's) when the session header is absent.
	ClientIDs  bool `mapstructure:"client_ids"`
	Accumulate bool `mapstructure:"accumulate"`
	// ScopeHeader lists the headers whose values scope sessions to their
	// caller (one name or several).
	ScopeHeader []string `mapstructure:"scope_header"`
}

// Tokens is how tokens are counted.
type Tokens struct {
	Encoding            string  `mapstructure:"encoding"`
	ApproxCharsPerToken float64 `mapstructure:"approx_chars_per_token"`
	ImageTokens         int     `mapstructure:"image_tokens"`
	Calibrate           bool    `mapstructure:"calibrate"`
	Exact               bool    `mapstructure:"exact"`
	CacheEntries        int     `mapstructure:"cache_entries"`
	// TokenizerDir keeps what builds each Ollama model's tokenizer
	// across restarts; "" is snapshots.dir/tokenizers, "none" keeps
	// nothing.
	TokenizerDir string `mapstructure:"tokenizer_dir"`
	// Prepare is which Ollama models have their tokenizer built before
	// their first request: loaded, all or none.
	Prepare string `mapstructure:"prepare"`
	// PrepareInterval is how often the backend's models are listed for
	// Prepare; 0 lists them once, at start.
	PrepareInterval time.Duration `mapstructure:"prepare_interval"`
	// PrepareMaxModels is how many models are prepared in the background
	// at most.
	PrepareMaxModels int `mapstructure:"prepare_max_models"`
	// PrepareMaxMemory is how much the vocabularies prepared in the
	// background may hold at most.
	PrepareMaxMemory ByteSize `mapstructure:"prepare_max_memory"`
	// ModelsDir is Ollama's model directory on this machine, watched so
	// that a model created or pulled is listed and prepared at once:
	// "auto" (OLLAMA_MODELS or Ollama's own places, for a server on
	// loopback), "none", or a path.
	ModelsDir string `mapstructure:"models_dir"`
}

// Context is how the context window (Ollama's num_ctx) is sized.
type Context struct {
	AutoSize       bool     `mapstructure:"auto_size"`
	TargetSize     int      `mapstructure:"target_size"`
	MinSize        int      `mapstructure:"min_size"`
	MaxSize        int      `mapstructure:"max_size"`
	VRAMBuffer     ByteSize `mapstructure:"vram_buffer"`
	KVQuantization string   `mapstructure:"kv_quantization"`
	NumParallel    int      `mapstructure:"num_parallel"`
	ReserveOutput  int      `mapstructure:"reserve_output"`
	RespectClient  bool     `mapstructure:"respect_client"`
	ModelNumCtx    string   `mapstructure:"model_num_ctx"`
}

// Strategy is how a conversation is cut when it outgrows the window.
type Strategy struct {
	Mode       string  `mapstructure:"mode"`
	Threshold  float64 `mapstructure:"threshold"`
	Target     float64 `mapstructure:"target"`
	OnOverflow string  `mapstructure:"on_overflow"`
	// Reserved is a safety margin, in tokens, kept free
	// of every model's window besides the reply reserve (effective limit
	// = window − reply reserve − reserved).
	Reserved int `mapstructure:"reserved"`
	// Agent-framework triggers and targets (rewrite.Config): 0 is off.
	TriggerTokens   int `mapstructure:"trigger_tokens"`
	TriggerMessages int `mapstructure:"trigger_messages"`
	KeepTokens      int `mapstructure:"keep_tokens"`
	KeepMessages    int `mapstructure:"keep_messages"`
	SlidingWindow   struct {
		WindowSize     int  `mapstructure:"window_size"`
		PreserveSystem bool `mapstructure:"preserve_system"`
	} `mapstructure:"sliding_window"`
	Smart struct {
		PreserveFirst int `mapstructure:"preserve_first"`
		PreserveLast  int `mapstructure:"preserve_last"`
	} `mapstructure:"smart"`
	Selective struct {
		PreserveRoles  []string `mapstructure:"preserve_roles"`
		PreserveMarked bool     `mapstructure:"preserve_marked"`
	} `mapstructure:"selective"`
	Importance struct {
		PreserveAbove  float64 `mapstructure:"preserve_above"`
		PreserveRecent int     `mapstructure:"preserve_recent"`
	} `mapstructure:"importance"`
	ToolResults struct {
		MaxTokens int `mapstructure:"max_tokens"`
	} `mapstructure:"tool_results"`
	Mask struct {
		KeepLast  int `mapstructure:"keep_last"`
		MaxTokens int `mapstructure:"max_tokens"`
	} `mapstructure:"mask"`
	Composite []string `mapstructure:"composite"`
}

// GPU is how memory is measured and guarded.
type GPU struct {
	Probe      string        `mapstructure:"probe"`
	PollActive time.Duration `mapstructure:"poll_active"`
	PollIdle   time.Duration `mapstructure:"poll_idle"`
	Guard      struct {
		CompressAt  float64 `mapstructure:"compress_at"`
		ShrinkAt    float64 `mapstructure:"shrink_at"`
		EmergencyAt float64 `mapstructure:"emergency_at"`
	} `mapstructure:"guard"`
}

// Snapshots is where sessions and snapshots are kept.
type Snapshots struct {
	Store         string  `mapstructure:"store"`
	Dir           string  `mapstructure:"dir"`
	AutoThreshold float64 `mapstructure:"auto_threshold"`
	MaxCount      int     `mapstructure:"max_count"`
	// FsyncInterval is snapshots.Config.FsyncInterval; negative fsyncs
	// every appended turn before it counts as stored.
	FsyncInterval time.Duration `mapstructure:"fsync_interval"`
	// TTL, MaxSessions and MaxBytes bound what is kept
	// (snapshots.Retention).
	TTL         time.Duration `mapstructure:"ttl"`
	MaxSessions int           `mapstructure:"max_sessions"`
	MaxBytes    ByteSize      `mapstructure:"max_bytes"`
	// Redis is where the Redis store is: snapshots' own settings, under
	// the same keys.
	Redis snapshots.RedisConfig `mapstructure:"redis"`
}

// Model overrides what ctxproxy knows of one model.
type Model struct {
	MaxTokens       int `mapstructure:"max_tokens"`
	MaxOutputTokens int `mapstructure:"max_output_tokens"`
	// Multiplier is the starting correction of this model's token
	// estimates; calibration refines it. 0 means 1.
	Multiplier float64 `mapstructure:"multiplier"`
}

// Commands turns on in-band /context commands.
type Commands struct {
	Inband bool `mapstructure:"inband"`
}

// Admin protects the admin API.
type Admin struct {
	Token string `mapstructure:"token"`
}

// Limits bounds what clients can make ctxproxy hold.
type Limits struct {
	MaxConnections int           `mapstructure:"max_connections"`
	MaxInflight    int           `mapstructure:"max_inflight"`
	BodyMemory     ByteSize      `mapstructure:"body_memory"`
	QueueWait      time.Duration `mapstructure:"queue_wait"`
	MinBodyRate    ByteSize      `mapstructure:"min_body_rate"`
}

// Log is how ctxproxy logs.
type Log struct {
	Level  string `mapstructure:"level"`
	Format string `mapstructure:"format"`
}

// Default is the configuration with every default filled in, as
// config.example.yaml lists it (TestConfigExampleMatchesDefaults).
func Default() Config {
	var c Config
	c.Listen = "127.0.0.1:11435"
	c.MaxBody = 32 << 20
	c.ShutdownGrace = 30 * time.Second
	c.AllowedHosts, c.AllowedOrigins = []string{}, []string{}
	c.Backend = Backend{URL: "http://127.0.0.1:11434", Kind: "auto", TranslateOpenAI: "auto",
		ResponseHeaderTimeout: 5 * time.Minute, DialTimeout: 10 * time.Second, Routing: "sessions", ProbeInterval: 5 * time.Second}
	c.Backends = []Server{}
	c.Session = Session{Header: "X-Session-ID", Fingerprint: true, ClientIDs: true, ScopeHeader: []string{"Authorization", "X-Api-Key", "Api-Key"}}
	c.Tokens = Tokens{Encoding: "auto", ApproxCharsPerToken: 4, ImageTokens: 768, Calibrate: true, Exact: true, CacheEntries: 100000,
		Prepare: "all", PrepareInterval: 10 * time.Second, PrepareMaxModels: 16, PrepareMaxMemory: 256 << 20, ModelsDir: "auto"}
	c.Context = Context{AutoSize: true, MinSize: 2048, MaxSize: 131072, VRAMBuffer: 512 << 20,
		KVQuantization: "f16", NumParallel: 1, ReserveOutput: 1024, RespectClient: true, ModelNumCtx: "ceiling"}
	c.Strategy.Mode = "smart"
	c.Strategy.Threshold = 0.80
	c.Strategy.Target = 0.60
	c.Strategy.OnOverflow = "shrink"
	c.Strategy.SlidingWindow.WindowSize = 10
	c.Strategy.SlidingWindow.PreserveSystem = true
	c.Strategy.Smart.PreserveFirst = 2
	c.Strategy.Smart.PreserveLast = 10
	c.Strategy.Selective.PreserveRoles = []string{"system", "user"}
	c.Strategy.Selective.PreserveMarked = true
	c.Strategy.Importance.PreserveAbove = 0.8
	c.Strategy.Importance.PreserveRecent = 5
	c.Strategy.ToolResults.MaxTokens = 1000
	c.Strategy.Mask.KeepLast = 3
	c.Strategy.Composite = []string{"smart", "token_budget"}
	c.Summarize = rewrite.SummarizeConfig{KeepRecent: 3, MinMessages: 6, MaxTokens: 256, Timeout: 60 * time.Second,
		Schedule: rewrite.ScheduleAuto, PrefetchAt: 0.70, Wait: 2 * time.Second}
	c.GPU.Probe = "auto"
	c.GPU.PollActive = 5 * time.Second
	c.GPU.PollIdle = 60 * time.Second
	c.GPU.Guard.CompressAt = 0.80
	c.GPU.Guard.ShrinkAt = 0.90
	c.GPU.Guard.EmergencyAt = 0.95
	c.Snapshots.Store = "file"
	c.Snapshots.Dir = "./ctxproxy-data"
	c.Snapshots.AutoThreshold = 0.80
	c.Snapshots.MaxCount = 20
	c.Snapshots.FsyncInterval = time.Second
	c.Snapshots.Redis.Addr = snapshots.DefaultRedisAddr
	c.Snapshots.Redis.Prefix = snapshots.DefaultRedisPrefix
	c.Snapshots.Redis.TurnWait = snapshots.DefaultTurnWait
	c.Snapshots.Redis.SentinelAddrs = []string{}
	c.Snapshots.Redis.ClusterAddrs = []string{}
	c.Models = map[string]Model{}
	c.Log = Log{Level: "info", Format: "auto"}
	c.Limits = Limits{MaxConnections: 4096, MaxInflight: 512, BodyMemory: 512 << 20, QueueWait: 2 * time.Second,
		MinBodyRate: 16 << 10}
	return c
}

// LoadOptions is where configuration comes from.
type LoadOptions struct {
	// Path is the --config file; "" means ./ctxproxy.yaml when it exists.
	Path string
	// Getenv reads CTXPROXY_* variables; nil reads none.
	Getenv func(string) string
	// Flags are the config keys set on the command line, highest
	// precedence.
	Flags map[string]string
}

// Load reads the configuration and returns it with every problem
// found (unknown keys, bad values), so check-config can print them all.
func Load(opts LoadOptions) (Config, string, []string) {
	// Viper's key delimiter is "::", not ".": model names under models:
	// carry dots (llama3.1, qwen2.5) and must stay one key.
	v := viper.NewWithOptions(viper.KeyDelimiter("::"))
	vkey := func(dotted string) string { return strings.ReplaceAll(dotted, ".", "::") }
	def := Default()
	keys := LeafKeys(def)
	var defMap map[string]any
	_ = mapstructure.Decode(def, &defMap)
	for _, k := range keys {
		v.SetDefault(vkey(k), lookup(defMap, k))
	}

	var problems []string
	path := opts.Path
	if path == "" {
		if _, err := os.Stat(DefaultFile); err == nil {
			path = DefaultFile
		}
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return def, path, []string{fmt.Sprintf("config file: %v", err)}
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return def, path, []string{fmt.Sprintf("config file %s: %v", path, err)}
		}
	}
	// Environment: CTXPROXY_<SECTION>_<KEY>, read through getenv so tests
	// can inject it. Set before flags so that flags win.
	if opts.Getenv != nil {
		for _, k := range keys {
			if val := opts.Getenv(EnvName(k)); val != "" {
				v.Set(vkey(k), val)
			}
		}
	}
	for k, val := range opts.Flags {
		v.Set(vkey(k), val)
	}

	// Decode over the defaults: a field that fails to decode keeps its
	// default, so validation can still report every other problem.
	c := Default()
	hook := viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		byteSizeHook,
		serversHook,
		mapstructure.StringToTimeDurationHookFunc(),
		mapstructure.StringToSliceHookFunc(","),
	))
	if err := v.UnmarshalExact(&c, hook); err != nil {
		value := func(k string) any { return v.Get(vkey(k)) }
		def := func(k string) any { return lookup(defMap, k) }
		problems = append(problems, splitDecodeError(err, keys, value, def)...)
	}
	c.normalize()
	problems = append(problems, c.validate()...)
	return c, path, append(problems, notReported(problems, c.packageProblems())...)
}

// splitDecodeError turns mapstructure's combined error into one problem a
// line: an unknown key with the nearest known one, a bad value with the
// key, the value and what the key takes (decodeProblem).
func splitDecodeError(err error, keys []string, value, def func(string) any) []string {
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		if line == "" || strings.HasSuffix(line, "error(s) decoding:") || strings.HasPrefix(line, "decoding failed") {
			continue
		}
		if strings.Contains(line, "has invalid keys:") {
			i := strings.Index(line, "has invalid keys:")
			section := strings.Trim(strings.TrimSpace(line[:i]), "'")
			for _, k := range strings.Split(line[i+len("has invalid keys:"):], ",") {
				k = strings.TrimSpace(k)
				if section != "" {
					k = section + "." + k
				}
				out = append(out, unknownKey(k, keys))
			}
			continue
		}
		out = append(out, decodeProblem(line, value, def))
	}
	if len(out) == 0 {
		out = append(out, err.Error())
	}
	return out
}

func oneOf(problems *[]string, key, val string, allowed ...string) {
	if !slices.Contains(allowed, val) {
		*problems = append(*problems, fmt.Sprintf("%s: %q is not one of %s%s", key, val, strings.Join(allowed, ", "), didYouMean(val, allowed)))
	}
}

func positive(problems *[]string, key string, val int64) {
	if val <= 0 {
		*problems = append(*problems, fmt.Sprintf("%s: %d must be positive", key, val))
	}
}

// validate returns every problem with c at once.
func (c Config) validate() []string {
	var p []string
	if problem := listenProblem(c.Listen); problem != "" {
		p = append(p, problem)
	}
	positive(&p, "max_body", int64(c.MaxBody))
	if c.ShutdownGrace < 0 {
		p = append(p, "shutdown_grace: must not be negative")
	}
	if u, err := url.Parse(c.Backend.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p = append(p, fmt.Sprintf("backend.url: %q is not an http(s) URL", RedactURL(c.Backend.URL)))
	}
	oneOf(&p, "backend.kind", c.Backend.Kind, "auto", "ollama", "openai")
	oneOf(&p, "backend.translate_openai", c.Backend.TranslateOpenAI, "auto", "on", "off")
	positive(&p, "backend.response_header_timeout", int64(c.Backend.ResponseHeaderTimeout))
	positive(&p, "backend.dial_timeout", int64(c.Backend.DialTimeout))
	p = append(p, c.serversProblems()...)
	if c.Session.Header == "" {
		p = append(p, "session.header: must not be empty")
	}
	// tokens: and models: are validated by budget.Config (packageProblems),
	// but for the preparation of tokenizers.
	oneOf(&p, "tokens.prepare", c.Tokens.Prepare, "loaded", "all", "none")
	if c.Tokens.PrepareInterval < 0 {
		p = append(p, "tokens.prepare_interval: must not be negative (0 lists the models once, at start)")
	}
	positive(&p, "tokens.prepare_max_models", int64(c.Tokens.PrepareMaxModels))
	positive(&p, "tokens.prepare_max_memory", int64(c.Tokens.PrepareMaxMemory))
	if c.Snapshots.TTL < 0 || c.Snapshots.MaxSessions < 0 || c.Snapshots.MaxBytes < 0 {
		p = append(p, "snapshots.ttl, snapshots.max_sessions and snapshots.max_bytes: must not be negative (0 keeps every session)")
	}
	positive(&p, "limits.max_connections", int64(c.Limits.MaxConnections))
	positive(&p, "limits.max_inflight", int64(c.Limits.MaxInflight))
	positive(&p, "limits.body_memory", int64(c.Limits.BodyMemory))
	positive(&p, "limits.min_body_rate", int64(c.Limits.MinBodyRate))
	if c.Limits.QueueWait <= 0 {
		p = append(p, "limits.queue_wait: must be positive")
	}
	if c.Limits.BodyMemory > 0 && c.Limits.BodyMemory < c.MaxBody {
		p = append(p, fmt.Sprintf("limits.body_memory (%s) is smaller than max_body (%s): a largest request could never be served",
			c.Limits.BodyMemory, c.MaxBody))
	}
	// context: is validated by gpu.Config and budget.Config
	// (packageProblems), but for the buffer only ctxproxy reads.
	if c.Context.VRAMBuffer < 0 {
		p = append(p, "context.vram_buffer: must not be negative")
	}
	// strategy.mode and composite are checked here, with the modes
	// named; threshold, target and on_overflow by rewrite.Config,
	// strategy.reserved by budget.Config (packageProblems); the per-mode
	// knobs here.
	p = append(p, modeProblems(c.Strategy.Mode, c.Strategy.Composite)...)
	positive(&p, "strategy.sliding_window.window_size", int64(c.Strategy.SlidingWindow.WindowSize))
	if c.Strategy.Smart.PreserveFirst < 0 || c.Strategy.Smart.PreserveLast < 1 {
		p = append(p, "strategy.smart: preserve_first must be ≥ 0 and preserve_last ≥ 1")
	}
	if c.Strategy.Importance.PreserveAbove < 0 || c.Strategy.Importance.PreserveAbove > 1 {
		p = append(p, "strategy.importance.preserve_above: must be in [0, 1]")
	}
	if c.Strategy.Importance.PreserveRecent < 0 {
		p = append(p, "strategy.importance.preserve_recent: must not be negative")
	}
	positive(&p, "strategy.tool_results.max_tokens", int64(c.Strategy.ToolResults.MaxTokens))
	if c.Strategy.Mask.KeepLast < 0 || c.Strategy.Mask.MaxTokens < 0 {
		p = append(p, "strategy.mask: keep_last and max_tokens must not be negative")
	}
	// summarize: is validated by rewrite.SummarizeConfig (packageProblems).
	// gpu: is validated by gpu.Config (packageProblems).
	oneOf(&p, "snapshots.store", c.Snapshots.Store, "file", "redis", StoreNone)
	if c.Snapshots.Store == "file" && c.Snapshots.Dir == "" {
		p = append(p, "snapshots.dir: must not be empty with the file store")
	}
	// snapshots.auto_threshold, max_count and redis are validated by
	// snapshots.Config (packageProblems).
	oneOf(&p, "log.level", strings.ToLower(c.Log.Level), "debug", "info", "warn", "error")
	oneOf(&p, "log.format", c.Log.Format, "auto", "text", "json")
	return p
}

// LeafKeys lists the dotted keys of every leaf of the config (maps such as
// models count as one leaf).
func LeafKeys(c Config) []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := f.Tag.Get("mapstructure")
			if name == "" || name == "-" {
				continue
			}
			key := prefix + name
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
				walk(f.Type, key+".")
				continue
			}
			out = append(out, key)
		}
	}
	walk(reflect.TypeOf(c), "")
	return out
}

func lookup(m map[string]any, dotted string) any {
	var cur any = m
	for _, part := range strings.Split(dotted, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[part]
	}
	return cur
}

var ErrInvalid = errors.New("invalid configuration")

// RedactURL hides a password in a URL (http://user:xxxxx@host) for logs
// and messages; what does not parse is shown up to its first "@" hidden.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "xxxxx" + raw[i:]
	}
	return raw
}
