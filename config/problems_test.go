package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every problem names the key, the value given and what the key takes,
// in the user's terms, not strconv's or mapstructure's; a slip of the
// keyboard gets the nearest key or value; each key is reported once.
func TestProblemsNameKeyValueAndWhatIsAllowed(t *testing.T) {
	env := map[string]string{
		"CTXPROXY_STRATEGY_THRESHOLD":       "abc",
		"CTXPROXY_SNAPSHOTS_FSYNC_INTERVAL": "soon",
		"CTXPROXY_STRATEGY_MODE":            "smartt",
		"CTXPROXY_STRATEGY_COMPOSITE":       "mask,tokn_budget",
		"CTXPROXY_LISTEN":                   "127.0.0.1:99999",
		"CTXPROXY_MAX_BODY":                 "12XB",
		"CTXPROXY_LIMITS_MAX_CONNECTIONS":   "ten",
		"CTXPROXY_COMMANDS_INBAND":          "maybe",
		"CTXPROXY_SNAPSHOTS_STORE":          "reddis",
	}
	_, _, got := Load(LoadOptions{Getenv: func(k string) string { return env[k] }})
	want := []string{
		`strategy.threshold: "abc" is not a number (for example 0.8)`,
		`snapshots.fsync_interval: "soon" is not a duration (for example 500ms, 30s, 5m, 1h)`,
		`strategy.mode: "smartt" is not one of none, sliding_window, token_budget, smart, selective, importance, mask, composite, summarize, hybrid (did you mean "smart"?)`,
		`strategy.composite: "tokn_budget" is not one of none, sliding_window, token_budget, smart, selective, importance, mask, summarize, hybrid (did you mean "token_budget"?)`,
		`listen: port 99999 in "127.0.0.1:99999" is not in 0–65535`,
		`max_body: "12XB" is not a size (for example 512MiB, 32MB, 1GiB or a number of bytes)`,
		`limits.max_connections: "ten" is not a whole number`,
		`commands.inband: "maybe" is not true or false`,
		`snapshots.store: "reddis" is not one of file, redis, none (did you mean "redis"?)`,
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing %q", w)
		}
	}
	for _, p := range got {
		if strings.Contains(p, "strconv") || strings.Contains(p, "rewrite:") || strings.Contains(p, "'") {
			t.Errorf("problem in Go's words: %q", p)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d problems, want %d (one a key):\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
}

func TestUnknownKeysGetTheNearest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("strategy:\n  mod: smart\nsnapshot:\n  dir: x\ncolour: blue\n"), 0o644)
	_, _, got := Load(LoadOptions{Path: file})
	for _, w := range []string{
		`unknown key "strategy.mod" (did you mean "strategy.mode"?)`,
		`unknown key "snapshot" (did you mean "snapshots"?)`,
		`unknown key "colour"`,
	} {
		if !slices.Contains(got, w) {
			t.Errorf("missing %q in %q", w, got)
		}
	}
}

func TestListenPorts(t *testing.T) {
	for listen, ok := range map[string]bool{
		"127.0.0.1:11435": true, ":0": true, "[::1]:65535": true, "localhost:http": true,
		"127.0.0.1:65536": false, "127.0.0.1:-1": false, "nope": false, "127.0.0.1:nosuchservice": false,
	} {
		if got := listenProblem(listen) == ""; got != ok {
			t.Errorf("listen %q accepted = %v, want %v (%s)", listen, got, ok, listenProblem(listen))
		}
	}
}

// A CTXPROXY_ variable ctxproxy does not read is named, with the one it
// probably meant; the variables it reads pass without a word.
func TestUnknownEnv(t *testing.T) {
	got := UnknownEnv([]string{
		"CTXPROXY_STRATEGY_MODEE=x", "CTXPROXY_STRATEGY_MODE=smart", "CTXPROXY_CONFIG=/etc/c.yaml",
		"CTXPROXY_PROXY=http://h", "CTXPROXY_API_KEY=k", "CTXPROXY_ADMIN_TOKEN=t", "HOME=/root",
		"CTXPROXY_WHATEVER=1",
	})
	want := []string{
		`environment variable CTXPROXY_STRATEGY_MODEE is not one ctxproxy reads (did you mean "CTXPROXY_STRATEGY_MODE"?)`,
		`environment variable CTXPROXY_WHATEVER is not one ctxproxy reads`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("UnknownEnv:\n got %q\nwant %q", got, want)
	}
}

func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct{ s, want string }{
		{"smartt", ` (did you mean "smart"?)`},
		{"SMART", ` (did you mean "smart"?)`},
		{"summarise", ` (did you mean "summarize"?)`},
		{"xyz", ``},
		{"smart", ``},
	} {
		if got := didYouMean(tc.s, []string{"smart", "summarize", "mask"}); got != tc.want {
			t.Errorf("didYouMean(%q) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

// A key the configuration checks itself is reported once, in its words;
// every problem a package finds about any other key stays, two about one
// key included.
func TestNotReported(t *testing.T) {
	own := []string{`strategy.mode: "smartt" is not one of none, smart (did you mean "smart"?)`, `unknown key "colour"`}
	pkg := []string{`strategy.mode: rewrite: unknown strategy mode: "smartt"`,
		"gpu.guard.shrink_at: 2 is not in [0, 1]", "gpu.guard: need compress_at (0.9) ≤ shrink_at (0.8)", "gpu.guard: another"}
	got := notReported(own, pkg)
	if want := pkg[1:]; !slices.Equal(got, want) {
		t.Errorf("notReported = %q, want %q", got, want)
	}
}
