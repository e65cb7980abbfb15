package plan

import (
	"context"
	"time"

	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// pruning is what prunes a session's stored history on a turn: the
// messages the importance strategy keeps of the conversation as it will
// be stored (p.Sent and the reply), to be stored after a snapshot of the
// whole.
type pruning struct {
	full   []rewrite.Message
	kept   []rewrite.Message
	tokens int
	limit  int
}

// pruneStored decides whether an accumulated session's history, its new
// reply included, outgrew its window (the model's effective limit) and,
// if so, prunes it by importance down to strategy.target of
// it: system messages, messages above strategy.importance.preserve_above,
// pinned ones and the newest preserve_recent stay, the rest go lowest
// importance first, tool calls with their results. nil when nothing is to
// be pruned, and for a request that asked for no cut (truncate: false,
// X-Ctxproxy-Strategy: none). Between strategy.threshold and the window
// the stored history stays whole and the configured strategy cuts what is
// forwarded, as for any client; past the window keeping it whole would
// only make every later turn cut more and warn.
func pruneStored(t *rewrite.Trimmer, p Plan, reply *snapshots.Message) *pruning {
	if t == nil || !p.Accumulated || p.KeepWhole || reply == nil || p.Counter == nil || p.Limit <= 0 || t.Mode() == "none" {
		return nil
	}
	r, err := sessions.FromStored([]snapshots.Message{*reply})
	if err != nil {
		return nil
	}
	full := make([]rewrite.Message, 0, len(p.Sent)+1)
	full = append(append(full, p.Sent...), r...)
	for i := range full {
		full[i].Tokens = 0 // counted as stored, not as a strategy left them
	}
	overhead := p.Counter.Overhead(p.Tools)
	room := p.Limit - overhead
	total := rewrite.Total(full, p.Counter)
	if room <= 0 || total <= room {
		return nil
	}
	st, err := t.Strategy("importance")
	if err != nil {
		return nil
	}
	res, err := st.Apply(context.Background(), rewrite.Input{Messages: full, Target: int(t.Target() * float64(room)), Counter: p.Counter})
	if err != nil || len(res.Messages) >= len(full) {
		return nil
	}
	return &pruning{full: full, kept: res.Messages, tokens: rewrite.Total(res.Messages, p.Counter) + overhead, limit: p.Limit}
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
	sess.Messages = sessions.KeepStored(sess.Messages, pr.full, pr.kept, now)
	sess.Stats.Tokens, sess.Stats.Limit = pr.tokens, pr.limit
	sess.Stats.Usage = sessions.Finite(float64(pr.tokens) / float64(pr.limit))
	return true
}
