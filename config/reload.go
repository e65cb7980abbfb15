package config

import (
	"reflect"
	"strings"

	"github.com/go-viper/mapstructure/v2"
)

// reloadable are the config keys (and key prefixes, ending in ".") a
// running ctxproxy applies without a restart. Every other key that
// changes is reported as needing a restart and left as it is.
var reloadable = []string{"strategy.", "models", "log.level"}

// restartOnly are keys under a reloadable prefix that still need a
// restart: strategy.reserved sizes every model's limits, which are built
// once at start.
var restartOnly = []string{"strategy.reserved"}

// Diff returns the keys that differ between a and b: those a reload
// applies, and those that need a restart. Only key names are returned,
// never values (admin.token and the Redis password are secrets).
func Diff(a, b Config) (applied, restart []string) {
	var am, bm map[string]any
	_ = mapstructure.Decode(a, &am)
	_ = mapstructure.Decode(b, &bm)
	for _, k := range LeafKeys(a) {
		if reflect.DeepEqual(lookup(am, k), lookup(bm, k)) {
			continue
		}
		if Reloadable(k) {
			applied = append(applied, k)
		} else {
			restart = append(restart, k)
		}
	}
	return applied, restart
}

func Reloadable(key string) bool {
	for _, r := range restartOnly {
		if key == r {
			return false
		}
	}
	for _, r := range reloadable {
		if key == r || (strings.HasSuffix(r, ".") && strings.HasPrefix(key, r)) {
			return true
		}
	}
	return false
}
