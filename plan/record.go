package plan

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Recorder does what follows a reply: it checks the backend's count of
// the prompt against the plan's (calibrating an estimate, turning exact
// counting off for a shape it got wrong, seeing a silent truncation), and
// queues the session's turn, its snapshots and a prune of its stored
// history. It returns what it found (Recorded) for the metrics and the
// log.
type Recorder struct {
	tokens  *budget.Registry
	writer  sessions.Writer
	trimmer *atomic.Pointer[rewrite.Trimmer]
	// trackers keep each session's running totals, to notice a first
	// overflow.
	trackers *sessions.Trackers
	// prefixes measure how much of each session's prompt stayed put.
	prefixes *prefixes
	log      *slog.Logger
}

// RecorderDeps are the parts a Recorder reads and writes. A nil Tokens
// checks no count, a nil Writer records no session.
type RecorderDeps struct {
	Tokens   *budget.Registry
	Writer   sessions.Writer
	Trimmer  *atomic.Pointer[rewrite.Trimmer]
	Trackers *sessions.Trackers
	Log      *slog.Logger
}

// NewRecorder returns a Recorder over deps.
func NewRecorder(deps RecorderDeps) *Recorder {
	return &Recorder{tokens: deps.Tokens, writer: deps.Writer, trimmer: deps.Trimmer,
		trackers: deps.Trackers, prefixes: newPrefixes(), log: deps.Log}
}

// Outcome is how a forwarded request ended, as its handler hands it to
// the Recorder: the backend's reply as the tap read it (its status, its
// counts, its text), and what the request holds that the writer takes
// over with the turn's record.
type Outcome struct {
	Reply wire.Reply
	Holds Holder
}

// Holder is what a request holds until its turn is stored (its body's
// memory, its turn in the session's order). HandOver tells it that the
// writer has the turn, so that the request no longer gives it back when
// it ends; Stored gives it back, once the turn is stored or will not be.
type Holder interface {
	HandOver()
	Stored()
}

// Recorded is what the Recorder found of one reply.
type Recorded struct {
	// PromptTokens is the backend's count of the prompt; 0 when it gave
	// none, or the reply was not whole.
	PromptTokens int
	// CountError is how far the plan's count was from the backend's,
	// as a share of the backend's (with PromptTokens).
	CountError float64
	// Truncated: the backend cut the prompt without a word.
	Truncated bool
	// Disagreed: an exact count disagreed with the backend's, and
	// exact counting is off for the request's shape.
	Disagreed bool
	// ReplyCut: the reply was longer than ctxproxy stores.
	ReplyCut bool
	// Cached is the share of the prompt the backend took from its cache,
	// when it said (CachedKnown).
	Cached      float64
	CachedKnown bool
	// PrefixKept is the share of the prompt that stayed put since the
	// session's last turn, when it had one here (PrefixKnown).
	PrefixKept  float64
	PrefixKnown bool
}

// Record does what follows the reply o to the request p planned: it
// checks the backend's count against the plan's, and records the session.
// It runs on the request's goroutine when the reply is over; store writes
// are queued, never waited for here.
func (s *Recorder) Record(p Plan, o Outcome) Recorded {
	var out Recorded
	rep := o.Reply
	truncated := false
	if s.tokens != nil && rep.Whole() && rep.PromptTokens > 0 {
		numCtx := p.Window
		if p.NumCtx > 0 && (p.Dialect == wire.Ollama || p.Translate) {
			numCtx = p.NumCtx
		}
		switch {
		case p.Exact != nil:
			truncated, out.Disagreed = s.checkExact(p, rep.PromptTokens, numCtx)
		case p.After.Exact:
			// Counted by the backend itself: nothing to calibrate, only
			// a cut to see.
			truncated = budget.Truncated(p.After.Tokens, rep.PromptTokens, numCtx, 0.01)
		default:
			truncated = s.tokens.Observe(p.Model, p.After, rep.PromptTokens, numCtx)
		}
		out.PromptTokens, out.CountError, out.Truncated = rep.PromptTokens, relErr(p.After.Tokens, rep.PromptTokens), truncated
		if truncated {
			s.log.Warn("backend truncated the prompt silently: it reports far fewer prompt tokens than were sent",
				"model", p.Model, "session", p.opt.Session, "sent", p.After.Tokens, "exact", p.Exact != nil,
				"reported", rep.PromptTokens, "num_ctx", p.NumCtx)
		}
	}
	s.record(p, o, truncated, &out)
	return out
}

// checkExact compares an exact count of what was forwarded with the
// prompt tokens Ollama reported. A report at the window is censored (the
// backend may have cut the prompt to it): it tells of truncation, never of
// the tokenizer. An uncensored report that disagrees beyond 1% means the
// tokenizer is wrong for this model (another Ollama version, a renderer):
// backend.Model.Observe then turns exact counting off for it.
func (s *Recorder) checkExact(p Plan, reported, numCtx int) (truncated, disagreed bool) {
	sent := p.After.Tokens
	censored := budget.Censored(reported, numCtx) || (numCtx > 0 && sent > numCtx)
	if censored {
		// Ollama fits an overlong prompt into num_ctx and answers 200.
		return sent > numCtx && reported <= numCtx, false
	}
	if p.Approximate() {
		// Images for a vision model whose image cost is the
		// projector's at run time, estimated; the tokenizer is not in
		// question.
		return false, false
	}
	if p.Exact.Observe(s.log, p.ExactShape, sent, reported) {
		s.otherEngine(p, reported)
		return false, true
	}
	return false, false
}

// otherEngine counts p's prompt again as the model's other runner would
// (Ollama's own engine or llama.cpp's, which the server chooses, and
// OLLAMA_NEW_ENGINE changes where ctxproxy cannot see): when that count
// is the backend's, the model is counted that way from now on, exactly
// again for every shape.
func (s *Recorder) otherEngine(p Plan, reported int) {
	counted, ok := p.Counted()
	if !ok || p.Server == nil {
		return
	}
	other := p.Exact.Tokenizer.OtherEngine()
	if other == nil {
		return
	}
	n, whole, err := other.Count(counted)
	if err != nil || !whole || !backend.Agrees(n, reported) {
		s.log.Warn("the model's other runner does not count its prompts as the backend does either",
			"model", p.Model, "tokenizer", other.Name(), "estimate", n, "reported", reported)
		return
	}
	// The plan's server's backend: its models' tokenizers change.
	p.be().UseTokenizer(*p.Exact, other)
	s.log.Warn("the backend runs this model on another engine than ctxproxy assumed (OLLAMA_NEW_ENGINE on the server?); "+
		"counting it as that engine does from now on, exactly", "model", p.Model, "tokenizer", other.Name(), "count", n, "reported", reported)
}

func relErr(est, actual int) float64 {
	if actual <= 0 {
		return 0
	}
	d := float64(est-actual) / float64(actual)
	if d < 0 {
		d = -d
	}
	return d
}

// ReplyCutMarker ends a stored reply that was longer than ctxproxy keeps.
const ReplyCutMarker = "\n[… reply cut here: ctxproxy stores at most max_body bytes of a reply; the client got it whole …]"

// record queues the session update for this exchange.
func (s *Recorder) record(p Plan, o Outcome, truncated bool, out *Recorded) {
	rep, session := o.Reply, p.opt.Session
	if s.writer == nil || session == "" {
		return
	}
	if rep.NoModel() {
		// The backend does not have the model: no turn took place, and
		// a session named after it would only mislead.
		return
	}
	if len(p.Sent) == 0 || (p.Accumulated && len(p.NewTurn) == 0) {
		// No messages: a model load or unload, not a turn of the
		// conversation; recording it would replace the conversation.
		return
	}
	whole := rep.Whole()
	if rep.Truncated {
		// The client got every byte; the session keeps what fits, and
		// says so where a reader of it will look.
		out.ReplyCut = true
		s.log.Warn("reply longer than max_body: the session stores it cut", "session", session, "model", p.Model,
			"stored_bytes", len(rep.Content), "stored", whole)
		rep.Content += ReplyCutMarker
	}
	var replyMsg *snapshots.Message
	if whole {
		m := sessions.ReplyMessage(p.Dialect, rep)
		replyMsg = &m
	}
	now := time.Now()
	turn := budget.Turn{Tokens: p.Before.Tokens, Sent: p.After.Tokens, Limit: p.Limit, NumCtx: p.NumCtx,
		Dropped: p.Result.Dropped - p.Result.Summarized, Summarized: p.Result.Summarized,
		Truncated: truncated, Retries: p.Retries, At: now, Budget: p.Split}
	if rep.PromptTokens > 0 {
		turn.PromptTokens, turn.CompletionTokens = rep.PromptTokens, rep.OutputTokens
		if rep.CachedTokens >= 0 {
			turn.CachedTokens, turn.CachedKnown = rep.CachedTokens, true
			out.Cached, out.CachedKnown = float64(min(rep.CachedTokens, rep.PromptTokens))/float64(rep.PromptTokens), true
		}
	}
	// How much of the prompt stayed put since the session's last turn:
	// what the backend's prompt cache could keep.
	var reply *rewrite.Message
	if whole {
		reply = &rewrite.Message{Role: "assistant", Content: rep.Content}
	}
	if share, ok := s.prefixes.kept(session, p.Messages, reply); ok {
		out.PrefixKept, out.PrefixKnown = share, true
		turn.PrefixKept, turn.PrefixKnown = share, true
	}
	// The messages are converted for the store on the writer, not here
	// while the client waits for the end of the answer. In accumulate
	// mode p.Sent is the whole stored history: only the new turn is
	// converted, and the history only for a pre-overflow snapshot.
	model, accum, mark, dialect, sent, newTurn, server := p.Model, p.Accumulated, p.Restore, p.Dialect, p.Sent, p.NewTurn, p.Backend
	// The turn's messages share the request body's bytes until the store
	// has them: the body's share of the memory budget goes back then.
	// Other replicas wait for the turn until it is stored.
	var stored func()
	if o.Holds != nil {
		o.Holds.HandOver()
		stored = o.Holds.Stored
	}
	err := s.writer.UpdateThen(session, func(sess *snapshots.Session) error {
		if model != "" {
			sess.Model = model
		}
		if server != "" {
			sess.Backend = server
		}
		if accum {
			sess.AppendTurn(sessions.StoredMessages(dialect, newTurn), replyMsg, now)
		} else {
			// Each run converts a list of its own: the reply goes into
			// its spare capacity and SetMessages stamps it in place.
			msgs := sessions.StoredMessages(dialect, sent)
			if replyMsg != nil {
				msgs = append(msgs, *replyMsg)
			}
			sess.SetMessages(msgs, now)
		}
		// A restore lasts as long as each turn applies it.
		sessions.KeepMark(sess, mark)
		// The store's copy of the totals carries on from itself, so a
		// session served by another replica or before a restart keeps
		// its counts.
		sess.Stats = sessions.StoredStats(sessions.TotalsOf(sess.Stats).Add(turn))
		return nil
	}, stored)
	if err != nil {
		if stored != nil {
			stored() // the writer will not
		}
		s.log.Warn("session not recorded", "session", session, "err", err)
		return
	}
	s.prune(p, replyMsg)
	// Snapshot before the first cut of a conversation that has outgrown
	// the window (the pre-overflow snapshot, docs/sessions.md). The writer takes
	// the automatic snapshot at snapshots.auto_threshold itself, from the
	// usage recorded above.
	before := s.trackers.Record(session, turn)
	if p.Result.Dropped > 0 && (before.Requests == 0 || before.Usage() < s.threshold()) {
		s.log.Info("pre-overflow: conversation outgrew the window; snapshot taken before the first cut",
			"session", session, "tokens", p.Before.Tokens, "limit", p.Limit)
		// The turn's own list belongs to the queued update.
		whole := sessions.StoredMessages(p.Dialect, p.Sent)
		snap := snapshots.NewSnapshot(&snapshots.Session{ID: session, Model: p.Model, Messages: whole,
			Stats: sessions.StoredStats(budget.Totals{}.Add(turn))}, snapshots.ReasonOverflow)
		if err := s.writer.SaveSnapshot(snap); err != nil {
			s.log.Warn("snapshot not queued", "session", session, "err", err)
		}
	}
}

// prune prunes an accumulated session's stored history that outgrew its
// window (pruneStored), after a snapshot of the whole (reason prune), so
// the session stops growing past its window and nothing is lost.
func (s *Recorder) prune(p Plan, reply *snapshots.Message) {
	session := p.opt.Session
	pr := pruneStored(s.trimmer.Load(), p, reply)
	if pr == nil {
		return
	}
	if err := s.writer.Snapshot(session, snapshots.ReasonPrune); err != nil {
		s.log.Warn("snapshot not queued; stored history not pruned", "session", session, "err", err)
		return
	}
	now := time.Now()
	err := s.writer.Update(session, func(sess *snapshots.Session) error {
		if !pr.apply(sess, now) {
			s.log.Debug("stored history changed before it was pruned; pruning on a later turn", "session", session)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("stored history not pruned", "session", session, "err", err)
		return
	}
	s.log.Info("stored history outgrew the window; pruned by importance after a snapshot",
		"session", session, "messages", len(pr.full), "kept", len(pr.kept), "tokens", pr.tokens, "limit", pr.limit)
}

func (s *Recorder) threshold() float64 {
	if t := s.trimmer.Load(); t != nil {
		return t.Threshold()
	}
	return 0.8
}
