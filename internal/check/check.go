// Package check holds the range checks that the configuration's Validate
// methods (budget, gpu, rewrite, snapshots) share, so that a key with a
// bad value reads the same whichever package checks it: "key: value is
// negative", "key: value is not in [lo, hi]", "key: "value" is not one of
// a, b". Each returns nil for a good value; errors.Join, which drops nils,
// gathers them.
package check

import (
	"fmt"
	"slices"
	"strings"
)

// number is what NotNegative takes.
type number interface {
	~int | ~int64 | ~float64
}

// NotNegative reports v when it is below 0.
func NotNegative[T number](key string, v T) error {
	if v < 0 {
		return fmt.Errorf("%s: %v is negative", key, v)
	}
	return nil
}

// Within reports v when it is outside [lo, hi], NaN included.
func Within(key string, v, lo, hi float64) error {
	if !(v >= lo && v <= hi) {
		return fmt.Errorf("%s: %v is not in [%v, %v]", key, v, lo, hi)
	}
	return nil
}

// OneOf reports v when it is neither empty (the default) nor one of
// allowed.
func OneOf(key, v string, allowed ...string) error {
	if v != "" && !slices.Contains(allowed, v) {
		return fmt.Errorf("%s: %q is not one of %s", key, v, strings.Join(allowed, ", "))
	}
	return nil
}
