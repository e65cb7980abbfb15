// Package adminapi declares the JSON of ctxproxy's admin API, status and
// tokenize routes (docs/admin-api.md): the server writes these types and
// ctxproxy's own client, REPL and in-band commands read them, so each
// shape exists once and the two sides cannot drift apart.
//
// The package is a leaf: it imports nothing of ctxproxy, so every other
// package may use it. Fields are always present unless tagged omitempty.
// The snapshots package's stored format is its own, but for the shapes
// the two share: Budget, which the planner, the stored session and the
// admin answer all carry, and SnapshotInfo, a snapshot's entry in the
// store's index and in the admin API's list.
package adminapi

import (
	"cmp"
	"strings"
	"time"
)

// NewestFirst orders the admin API's listings (sessions, models seen):
// the most recent first, ties by key; a comparison for slices.SortFunc.
func NewestFirst(aAt, bAt time.Time, aKey, bKey string) int {
	return cmp.Or(bAt.Compare(aAt), strings.Compare(aKey, bKey))
}
