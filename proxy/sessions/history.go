package sessions

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"

	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Stored histories: a restore that holds for clients that resend their
// whole history, and the pruning of accumulated histories that outgrow the
// window.

// RestoreKey is the session metadata key of a pending restore: a snapshot
// restored into the session, which a client that resends its whole
// history would otherwise undo on its next turn by sending the history it
// had before the restore.
const RestoreKey = "ctxproxy_restore"

// Mark is a pending restore, kept in the session's metadata.
type Mark struct {
	// Snapshot is the snapshot restored.
	Snapshot string
	// Messages is how many messages the restored conversation has, and
	// Restored a fingerprint of them: the session stores them first for
	// as long as the restore applies.
	Messages int
	Restored string
	// Prefix is a fingerprint of the client's history up to and
	// including its "/context restore" exchange, taken on the first turn
	// after the restore; empty until then.
	Prefix string
}

func (m *Mark) metadata() map[string]any {
	return map[string]any{"snapshot": m.Snapshot, "messages": m.Messages, "restored": m.Restored, "prefix": m.Prefix}
}

// MarkOf reads the pending restore from a session's metadata; nil when
// there is none.
func MarkOf(md map[string]any) *Mark {
	v, ok := md[RestoreKey].(map[string]any)
	if !ok {
		return nil
	}
	m := &Mark{}
	m.Snapshot, _ = v["snapshot"].(string)
	m.Restored, _ = v["restored"].(string)
	m.Prefix, _ = v["prefix"].(string)
	switch n := v["messages"].(type) {
	case int:
		m.Messages = n
	case float64: // as JSON decodes it
		m.Messages = int(n)
	}
	if m.Snapshot == "" || m.Messages < 0 {
		return nil
	}
	return m
}

// MarkRestored marks session sess as restored from snapshot snap, with
// the conversation it now holds.
func MarkRestored(sess *snapshots.Session, snap string) {
	m := Mark{Snapshot: snap, Messages: len(sess.Messages), Restored: StoredPrint(sess.Messages)}
	md := maps.Clone(sess.Metadata)
	if md == nil {
		md = map[string]any{}
	}
	md[RestoreKey] = m.metadata()
	sess.Metadata = md
}

// KeepMark records on sess what the turn did with a pending restore: the
// mark applied (bound to the client's history), or none, which ends it.
func KeepMark(sess *snapshots.Session, applied *Mark) {
	cur := MarkOf(sess.Metadata)
	switch {
	case cur == nil && applied == nil:
		if _, ok := sess.Metadata[RestoreKey]; !ok {
			return
		}
	case cur != nil && applied != nil && *cur == *applied:
		return
	case cur != nil && applied != nil && cur.Snapshot != applied.Snapshot:
		return // restored again meanwhile: the new mark stands
	}
	md := maps.Clone(sess.Metadata)
	if applied == nil || cur == nil {
		delete(md, RestoreKey)
	} else {
		md[RestoreKey] = applied.metadata()
	}
	sess.Metadata = md
}

// fingerprint hashes a conversation's roles and texts: a client that
// resends a message may re-encode it, but keeps what it says.
func fingerprint(n int, at func(int) (role, content string)) string {
	h := sha256.New()
	for i := range n {
		role, content := at(i)
		h.Write([]byte(role))
		h.Write([]byte{0})
		h.Write([]byte(content))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func StoredPrint(msgs []snapshots.Message) string {
	return fingerprint(len(msgs), func(i int) (string, string) { return msgs[i].Role, msgs[i].Content })
}

func MessagesPrint(msgs []rewrite.Message) string {
	return fingerprint(len(msgs), func(i int) (string, string) { return msgs[i].Role, msgs[i].Content })
}
