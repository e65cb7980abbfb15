package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/view"
)

// sessions is the one place that changes stored sessions outside a chat
// request: the admin API, the in-band commands and the memory guard clear,
// restore, snapshot, import and compress through it, so each operation and
// the session-id rule exist once. Its writes go to the store directly,
// after the writer's queue is flushed, so that a read sees the last chat
// turn and a change lands after it.
type sessions struct {
	store  Store
	writer Writer
	// tokens and trimmer count and cut a stored conversation (measure,
	// compress); nil turns those off.
	tokens  *budget.Registry
	trimmer *atomic.Pointer[rewrite.Trimmer]
	// seen gives a session's model its last effective limit.
	seen *seenModels
	// cleared are the sessions the memory guard cleared, forgotten when
	// one is restored or purged.
	cleared *emergencies
	log     *slog.Logger
}

// flushWait bounds the wait for queued session writes before an admin
// operation.
const flushWait = 10 * time.Second

// flush waits for the session writes queued so far, so that an admin read
// sees the last chat turn and an admin write lands after it.
func (s *sessions) flush(ctx context.Context) {
	if s.writer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, flushWait)
	defer cancel()
	if err := s.writer.Flush(ctx); err != nil {
		s.log.Warn("admin: queued session writes not written in time; going on with the stored state", "err", err)
	}
}

// checkSessionID validates a session id from a URL: the store's rule
// (snapshots.CheckID), the one the chat routes apply too; describe turns
// its error into a 400 that says why.
func checkSessionID(id string) error { return snapshots.CheckID(id) }

// fullStore gives the proxy's Store the methods snapshots' helpers
// (Import, Restore) want beyond it.
type fullStore struct{ Store }

func (fullStore) Counters() snapshots.Counters { return snapshots.Counters{} }

func (fullStore) Close() error { return nil }

func (s *sessions) fullStore() snapshots.Store {
	if st, ok := s.store.(snapshots.Store); ok {
		return st
	}
	return fullStore{s.store}
}

// session reads session id with its snapshot count.
func (s *sessions) get(ctx context.Context, id string) (*snapshots.Session, api.SessionDetail, error) {
	sess, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, api.SessionDetail{}, notFound(err, "session %q not found", id)
	}
	snaps, err := s.store.ListSnapshots(ctx, id)
	if err != nil {
		return nil, api.SessionDetail{}, err
	}
	md := sess.Metadata
	if _, ok := md[restoreKey]; ok {
		// ctxproxy's own mark of a pending restore is not the user's.
		md = maps.Clone(md)
		delete(md, restoreKey)
	}
	if md == nil {
		md = map[string]any{}
	}
	out := api.SessionDetail{SessionID: sess.ID, Model: sess.Model, Created: sess.Created.UTC(), Updated: sess.Updated.UTC(),
		Metadata: md, Stats: statsOf(sess.Stats), Messages: len(sess.Messages), Snapshots: len(snaps)}
	// As on the chat routes: a conversation that its last request cut
	// is judged by what was forwarded, never warned of as "approaching".
	usage := out.Stats.Usage
	if st := sess.Stats; st.Sent > 0 && st.Sent != st.Tokens && st.Limit > 0 {
		usage = float64(st.Sent) / float64(st.Limit)
	}
	out.Warning = usageWarning(usage)
	return sess, out, nil
}

// clearSession is seed 000's /clear: the conversation and its numbers go,
// the metadata stays; the cleared state is snapshotted first (reason
// clear) so that a /clear can be undone. With keepSystem (seed 004 R7.7's
// /context clear) the leading system messages stay.
func (s *sessions) clear(ctx context.Context, id string, keepSystem bool, reason string) (undo snapshots.SnapshotInfo, err error) {
	sess, err := s.store.Get(ctx, id)
	if err != nil {
		return undo, notFound(err, "session %q not found", id)
	}
	if len(sess.Messages) > 0 {
		if undo, err = s.store.SaveSnapshot(ctx, snapshots.NewSnapshot(sess, reason)); err != nil {
			return undo, fmt.Errorf("saving the session before clearing it: %w", err)
		}
	}
	if !keepSystem {
		if err := s.store.Clear(ctx, id); err != nil {
			return undo, notFound(err, "session %q not found", id)
		}
		s.remeasure(ctx, id) // the limit stays known
		return undo, nil
	}
	err = s.store.Update(ctx, id, func(sess *snapshots.Session) error {
		n := 0
		for n < len(sess.Messages) && wire.IsSystemRole(sess.Messages[n].Role) {
			n++
		}
		sess.Messages, sess.Summaries = slices.Clone(sess.Messages[:n]), nil
		sess.Stats = snapshots.Stats{}
		s.measure(sess)
		return nil
	})
	return undo, err
}

// takeSnapshot saves a snapshot of session id as stored now.
func (s *sessions) snapshot(ctx context.Context, id, reason string) (snapshots.SnapshotInfo, error) {
	info, err := snapshots.TakeSnapshot(ctx, s.fullStore(), id, reason)
	return info, notFound(err, "session %q not found", id)
}

// restore replaces session id's conversation with snapshot snap's and
// returns how many messages it has now and the undo snapshot.
func (s *sessions) restore(ctx context.Context, id, snap string) (n int, undo snapshots.SnapshotInfo, err error) {
	undo, err = snapshots.Restore(ctx, s.fullStore(), id, snap)
	if err != nil {
		return 0, undo, notFound(err, "snapshot %q of session %q not found", snap, id)
	}
	// Mark the restore, so that it holds for a client that resends its
	// whole history (restorer).
	n = 0
	err = s.store.Update(ctx, id, func(sess *snapshots.Session) error {
		markRestored(sess, snap)
		n = len(sess.Messages)
		return nil
	})
	if err != nil {
		return 0, undo, err
	}
	s.cleared.take(id)
	return n, undo, nil
}

// errChanged aborts a compress whose session changed under it.
var errChanged = errorf(http.StatusConflict, "the session changed while it was being compressed; try again")

// compress trims (or summarizes) the stored conversation of session id
// now with the configured strategy, down to strategy.target of the
// model's effective limit (seed 004 R7.8). The conversation as it was is
// snapshotted first.
func (s *sessions) compress(ctx context.Context, id string) (api.Compressed, error) {
	trimmer := s.trimmer.Load()
	if trimmer == nil || s.tokens == nil {
		return api.Compressed{}, errorf(http.StatusServiceUnavailable, "compress needs token counting and a strategy, and ctxproxy runs without them")
	}
	if trimmer.Mode() == "none" {
		return api.Compressed{}, errorf(http.StatusConflict, "nothing to compress with: strategy.mode is none")
	}
	sess, err := s.store.Get(ctx, id)
	if err != nil {
		return api.Compressed{}, notFound(err, "session %q not found", id)
	}
	msgs, err := fromStored(sess.Messages)
	if err != nil {
		return api.Compressed{}, errorf(http.StatusInternalServerError, "the stored conversation cannot be read: %v", err)
	}
	counter := s.tokens.MessageCounter(sess.Model)
	limit := s.limitFor(sess.Model, sess.Stats)
	before := counter.Prompt(msgs, nil).Tokens
	res := api.Compressed{Before: before, After: before}
	// Acting from the target itself cuts down to it now: a threshold
	// lower than the target would lower the target with it (Trim cuts to
	// min(target, threshold)).
	tctx := rewrite.WithWait(rewrite.WithThreshold(ctx, trimmer.Target()))
	out, err := trimmer.Trim(tctx, "", msgs, limit-counter.Overhead(nil), counter)
	switch {
	case errors.Is(err, rewrite.ErrOverflow):
		return res, errorf(http.StatusUnprocessableEntity, "the conversation needs about %d tokens and cannot be cut "+
			"below the model's limit of %d (strategy.on_overflow: %s)", before, limit, trimmer.OnOverflow())
	case err != nil:
		return res, errorf(http.StatusInternalServerError, "compress failed: %v", err)
	case out.Notice == "" || (out.Dropped == 0 && out.Summarized == 0 && len(out.Messages) == len(msgs)):
		res.Notice = fmt.Sprintf("Nothing to compress: the conversation uses %s of %s tokens, within the target of %s.",
			view.Grouped(before), view.Grouped(limit), view.Percent(trimmer.Target(), 0))
		return res, nil
	}
	undo, err := s.store.SaveSnapshot(ctx, snapshots.NewSnapshot(sess, snapshots.ReasonManual))
	if err != nil {
		return res, fmt.Errorf("saving the session before compressing it: %w", err)
	}
	kept := keepStored(sess.Messages, msgs, out.Messages, time.Now().UTC())
	after := counter.Prompt(out.Messages, nil).Tokens
	err = s.store.Update(ctx, id, func(cur *snapshots.Session) error {
		if !cur.Updated.Equal(sess.Updated) || len(cur.Messages) != len(sess.Messages) {
			return errChanged
		}
		// Cached summaries stay: they are keyed by the messages they cover.
		cur.Messages = kept
		cur.Stats.Tokens, cur.Stats.Limit = after, limit
		cur.Stats.Usage = finite(float64(after) / float64(max(limit, 1)))
		// rewrite.Result.Dropped counts folded messages too, as the
		// chat path's headers do not: dropped means dropped unsummarized.
		cur.Stats.Dropped, cur.Stats.Summarized = out.Dropped-out.Summarized, out.Summarized
		return nil
	})
	if err != nil {
		return res, err
	}
	res.After, res.Dropped, res.Summarized, res.Notice = after, out.Dropped-out.Summarized, out.Summarized, out.Notice
	res.Undo = snapshotOf(undo)
	return res, nil
}

// keepStored maps a strategy's output back to the stored messages, so a
// kept message keeps its timestamp and metadata: strategies keep the order
// and the raw bytes of what they do not change. A message they made or
// changed (a marker, a summary, a shortened tool result) is stored new.
func keepStored(stored []snapshots.Message, in, out []rewrite.Message, now time.Time) []snapshots.Message {
	kept := make([]snapshots.Message, 0, len(out))
	j := 0
	for i := range out {
		m := &out[i]
		if !m.Edited && !m.Synthetic {
			k := j
			for k < len(in) && !(in[k].Role == m.Role && bytes.Equal(in[k].Raw, m.Raw)) {
				k++
			}
			if k < len(in) {
				kept = append(kept, stored[k])
				j = k + 1
				continue
			}
		}
		sm := toStored(out[i : i+1])[0]
		sm.Timestamp = now
		kept = append(kept, sm)
	}
	return kept
}

// limitFor is the effective limit of a stored session's model: the last
// request's, else the last one seen for the model, else its table limit.
func (s *sessions) limitFor(model string, st snapshots.Stats) int {
	if st.Limit > 0 {
		return st.Limit
	}
	if e, ok := s.seen.get(model); ok && e.effective > 0 {
		return e.effective
	}
	if s.tokens == nil {
		return 0
	}
	return s.tokens.Limits(model, 0).Effective()
}

// measure counts a stored conversation changed outside a chat request,
// so that its stats describe it.
func (s *sessions) measure(sess *snapshots.Session) {
	if s.tokens == nil {
		return
	}
	msgs, err := fromStored(sess.Messages)
	if err != nil {
		return
	}
	sess.Stats.Tokens = s.tokens.MessageCounter(sess.Model).Prompt(msgs, nil).Tokens
	if sess.Stats.Limit = s.limitFor(sess.Model, sess.Stats); sess.Stats.Limit > 0 {
		sess.Stats.Usage = finite(float64(sess.Stats.Tokens) / float64(sess.Stats.Limit))
	}
}

// remeasure measures a stored session again (after an import or a
// clear).
func (s *sessions) remeasure(ctx context.Context, id string) {
	if s.tokens == nil {
		return
	}
	if err := s.store.Update(ctx, id, func(sess *snapshots.Session) error {
		s.measure(sess)
		return nil
	}); err != nil {
		s.log.Warn("admin: counting the session failed", "session", id, "err", err)
	}
}

// describe turns an error of an admin operation into a status and a
// message for the user.
func (s *sessions) describe(err error) (int, string) {
	var se *statusError
	switch {
	case errors.As(err, &se):
		return se.status, se.msg
	case errors.Is(err, snapshots.ErrInvalidID):
		return http.StatusBadRequest, "invalid id: " + strings.TrimPrefix(err.Error(), snapshots.ErrInvalidID.Error()+": ")
	case errors.Is(err, snapshots.ErrNotFound):
		return http.StatusNotFound, "not found"
	case errors.Is(err, snapshots.ErrMalformed):
		return http.StatusBadRequest, strings.TrimPrefix(err.Error(), "snapshots: ")
	case errors.Is(err, snapshots.ErrCorrupt):
		s.log.Error("admin: stored record is corrupt", "err", err)
		return http.StatusInternalServerError, "the stored record is corrupt and was set aside: " +
			strings.TrimPrefix(err.Error(), "snapshots: ")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "the session store did not answer in time"
	}
	s.log.Error("admin: session store failed", "err", err)
	return http.StatusInternalServerError, "the session store failed: " + strings.TrimPrefix(err.Error(), "snapshots: ")
}

// notFound names what was not found when err says so.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, snapshots.ErrNotFound) {
		return errorf(http.StatusNotFound, format, args...)
	}
	return err
}

// statusError is an admin error with its HTTP status.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

var errNoStore = errorf(http.StatusServiceUnavailable,
	"sessions are off: ctxproxy runs without a session store (snapshots.store)")

// finite keeps NaN and infinities, which JSON cannot carry, out of
// answers.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

func sessionInfoOf(i snapshots.SessionInfo) api.SessionInfo {
	out := api.SessionInfo{SessionID: i.ID, Model: i.Model, Created: i.Created.UTC(), Updated: i.Updated.UTC(),
		Messages: i.Messages, Tokens: i.Tokens, Limit: i.Limit, Usage: finite(i.Usage), Requests: i.Requests,
		Snapshots: i.Snapshots, Sent: i.Sent, ForwardedUsage: finite(i.Usage)}
	if i.Sent > 0 && i.Limit > 0 {
		out.ForwardedUsage = float64(i.Sent) / float64(i.Limit)
	}
	return out
}

// snapshotOf is a snapshot's JSON; nil for the zero info (no undo).
func snapshotOf(i snapshots.SnapshotInfo) *api.SnapshotInfo {
	if i.ID == "" {
		return nil
	}
	return &api.SnapshotInfo{ID: i.ID, SessionID: i.SessionID, Created: i.Created.UTC(), Model: i.Model,
		Tokens: i.Tokens, Usage: finite(i.Usage), Reason: i.Reason, Messages: i.Messages, Bytes: i.Bytes}
}

func statsOf(st snapshots.Stats) api.SessionStats {
	out := api.SessionStats{Tokens: st.Tokens, Limit: st.Limit, Usage: finite(usageOf(st)), Sent: st.Sent, NumCtx: st.NumCtx,
		Dropped: st.Dropped, Summarized: st.Summarized, PromptTokens: st.PromptTokens,
		CompletionTokens: st.CompletionTokens, Requests: st.Requests, Truncations: st.Truncations}
	if !st.LastTruncation.IsZero() {
		t := st.LastTruncation.UTC()
		out.LastTruncation = &t
	}
	if a := st.Budget; a != nil {
		b := budget.Budget{Total: a.Total, SystemPrompt: a.System, Tools: a.Tools, ResponseReserve: a.Reserve,
			Conversation: a.Conversation}
		out.Budget = &api.Budget{Total: a.Total, System: a.System, Tools: a.Tools, Reserve: a.Reserve,
			Conversation: a.Conversation, Available: b.Available()}
	}
	return out
}

// usageOf is a session's usage, from its tokens when the usage was not
// recorded.
func usageOf(st snapshots.Stats) float64 {
	if st.Usage == 0 && st.Limit > 0 {
		return float64(st.Tokens) / float64(st.Limit)
	}
	return st.Usage
}

// usageWarning is seed 000's warning for a usage, as the chat routes send
// it in X-Ctxproxy-Warning.
func usageWarning(usage float64) string {
	switch {
	case usage >= 0.9:
		return warn90
	case usage >= 0.8:
		return warn80
	}
	return ""
}

func messagesOf(msgs []snapshots.Message) []api.SessionMessage {
	out := make([]api.SessionMessage, len(msgs))
	for i, m := range msgs {
		out[i] = api.SessionMessage{Role: m.Role, Content: m.Content, Timestamp: m.Timestamp.UTC(), Importance: m.Importance,
			Metadata: m.Metadata, Preserve: m.Preserve}
	}
	return out
}
