package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"maps"
	"time"

	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Stored histories: a restore that holds for clients that resend their
// whole history, and the pruning of accumulated histories that outgrow the
// window.

// restoreKey is the session metadata key of a pending restore: a snapshot
// restored into the session, which a client that resends its whole
// history would otherwise undo on its next turn by sending the history it
// had before the restore.
const restoreKey = "ctxproxy_restore"

// restoreMark is a pending restore, kept in the session's metadata.
type restoreMark struct {
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

func (m *restoreMark) metadata() map[string]any {
	return map[string]any{"snapshot": m.Snapshot, "messages": m.Messages, "restored": m.Restored, "prefix": m.Prefix}
}

// markOf reads the pending restore from a session's metadata; nil when
// there is none.
func markOf(md map[string]any) *restoreMark {
	v, ok := md[restoreKey].(map[string]any)
	if !ok {
		return nil
	}
	m := &restoreMark{}
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

// markRestored marks session sess as restored from snapshot snap, with
// the conversation it now holds.
func markRestored(sess *snapshots.Session, snap string) {
	m := restoreMark{Snapshot: snap, Messages: len(sess.Messages), Restored: storedPrint(sess.Messages)}
	md := maps.Clone(sess.Metadata)
	if md == nil {
		md = map[string]any{}
	}
	md[restoreKey] = m.metadata()
	sess.Metadata = md
}

// keepMark records on sess what the turn did with a pending restore: the
// mark applied (bound to the client's history), or none, which ends it.
func keepMark(sess *snapshots.Session, applied *restoreMark) {
	cur := markOf(sess.Metadata)
	switch {
	case cur == nil && applied == nil:
		if _, ok := sess.Metadata[restoreKey]; !ok {
			return
		}
	case cur != nil && applied != nil && *cur == *applied:
		return
	case cur != nil && applied != nil && cur.Snapshot != applied.Snapshot:
		return // restored again meanwhile: the new mark stands
	}
	md := maps.Clone(sess.Metadata)
	if applied == nil || cur == nil {
		delete(md, restoreKey)
	} else {
		md[restoreKey] = applied.metadata()
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

func storedPrint(msgs []snapshots.Message) string {
	return fingerprint(len(msgs), func(i int) (string, string) { return msgs[i].Role, msgs[i].Content })
}

func messagesPrint(msgs []rewrite.Message) string {
	return fingerprint(len(msgs), func(i int) (string, string) { return msgs[i].Role, msgs[i].Content })
}

// lastRestore finds the newest in-band "/context restore ID" exchange in
// a conversation a client resends whole, as inbandHistory scans it: the
// index of the command and its snapshot id, or -1 when there is none or a
// clear came after it (a clear wins).
func lastRestore(msgs []rewrite.Message) (at int, snap string) {
	at = -1
	for i := 0; i+1 < len(msgs)-1; i++ {
		cmd, args, ok := commandOf(&msgs[i])
		if !ok || msgs[i+1].Role != "assistant" {
			continue
		}
		switch {
		case cmd == "context restore" && len(args) == 1:
			at, snap = i, args[0]
		case cmd == "clear" || cmd == "context clear":
			at, snap = -1, ""
		}
		i++
	}
	return at, snap
}

// restorer applies a pending restore to a client that resends its whole
// history (the rule docs/sessions.md states for in-band commands): while the
// client's request starts with the history it had when it restored — up
// to and including the "/context restore ID" exchange — that prefix is
// replaced by the restored conversation and what the client added after
// it follows. A request whose history holds the exchange after another
// history has diverged: the restore no longer applies, and the turn's
// record ends the mark, as any recorded turn that does not apply it does.
type restorer struct {
	store Store
	log   *slog.Logger
}

// apply returns the conversation to forward for msgs and the mark it
// applied; nil when no restore applies.
func (r restorer) apply(ctx context.Context, session string, msgs []rewrite.Message) ([]rewrite.Message, *restoreMark) {
	at, snap := lastRestore(msgs)
	if at < 0 || session == "" || r.store == nil {
		return nil, nil
	}
	sess, err := r.store.Get(ctx, session)
	if err != nil {
		return nil, nil
	}
	mark := markOf(sess.Metadata)
	if mark == nil || mark.Snapshot != snap {
		return nil, nil
	}
	prefix := messagesPrint(msgs[:at+2])
	if mark.Prefix != "" && mark.Prefix != prefix {
		r.log.Debug("restore: the client's history diverged; forwarding it as sent", "session", session, "snapshot", snap)
		return nil, nil
	}
	restored := sess.Messages
	if len(restored) < mark.Messages || storedPrint(restored[:mark.Messages]) != mark.Restored {
		// The stored conversation changed under the restore (a compress,
		// an import): take the restored one from the snapshot again.
		s, err := r.store.LoadSnapshot(ctx, session, snap)
		if err != nil {
			r.log.Warn("restore: the restored snapshot is gone; forwarding the client's history as sent",
				"session", session, "snapshot", snap, "err", err)
			return nil, nil
		}
		restored = s.Messages
	} else {
		restored = restored[:mark.Messages]
	}
	head, err := fromStored(restored)
	if err != nil {
		r.log.Warn("restore: the restored conversation is unreadable; forwarding the client's history as sent",
			"session", session, "snapshot", snap, "err", err)
		return nil, nil
	}
	tail, _ := inbandHistory(msgs[at+2:])
	out := make([]rewrite.Message, 0, len(head)+len(tail))
	out = append(append(out, head...), tail...)
	applied := *mark
	applied.Prefix = prefix
	return out, &applied
}

// pruning is what prunes a session's stored history on a turn: the
// messages the importance strategy keeps of the conversation as it will
// be stored (p.sent and the reply), to be stored after a snapshot of the
// whole.
type pruning struct {
	full   []rewrite.Message
	kept   []rewrite.Message
	tokens int
	limit  int
}

// pruneStored decides whether an accumulated session's history, its new
// reply included, outgrew its window (the model's effective limit) and,
// if so, prunes it by importance (seed 003) down to strategy.target of
// it: system messages, messages above strategy.importance.preserve_above,
// pinned ones and the newest preserve_recent stay, the rest go lowest
// importance first, tool calls with their results. nil when nothing is to
// be pruned, and for a request that asked for no cut (truncate: false,
// X-Ctxproxy-Strategy: none). Between strategy.threshold and the window
// the stored history stays whole and the configured strategy cuts what is
// forwarded, as for any client; past the window keeping it whole would
// only make every later turn cut more and warn.
func pruneStored(t *rewrite.Trimmer, p *plan, reply *snapshots.Message) *pruning {
	if t == nil || p == nil || !p.accum || p.keepWhole || reply == nil || p.counter == nil || p.limit <= 0 || t.Mode() == "none" {
		return nil
	}
	r, err := fromStored([]snapshots.Message{*reply})
	if err != nil {
		return nil
	}
	full := make([]rewrite.Message, 0, len(p.sent)+1)
	full = append(append(full, p.sent...), r...)
	for i := range full {
		full[i].Tokens = 0 // counted as stored, not as a strategy left them
	}
	overhead := p.counter.Overhead(p.tools)
	room := p.limit - overhead
	total := rewrite.Total(full, p.counter)
	if room <= 0 || total <= room {
		return nil
	}
	st, err := t.Strategy("importance")
	if err != nil {
		return nil
	}
	res, err := st.Apply(context.Background(), full, int(t.Target()*float64(room)), p.counter)
	if err != nil || len(res.Messages) >= len(full) {
		return nil
	}
	return &pruning{full: full, kept: res.Messages, tokens: rewrite.Total(res.Messages, p.counter) + overhead, limit: p.limit}
}

// apply replaces sess's stored history with what the prune kept, when it
// is still the history the prune was decided on.
func (pr *pruning) apply(sess *snapshots.Session, now time.Time) bool {
	if len(sess.Messages) != len(pr.full) {
		return false
	}
	for i := range pr.full {
		if sess.Messages[i].Role != pr.full[i].Role || sess.Messages[i].Content != pr.full[i].Content {
			return false
		}
	}
	sess.Messages = keepStored(sess.Messages, pr.full, pr.kept, now)
	sess.Stats.Tokens, sess.Stats.Limit = pr.tokens, pr.limit
	sess.Stats.Usage = finite(float64(pr.tokens) / float64(pr.limit))
	return true
}
