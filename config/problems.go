package config

import (
	"fmt"
	"net"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/rewrite"
)

// decodeLine is one line of mapstructure's error: the key in quotes, then
// what went wrong in Go's words.
var decodeLine = regexp.MustCompile(`^'([^']+)' (.*)$`)

// decodeProblem rewrites one line of mapstructure's error as the key, the
// value given and what the key takes: "strategy.threshold: "abc" is not a
// number (for example 0.8)" instead of strconv's "invalid syntax".
// value reads the value given for a key; def, the key's default.
func decodeProblem(line string, value, def func(key string) any) string {
	m := decodeLine.FindStringSubmatch(line)
	if m == nil {
		return line
	}
	key := m[1]
	want := kindOf(def(key))
	if want == "" {
		return key + ": " + m[2]
	}
	return fmt.Sprintf("%s: %s is not %s", key, shown(value(key)), want)
}

// shown is a value as a user wrote it: strings quoted, others as YAML
// would print them.
func shown(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// kindOf says what a key whose default is def takes, with an example.
func kindOf(def any) string {
	switch def.(type) {
	case ByteSize:
		return "a size (for example 512MiB, 32MB, 1GiB or a number of bytes)"
	case time.Duration:
		return "a duration (for example 500ms, 30s, 5m, 1h)"
	case float64, float32:
		return "a number (for example 0.8)"
	case int, int64, int32, uint64:
		return "a whole number"
	case bool:
		return "true or false"
	case []string:
		return "a list (YAML [a, b], or commas in an environment variable)"
	}
	if def != nil && reflect.TypeOf(def).Kind() == reflect.Map {
		return "a map"
	}
	return ""
}

// unknownKey names a key the configuration does not have, with the
// nearest one it does.
func unknownKey(key string, keys []string) string {
	return fmt.Sprintf("unknown key %q%s", key, didYouMean(key, withSections(keys)))
}

// withSections adds each key's sections (strategy, strategy.smart) to
// keys, so that a misspelt section finds its match.
func withSections(keys []string) []string {
	out := slices.Clone(keys)
	for _, k := range keys {
		for i := strings.LastIndex(k, "."); i > 0; i = strings.LastIndex(k[:i], ".") {
			if !slices.Contains(out, k[:i]) {
				out = append(out, k[:i])
			}
		}
	}
	return out
}

// listenProblem checks listen as serve will bind it: host:port with a
// port from 0 to 65535 (or a service name the system knows).
func listenProblem(listen string) string {
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Sprintf("listen: %q is not host:port (for example 127.0.0.1:11435 or :11435)", listen)
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Sprintf("listen: port %d in %q is not in 0–65535", n, listen)
		}
		return ""
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Sprintf("listen: port %q in %q is not a number or a known service", port, listen)
	}
	return ""
}

// modeProblems checks strategy.mode and strategy.composite against the
// modes there are, naming them and the nearest one.
func modeProblems(mode string, composite []string) []string {
	var p []string
	modes := rewrite.Modes()
	if !slices.Contains(modes, mode) {
		p = append(p, fmt.Sprintf("strategy.mode: %q is not one of %s%s", mode, strings.Join(modes, ", "), didYouMean(mode, modes)))
	}
	parts := slices.DeleteFunc(slices.Clone(modes), func(m string) bool { return m == "composite" })
	for _, m := range composite {
		if !slices.Contains(parts, m) {
			p = append(p, fmt.Sprintf("strategy.composite: %q is not one of %s%s", m, strings.Join(parts, ", "), didYouMean(m, parts)))
		}
	}
	return p
}

// notReported returns the packages' problems about keys the
// configuration's own checks did not report already: a few keys
// (snapshots.store, strategy.mode) are checked on both sides, and the
// configuration's message names more (every value allowed, the nearest
// one). Two problems a package reports about one key both stay.
func notReported(own, pkg []string) []string {
	seen := map[string]bool{}
	for _, p := range own {
		if key, _, ok := strings.Cut(p, ": "); ok {
			seen[key] = true
		}
	}
	var out []string
	for _, p := range pkg {
		if key, _, ok := strings.Cut(p, ": "); ok && seen[key] {
			continue
		}
		out = append(out, p)
	}
	return out
}

// didYouMean returns ` (did you mean "x"?)` for the candidate nearest to
// s, when one is near enough to be a slip of the keyboard; else "".
func didYouMean(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD == 0 && best == s || bestD > max(1, min(3, len(s)/4)) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// otherEnv are the CTXPROXY_ variables that are not configuration keys
// (docs/configuration.md, "Other environment variables").
var otherEnv = []string{"CTXPROXY_CONFIG", "CTXPROXY_PROXY", "CTXPROXY_API_KEY", "CTXPROXY_BIN"}

// EnvName is the environment variable that sets a configuration key:
// CTXPROXY_ and the key in capitals, its dots as underscores.
func EnvName(key string) string {
	return "CTXPROXY_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// UnknownEnv returns a warning for each CTXPROXY_ variable in environ
// ("NAME=value" pairs, as os.Environ gives them) that ctxproxy does not
// read, with the nearest one it does: a misspelt variable would
// otherwise be ignored without a word.
func UnknownEnv(environ []string) []string {
	known := slices.Clone(otherEnv)
	for _, k := range LeafKeys(Default()) {
		known = append(known, EnvName(k))
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "CTXPROXY_") || slices.Contains(known, name) {
			continue
		}
		out = append(out, fmt.Sprintf("environment variable %s is not one ctxproxy reads%s", name, didYouMean(name, known)))
	}
	return out
}
