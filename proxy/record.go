package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// recorder does what follows a reply: it calibrates the counter from the
// backend's own count, detects silent truncation, queues the session's
// update and snapshot, and logs and counts the exchange.
type recorder struct {
	// be is the backend, whose models' tokenizers a miss may change
	// (otherEngine).
	be      *backend.Backend
	tokens  *budget.Registry
	writer  sessions.Writer
	trimmer *atomic.Pointer[rewrite.Trimmer]
	// trackers keep each session's running totals, to notice a first
	// overflow.
	trackers *sessions.Trackers
	// prefixes measure how much of each session's prompt stayed put.
	prefixes *prefixes
	metrics  *metrics
	log      *slog.Logger
}

// afterReply runs when the answer has been relayed (all of it but the
// last byte held for the store, or as much as went through): calibrate
// the counter from the backend's truth, detect silent truncation, and
// record the session. It runs on the request's goroutine; store writes
// are queued, never waited for here (finish waits for the turn where
// other replicas build on it).
func (s *recorder) afterReply(ex *exchange, p *plan.Plan, rep wire.Reply, h *holds) {
	if p == nil {
		return
	}
	truncated := false
	if s.tokens != nil && rep.Status == http.StatusOK && rep.Complete && rep.PromptTokens > 0 {
		numCtx := p.Window
		if p.NumCtx > 0 && (ex.dialect == wire.Ollama || p.Translate) {
			numCtx = p.NumCtx
		}
		switch {
		case p.Exact != nil:
			truncated = s.checkExact(ex, p, rep.PromptTokens, numCtx)
		case p.After.Exact:
			// Counted by the backend itself: nothing to calibrate, only
			// a cut to see.
			truncated = budget.Truncated(p.After.Tokens, rep.PromptTokens, numCtx, 0.01)
		default:
			truncated = s.tokens.Observe(p.Model, p.After, rep.PromptTokens, numCtx)
		}
		s.metrics.calibrationError.Observe(relErr(p.After.Tokens, rep.PromptTokens))
		ex.logAttrs = append(ex.logAttrs, "prompt_tokens", rep.PromptTokens)
		if truncated {
			s.metrics.truncations.Inc()
			s.log.Warn("backend truncated the prompt silently: it reports far fewer prompt tokens than were sent",
				"model", p.Model, "session", ex.session, "sent", p.After.Tokens, "exact", p.Exact != nil,
				"reported", rep.PromptTokens, "num_ctx", p.NumCtx)
		}
	}
	s.record(ex, p, rep, truncated, h)
}

// checkExact compares an exact count of what was forwarded with the
// prompt tokens Ollama reported. A report at the window is censored (the
// backend may have cut the prompt to it): it tells of truncation, never of
// the tokenizer. An uncensored report that disagrees beyond 1% means the
// tokenizer is wrong for this model (another Ollama version, a renderer):
// backend.Model.Observe then turns exact counting off for it.
func (s *recorder) checkExact(ex *exchange, p *plan.Plan, reported, numCtx int) (truncated bool) {
	sent := p.After.Tokens
	censored := budget.Censored(reported, numCtx) || (numCtx > 0 && sent > numCtx)
	if censored {
		// Ollama fits an overlong prompt into num_ctx and answers 200.
		return sent > numCtx && reported <= numCtx
	}
	if p.Approximate() {
		// Images for a vision model whose image cost is the
		// projector's at run time, estimated; the tokenizer is not in
		// question.
		return false
	}
	if p.Exact.Observe(s.log, p.ExactShape, sent, reported) {
		s.metrics.exactDisagreements.Inc()
		s.otherEngine(p, reported)
	}
	return false
}

// otherEngine counts p's prompt again as the model's other runner would
// (Ollama's own engine or llama.cpp's, which the server chooses, and
// OLLAMA_NEW_ENGINE changes where ctxproxy cannot see): when that count
// is the backend's, the model is counted that way from now on, exactly
// again for every shape.
func (s *recorder) otherEngine(p *plan.Plan, reported int) {
	counted, ok := p.Counted()
	if !ok || s.be == nil {
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
	s.be.UseTokenizer(*p.Exact, other)
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

// replyCutMarker ends a stored reply that was longer than ctxproxy keeps.
const replyCutMarker = "\n[… reply cut here: ctxproxy stores at most max_body bytes of a reply; the client got it whole …]"

// record queues the session update for this exchange.
func (s *recorder) record(ex *exchange, p *plan.Plan, rep wire.Reply, truncated bool, h *holds) {
	if s.writer == nil || ex.session == "" || p == nil {
		return
	}
	if rep.Status == http.StatusNotFound {
		// The backend does not have the model: no turn took place, and
		// a session named after it would only mislead.
		return
	}
	if len(p.Sent) == 0 || (p.Accumulated && len(p.NewTurn) == 0) {
		// No messages: a model load or unload, not a turn of the
		// conversation; recording it would replace the conversation.
		return
	}
	whole := rep.Status == http.StatusOK && rep.Complete
	if rep.Truncated {
		// The client got every byte; the session keeps what fits, and
		// says so where a reader of it will look.
		s.metrics.repliesCut.Inc()
		s.log.Warn("reply longer than max_body: the session stores it cut", "session", ex.session, "model", p.Model,
			"stored_bytes", len(rep.Content), "stored", whole)
		rep.Content += replyCutMarker
	}
	var replyMsg *snapshots.Message
	if whole {
		m := sessions.ReplyMessage(ex.dialect, rep)
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
			s.metrics.promptCached.Observe(float64(min(rep.CachedTokens, rep.PromptTokens)) / float64(rep.PromptTokens))
		}
	}
	// How much of the prompt stayed put since the session's last turn:
	// what the backend's prompt cache could keep.
	var reply *rewrite.Message
	if whole {
		reply = &rewrite.Message{Role: "assistant", Content: rep.Content}
	}
	if share, ok := s.prefixes.kept(ex.session, p.Messages, reply); ok {
		s.metrics.prefixKept.Observe(share)
		turn.PrefixKept, turn.PrefixKnown = share, true
	}
	// The messages are converted for the store on the writer, not here
	// while the client waits for the end of the answer. In accumulate
	// mode p.Sent is the whole stored history: only the new turn is
	// converted, and the history only for a pre-overflow snapshot.
	model, accum, mark, dialect, sent, newTurn := p.Model, p.Accumulated, p.Restore, ex.dialect, p.Sent, p.NewTurn
	// The turn's messages share the request body's bytes until the store
	// has them: the body's share of the memory budget goes back then.
	// Other replicas wait for the turn until it is stored.
	stored := h.handOver()
	err := s.writer.UpdateThen(ex.session, func(sess *snapshots.Session) error {
		if model != "" {
			sess.Model = model
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
		s.log.Warn("session not recorded", "session", ex.session, "err", err)
		return
	}
	s.prune(ex, p, replyMsg)
	// Snapshot before the first cut of a conversation that has outgrown
	// the window (the pre-overflow snapshot, docs/sessions.md). The writer takes
	// the automatic snapshot at snapshots.auto_threshold itself, from the
	// usage recorded above.
	before := s.trackers.Record(ex.session, turn)
	if p.Result.Dropped > 0 && (before.Requests == 0 || before.Usage() < s.threshold()) {
		s.log.Info("pre-overflow: conversation outgrew the window; snapshot taken before the first cut",
			"session", ex.session, "tokens", p.Before.Tokens, "limit", p.Limit)
		// The turn's own list belongs to the queued update.
		whole := sessions.StoredMessages(ex.dialect, p.Sent)
		snap := snapshots.NewSnapshot(&snapshots.Session{ID: ex.session, Model: p.Model, Messages: whole,
			Stats: sessions.StoredStats(budget.Totals{}.Add(turn))}, snapshots.ReasonOverflow)
		if err := s.writer.SaveSnapshot(snap); err != nil {
			s.log.Warn("snapshot not queued", "session", ex.session, "err", err)
		}
	}
}

// prune prunes an accumulated session's stored history that outgrew its
// window (pruneStored), after a snapshot of the whole (reason prune), so
// the session stops growing past its window and nothing is lost.
func (s *recorder) prune(ex *exchange, p *plan.Plan, reply *snapshots.Message) {
	pr := pruneStored(s.trimmer.Load(), p, reply)
	if pr == nil {
		return
	}
	if err := s.writer.Snapshot(ex.session, snapshots.ReasonPrune); err != nil {
		s.log.Warn("snapshot not queued; stored history not pruned", "session", ex.session, "err", err)
		return
	}
	now := time.Now()
	err := s.writer.Update(ex.session, func(sess *snapshots.Session) error {
		if !pr.apply(sess, now) {
			s.log.Debug("stored history changed before it was pruned; pruning on a later turn", "session", ex.session)
		}
		return nil
	})
	if err != nil {
		s.log.Warn("stored history not pruned", "session", ex.session, "err", err)
		return
	}
	s.log.Info("stored history outgrew the window; pruned by importance after a snapshot",
		"session", ex.session, "messages", len(pr.full), "kept", len(pr.kept), "tokens", pr.tokens, "limit", pr.limit)
}

func (s *recorder) threshold() float64 {
	if t := s.trimmer.Load(); t != nil {
		return t.Threshold()
	}
	return 0.8
}

func (s *recorder) logExchange(ex *exchange, p *plan.Plan) {
	status := ex.status
	s.metrics.requests.WithLabelValues(ex.route, ex.dialect.String(), strconv.Itoa(status)).Inc()
	took := time.Since(ex.start)
	s.metrics.duration.WithLabelValues(ex.route).Observe(took.Seconds())
	if p != nil {
		if p.Counter != nil {
			s.metrics.exactCounts.WithLabelValues(p.CountMethod()).Inc()
			s.metrics.tokensBefore.Observe(float64(p.Before.Tokens))
			s.metrics.tokensAfter.Observe(float64(p.After.Tokens))
		}
		s.metrics.observeNumCtx(p.NumCtx)
		if p.Result.Notice != "" {
			s.metrics.dropped.Add(float64(p.Result.Dropped - p.Result.Summarized))
			s.metrics.summarized.Add(float64(p.Result.Summarized))
		}
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return // the attributes below cost a dozen allocations
	}
	attrs := []any{"route", ex.route, "dialect", ex.dialect.String(), "model", ex.model, "session", ex.session,
		"stream", ex.stream, "status", status, "duration_ms", ms(took)}
	if p != nil {
		if p.Counter != nil {
			attrs = append(attrs, "tokens_before", p.Before.Tokens, "tokens", p.After.Tokens, "exact", p.Before.Exact, "limit", p.Limit,
				"usage", fmt.Sprintf("%.1f%%", p.Usage()*100))
		}
		if p.NumCtx > 0 {
			attrs = append(attrs, "num_ctx", p.NumCtx)
		}
		if p.Result.Notice != "" {
			attrs = append(attrs, "dropped", p.Result.Dropped, "summarized", p.Result.Summarized, "notice", p.Result.Notice)
		}
		if p.Translate {
			attrs = append(attrs, "translated", true)
		}
	}
	attrs = append(attrs, ex.logAttrs...)
	s.log.Log(ctx, level, "chat", attrs...)
}

// ms is d in milliseconds to a tenth, the unit in the attribute's name:
// slog writes a time.Duration to JSON as bare nanoseconds.
func ms(d time.Duration) float64 {
	return float64(d.Round(100*time.Microsecond)) / float64(time.Millisecond)
}
