package snapshots

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Why a snapshot was taken.
const (
	// ReasonManual: the user asked (/context snapshot).
	ReasonManual = "manual"
	// ReasonAuto: usage crossed snapshots.auto_threshold.
	ReasonAuto = "auto"
	// ReasonOverflow: the conversation as sent, just before ctxproxy cut it
	// to fit, so that what was cut can be restored.
	ReasonOverflow = "overflow"
	// ReasonEmergency: the memory guard's emergency.
	ReasonEmergency = "emergency"
	// ReasonRestore: the state a restore replaced, so the restore can be
	// undone.
	ReasonRestore = "restore"
	// ReasonImport: the state an import replaced.
	ReasonImport = "import"
	// ReasonClear: the state a /clear removed.
	ReasonClear = "clear"
	// ReasonPrune: an accumulated history that outgrew its window, just
	// before its low-importance messages were pruned from the store.
	ReasonPrune = "prune"
)

// Snapshot is a saved copy of a session's conversation at a point in time:
// its messages, token count and metadata.
type Snapshot struct {
	// ID is unique within the session; the store makes it when empty.
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	// Created is set by the store when zero.
	Created time.Time `json:"created"`
	Model   string    `json:"model,omitempty"`
	Tokens  int       `json:"tokens"`
	Usage   float64   `json:"usage,omitempty"`
	Reason  string    `json:"reason"`
	// Metadata is the session's metadata when the snapshot was taken.
	Metadata map[string]any `json:"metadata,omitempty"`
	Messages []Message      `json:"messages,omitempty"`
}

// Info summarizes snap for a listing. Bytes is left for the store to fill.
func (snap *Snapshot) Info() adminapi.SnapshotInfo {
	return adminapi.SnapshotInfo{
		ID:        snap.ID,
		SessionID: snap.SessionID,
		Created:   snap.Created,
		Model:     snap.Model,
		Tokens:    snap.Tokens,
		Usage:     finite(snap.Usage),
		Reason:    snap.Reason,
		Messages:  len(snap.Messages),
	}
}

// NewSnapshot returns a snapshot of s's conversation, token count and
// metadata, taken for reason. It copies what it keeps, so s may change
// afterwards.
func NewSnapshot(s *Session, reason string) *Snapshot {
	msgs := slices.Clone(s.Messages)
	for i := range msgs {
		msgs[i].Metadata = maps.Clone(msgs[i].Metadata)
	}
	return &Snapshot{
		SessionID: s.ID,
		Model:     s.Model,
		Tokens:    s.Stats.Tokens,
		Usage:     s.Stats.Usage,
		Reason:    reason,
		Metadata:  maps.Clone(s.Metadata),
		Messages:  msgs,
	}
}

// newSnapID makes a snapshot id that sorts by time and is short enough to
// type (/context restore 20260102-150405-a1b2c3): the UTC second it was
// taken and 24 random bits, so ids made in the same second differ.
func newSnapID(t time.Time) string {
	return fmt.Sprintf("%s-%06x", t.UTC().Format("20060102-150405"), rand.Uint32()&0xffffff)
}

// newer orders snapshot infos newest first (ties by id, descending), the
// order ListSnapshots returns.
func newer(a, b adminapi.SnapshotInfo) int {
	if c := b.Created.Compare(a.Created); c != 0 {
		return c
	}
	switch {
	case a.ID > b.ID:
		return -1
	case a.ID < b.ID:
		return 1
	}
	return 0
}
