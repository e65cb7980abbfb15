package config

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/google/go-cmp/cmp"
)

// TestConfigExampleMatchesDefaults loads config.example.yaml: it must be
// valid, name every key, and hold exactly the defaults, so it never drifts
// from the code.
func TestConfigExampleMatchesDefaults(t *testing.T) {
	path := filepath.Join("..", "config.example.yaml")
	c, _, problems := Load(LoadOptions{Path: path})
	if len(problems) > 0 {
		t.Fatalf("config.example.yaml: %v", problems)
	}
	if diff := cmp.Diff(Default(), c); diff != "" {
		t.Errorf("config.example.yaml differs from the defaults (-code +file):\n%s", diff)
	}
	data, _ := os.ReadFile(path)
	for _, key := range LeafKeys(Default()) {
		last := key[strings.LastIndex(key, ".")+1:]
		if !bytes.Contains(data, []byte(last+":")) {
			t.Errorf("config.example.yaml does not document %s", key)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"32MiB": 32 << 20, "512MB": 512e6, "1GiB": 1 << 30, "4096": 4096, "1.5KiB": 1536, " 2 gib ": 2 << 30} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "12XB", "1e3"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", in)
		}
	}
}

func TestDiffConfig(t *testing.T) {
	tests := []struct {
		name             string
		change           func(*Config)
		applied, restart []string
	}{
		{"nothing", func(*Config) {}, nil, nil},
		{"strategy", func(c *Config) { c.Strategy.Mode, c.Strategy.Threshold = "sliding_window", 0.9 },
			[]string{"strategy.mode", "strategy.threshold"}, nil},
		{"nested strategy key", func(c *Config) { c.Strategy.Smart.PreserveLast = 4 }, []string{"strategy.smart.preserve_last"}, nil},
		{"models", func(c *Config) { c.Models = map[string]Model{"x": {MaxTokens: 10}} }, []string{"models"}, nil},
		{"log level and format", func(c *Config) { c.Log.Level, c.Log.Format = "debug", "text" },
			[]string{"log.level"}, []string{"log.format"}},
		{"restart only", func(c *Config) {
			c.Listen, c.Backend.URL, c.Snapshots.Dir = "0.0.0.0:1", "http://x:1", "/elsewhere"
		}, nil, []string{"listen", "backend.url", "snapshots.dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := Default(), Default()
			tt.change(&b)
			applied, restart := Diff(a, b)
			if diff := cmp.Diff(tt.applied, applied); diff != "" {
				t.Errorf("applied (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.restart, restart); diff != "" {
				t.Errorf("restart (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPrecedence: flags beat the environment, which beats the file, which
// beats the defaults; model names with dots stay one key.
func TestPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("listen: 127.0.0.1:1001\nstrategy:\n  mode: token_budget\n  threshold: 0.9\n"+
		"models:\n  llama3.1: {max_tokens: 32768, max_output_tokens: 2048}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CTXPROXY_LISTEN": "127.0.0.1:1002", "CTXPROXY_STRATEGY_THRESHOLD": "0.85",
		"CTXPROXY_CONTEXT_VRAM_BUFFER": "1GiB"}
	c, used, problems := Load(LoadOptions{Path: file, Getenv: func(k string) string { return env[k] },
		Flags: map[string]string{"listen": "127.0.0.1:1003"}})
	if len(problems) > 0 || used != file {
		t.Fatalf("problems %v, file %q", problems, used)
	}
	if c.Listen != "127.0.0.1:1003" || c.Strategy.Threshold != 0.85 || c.Strategy.Mode != "token_budget" ||
		c.Context.VRAMBuffer != 1<<30 || c.Models["llama3.1"].MaxTokens != 32768 {
		t.Errorf("loaded %+v", c)
	}
}

// TestSummarizeValidatedByItsPackage: the summarize: section is checked
// by rewrite.SummarizeConfig alone, which allows the negative values its
// documentation gives a meaning and refuses the others.
func TestSummarizeValidatedByItsPackage(t *testing.T) {
	c := Default()
	c.Summarize.KeepRecent, c.Summarize.PrefetchAt = -1, -1 // none kept verbatim; never prefetch
	if p := append(c.validate(), c.packageProblems()...); len(p) > 0 {
		t.Errorf("documented negative values refused: %v", p)
	}
	c.Summarize.MaxTokens = -5
	if p := c.packageProblems(); len(p) != 1 || !strings.Contains(p[0], "summarize.max_tokens") {
		t.Errorf("a negative max_tokens: %v", p)
	}
}

// strategy.reserved, a safety margin in tokens, reaches every
// model's effective limit (100000 − 4096 − 1000 = 94904), and changing it
// needs a restart.
func TestStrategyReserved(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	yaml := "strategy:\n  reserved: 1000\nmodels:\n  m: {max_tokens: 100000, max_output_tokens: 4096}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _, problems := Load(LoadOptions{Path: file})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	reg := budget.NewRegistry(c.BudgetConfig(), nil)
	if got := reg.Window("m", 0).Effective(); got != 94904 {
		t.Errorf("effective limit %d, want 94904", got)
	}
	applied, restart := Diff(Default(), c)
	if !slices.Contains(restart, "strategy.reserved") || slices.Contains(applied, "strategy.reserved") {
		t.Errorf("applied %v, restart %v: strategy.reserved needs a restart", applied, restart)
	}
	c.Strategy.Reserved = -1
	if p := append(c.validate(), c.packageProblems()...); !slices.ContainsFunc(p, func(s string) bool { return strings.HasPrefix(s, "strategy.reserved") }) {
		t.Errorf("a negative strategy.reserved is not a problem: %v", p)
	}
}

// snapshots.fsync_interval reaches the store; a negative one (fsync every
// turn) is valid, and changing it needs a restart like its siblings.
func TestSnapshotsFsyncInterval(t *testing.T) {
	if got := Default().SnapshotsConfig().FsyncInterval; got != time.Second {
		t.Errorf("default fsync_interval %v, want 1s", got)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("snapshots:\n  fsync_interval: -1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _, problems := Load(LoadOptions{Path: file})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if got := c.SnapshotsConfig().FsyncInterval; got != -time.Second {
		t.Errorf("fsync_interval: -1s loads as %v", got)
	}
	if applied, restart := Diff(Default(), c); len(applied) != 0 || !slices.Equal(restart, []string{"snapshots.fsync_interval"}) {
		t.Errorf("Diff: applied %v, restart %v", applied, restart)
	}
}

// snapshots.redis.cluster_addrs reaches the store, needs a restart, and
// what does not go with it (database 1) is reported by check-config.
func TestSnapshotsRedisCluster(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	yaml := "snapshots:\n  store: redis\n  redis:\n    cluster_addrs: [10.0.0.1:7000, 10.0.0.2:7000]\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _, problems := Load(LoadOptions{Path: file})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if got := c.SnapshotsConfig().Redis.ClusterAddrs; !slices.Equal(got, []string{"10.0.0.1:7000", "10.0.0.2:7000"}) {
		t.Errorf("cluster_addrs loads as %q", got)
	}
	if _, restart := Diff(Default(), c); !slices.Contains(restart, "snapshots.redis.cluster_addrs") {
		t.Errorf("restart %v: cluster_addrs needs a restart", restart)
	}
	if err := os.WriteFile(file, []byte(yaml+"    db: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, problems = Load(LoadOptions{Path: file})
	want := "snapshots.redis.db: 1 with cluster_addrs; Redis Cluster has only database 0"
	if !slices.Contains(problems, want) {
		t.Errorf("problems %q, want %q", problems, want)
	}
}

// tokens.prepare, prepare_interval, prepare_max_models, prepare_max_memory
// and models_dir load from the environment, need a restart, and bad
// values are problems, every one.
func TestTokensPrepare(t *testing.T) {
	env := map[string]string{"CTXPROXY_TOKENS_PREPARE": "loaded", "CTXPROXY_TOKENS_PREPARE_INTERVAL": "0",
		"CTXPROXY_TOKENS_PREPARE_MAX_MODELS": "4", "CTXPROXY_TOKENS_PREPARE_MAX_MEMORY": "64MiB", "CTXPROXY_TOKENS_MODELS_DIR": "/srv/ollama"}
	c, _, problems := Load(LoadOptions{Getenv: func(k string) string { return env[k] }})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if c.Tokens.Prepare != "loaded" || c.Tokens.PrepareInterval != 0 || c.Tokens.PrepareMaxModels != 4 ||
		c.Tokens.PrepareMaxMemory != 64<<20 || c.Tokens.ModelsDir != "/srv/ollama" {
		t.Errorf("loaded %+v", c.Tokens)
	}
	if applied, restart := Diff(Default(), c); len(applied) != 0 || len(restart) != 5 {
		t.Errorf("Diff: applied %v, restart %v", applied, restart)
	}
	env = map[string]string{"CTXPROXY_TOKENS_PREPARE": "some", "CTXPROXY_TOKENS_PREPARE_INTERVAL": "-1s",
		"CTXPROXY_TOKENS_PREPARE_MAX_MODELS": "0", "CTXPROXY_TOKENS_PREPARE_MAX_MEMORY": "0"}
	_, _, problems = Load(LoadOptions{Getenv: func(k string) string { return env[k] }})
	want := []string{
		`tokens.prepare: "some" is not one of loaded, all, none`,
		"tokens.prepare_interval: must not be negative (0 lists the models once, at start)",
		"tokens.prepare_max_models: 0 must be positive",
		"tokens.prepare_max_memory: 0 must be positive",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems %q, want %q", problems, want)
	}
}
