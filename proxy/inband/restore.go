package inband

import (
	"context"
	"log/slog"

	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// lastRestore finds the newest in-band "/context restore ID" exchange in
// a conversation a client resends whole, as History scans it: the
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

// Restorer applies a pending restore to a client that resends its whole
// history (the rule docs/sessions.md states for in-band commands): while the
// client's request starts with the history it had when it restored — up
// to and including the "/context restore ID" exchange — that prefix is
// replaced by the restored conversation and what the client added after
// it follows. A request whose history holds the exchange after another
// history has diverged: the restore no longer applies, and the turn's
// record ends the mark, as any recorded turn that does not apply it does.
type Restorer struct {
	Store sessions.Store
	Log   *slog.Logger
}

// Apply returns the conversation to forward for msgs and the mark it
// applied; nil when no restore applies.
func (r Restorer) Apply(ctx context.Context, session string, msgs []rewrite.Message) ([]rewrite.Message, *sessions.Mark) {
	at, snap := lastRestore(msgs)
	if at < 0 || session == "" || r.Store == nil {
		return nil, nil
	}
	sess, err := r.Store.Get(ctx, session)
	if err != nil {
		return nil, nil
	}
	mark := sessions.MarkOf(sess.Metadata)
	if mark == nil || mark.Snapshot != snap {
		return nil, nil
	}
	prefix := sessions.MessagesPrint(msgs[:at+2])
	if mark.Prefix != "" && mark.Prefix != prefix {
		r.Log.Debug("restore: the client's history diverged; forwarding it as sent", "session", session, "snapshot", snap)
		return nil, nil
	}
	restored := sess.Messages
	if len(restored) < mark.Messages || sessions.StoredPrint(restored[:mark.Messages]) != mark.Restored {
		// The stored conversation changed under the restore (a compress,
		// an import): take the restored one from the snapshot again.
		s, err := r.Store.LoadSnapshot(ctx, session, snap)
		if err != nil {
			r.Log.Warn("restore: the restored snapshot is gone; forwarding the client's history as sent",
				"session", session, "snapshot", snap, "err", err)
			return nil, nil
		}
		restored = s.Messages
	} else {
		restored = restored[:mark.Messages]
	}
	head, err := sessions.FromStored(restored)
	if err != nil {
		r.Log.Warn("restore: the restored conversation is unreadable; forwarding the client's history as sent",
			"session", session, "snapshot", snap, "err", err)
		return nil, nil
	}
	tail, _ := History(msgs[at+2:])
	out := make([]rewrite.Message, 0, len(head)+len(tail))
	out = append(append(out, head...), tail...)
	applied := *mark
	applied.Prefix = prefix
	return out, &applied
}
