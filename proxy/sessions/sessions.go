package sessions

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

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/report"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// Service is the one place that changes stored sessions outside a chat
// request: the admin API, the in-band commands and the memory guard clear,
// restore, snapshot and compress through it, and settle and measure a
// session around an import, so each operation and the session-id rule
// exist once. Its writes go to the store directly,
// after the writer's queue is flushed, so that a read sees the last chat
// turn and a change lands after it.
type Service struct {
	Store  Store
	Writer Writer
	// Tokens and trimmer count and cut a stored conversation (measure,
	// compress); nil turns those off.
	Tokens  *budget.Registry
	Trimmer *atomic.Pointer[rewrite.Trimmer]
	// Seen gives a session's model the last effective limit a request
	// of it had (0: none yet).
	Seen func(model string) int
	// Cleared are the sessions the memory guard Cleared, forgotten when
	// one is restored or purged.
	Cleared *Cleared
	Log     *slog.Logger
}

// flushWait bounds the wait for queued session writes before an admin
// operation.
const flushWait = 10 * time.Second

// Flush waits for the session writes queued so far, so that an admin read
// sees the last chat turn and an admin write lands after it.
func (s *Service) Flush(ctx context.Context) {
	if s.Writer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, flushWait)
	defer cancel()
	if err := s.Writer.Flush(ctx); err != nil {
		s.Log.Warn("admin: queued session writes not written in time; going on with the stored state", "err", err)
	}
}

// Settle waits for what a command on session id must come after: the
// writes queued here (Flush) and, when replicas share the store, the
// turns of the session that other replicas began and have not stored yet
// (AwaitTurns). So a "/clear" or an admin read that follows a turn sees
// it, on any replica. An empty id waits for the local writes only.
func (s *Service) Settle(ctx context.Context, id string) {
	s.Flush(ctx)
	if id != "" {
		AwaitTurns(ctx, s.Store, id, s.Log)
	}
}

// AwaitTurns waits, when store is shared by replicas
// (snapshots.TurnOrder), for the turns of session id begun on other
// replicas and not stored yet, at most the store's turn wait, and logs a
// failure or a turn given up. It returns the store's TurnOrder (nil when
// it orders no turns, and nothing was waited for), how long it waited,
// and whether it gave a turn up.
func AwaitTurns(ctx context.Context, store Store, id string, log *slog.Logger) (order snapshots.TurnOrder, waited time.Duration, gaveUp bool) {
	order, ok := store.(snapshots.TurnOrder)
	if !ok {
		return nil, 0, false
	}
	waited, complete, err := order.AwaitTurns(ctx, id)
	switch {
	case err != nil:
		log.Warn("waiting for the session's turns on other replicas failed", "session", id, "err", err)
	case !complete:
		log.Warn("a turn answered by another replica was not stored in time; going on without it",
			"session", id, "waited_ms", waited.Milliseconds())
	}
	return order, waited, err == nil && !complete
}

// CheckID validates a session id from a URL: the store's rule
// (snapshots.CheckID), the one the chat routes apply too; describe turns
// its error into a 400 that says why.
func CheckID(id string) error { return snapshots.CheckID(id) }

// fullStore gives the proxy's Store the methods snapshots' helpers
// (Import, Restore) want beyond it.
type fullStore struct{ Store }

func (fullStore) Counters() snapshots.Counters { return snapshots.Counters{} }

func (fullStore) Close() error { return nil }

func (s *Service) FullStore() snapshots.Store {
	if st, ok := s.Store.(snapshots.Store); ok {
		return st
	}
	return fullStore{s.Store}
}

// session reads session id with its snapshot count.
func (s *Service) Get(ctx context.Context, id string) (*snapshots.Session, adminapi.SessionDetail, error) {
	sess, err := s.Store.Get(ctx, id)
	if err != nil {
		return nil, adminapi.SessionDetail{}, NotFound(err, "session %q not found", id)
	}
	snaps, err := s.Store.ListSnapshots(ctx, id)
	if err != nil {
		return nil, adminapi.SessionDetail{}, err
	}
	md := sess.Metadata
	if _, ok := md[RestoreKey]; ok {
		// ctxproxy's own mark of a pending restore is not the user's.
		md = maps.Clone(md)
		delete(md, RestoreKey)
	}
	if md == nil {
		md = map[string]any{}
	}
	out := adminapi.SessionDetail{SessionID: sess.ID, Model: sess.Model, Backend: sess.Backend, Created: sess.Created.UTC(), Updated: sess.Updated.UTC(),
		Metadata: md, Stats: StatsOf(sess.Stats), Messages: len(sess.Messages), Snapshots: len(snaps)}
	// As on the chat routes: a conversation that its last request cut
	// is judged by what was forwarded, never warned of as "approaching".
	usage := out.Stats.Usage
	if st := sess.Stats; st.Sent > 0 && st.Sent != st.Tokens && st.Limit > 0 {
		usage = float64(st.Sent) / float64(st.Limit)
	}
	out.Warning = UsageWarning(usage)
	return sess, out, nil
}

// Clear is /clear: the conversation and its numbers go,
// the metadata stays; the cleared state is snapshotted first (reason
// Clear) so that a clear can be undone. With keepSystem (/context clear)
// the leading system messages stay.
func (s *Service) Clear(ctx context.Context, id string, keepSystem bool, reason string) (undo adminapi.SnapshotInfo, err error) {
	sess, err := s.Store.Get(ctx, id)
	if err != nil {
		return undo, NotFound(err, "session %q not found", id)
	}
	if len(sess.Messages) > 0 {
		if undo, err = s.Store.SaveSnapshot(ctx, snapshots.NewSnapshot(sess, reason)); err != nil {
			return undo, fmt.Errorf("saving the session before clearing it: %w", err)
		}
	}
	if !keepSystem {
		if err := s.Store.Clear(ctx, id); err != nil {
			return undo, NotFound(err, "session %q not found", id)
		}
		s.Remeasure(ctx, id) // the limit stays known
		return undo, nil
	}
	err = s.Store.Update(ctx, id, func(sess *snapshots.Session) error {
		n := 0
		for n < len(sess.Messages) && wire.IsSystemRole(sess.Messages[n].Role) {
			n++
		}
		sess.Messages, sess.Summaries = slices.Clone(sess.Messages[:n]), nil
		sess.Stats = snapshots.Stats{}
		s.Measure(sess)
		return nil
	})
	return undo, err
}

// Snapshot saves a Snapshot of session id as stored now.
func (s *Service) Snapshot(ctx context.Context, id, reason string) (adminapi.SnapshotInfo, error) {
	info, err := snapshots.TakeSnapshot(ctx, s.FullStore(), id, reason)
	return info, NotFound(err, "session %q not found", id)
}

// Restore replaces session id's conversation with snapshot snap's and
// returns how many messages it has now and the undo snapshot.
func (s *Service) Restore(ctx context.Context, id, snap string) (n int, undo adminapi.SnapshotInfo, err error) {
	undo, err = snapshots.Restore(ctx, s.FullStore(), id, snap)
	if err != nil {
		return 0, undo, NotFound(err, "snapshot %q of session %q not found", snap, id)
	}
	// Mark the restore, so that it holds for a client that resends its
	// whole history (restorer).
	n = 0
	err = s.Store.Update(ctx, id, func(sess *snapshots.Session) error {
		MarkRestored(sess, snap)
		n = len(sess.Messages)
		return nil
	})
	if err != nil {
		return 0, undo, err
	}
	s.Cleared.Take(id)
	return n, undo, nil
}

// errChanged aborts a compress whose session changed under it.
var errChanged = Errorf(http.StatusConflict, "the session changed while it was being compressed; try again")

// Compress trims (or summarizes) the stored conversation of session id
// now with the configured strategy, down to strategy.target of the
// model's effective limit; instructions, when not "", are appended to
// the summary prompt of the summaries it writes. The conversation as it
// was is snapshotted first.
//
// A dry run answers the same and changes nothing: no snapshot, no store
// write, no summarizer call. Where summaries are not written yet, its
// after counts each at the expected length of a summary
// (rewrite.Request.DryRun); elsewhere it is what the compress would leave.
func (s *Service) Compress(ctx context.Context, id, instructions string, dryRun bool) (adminapi.Compressed, error) {
	trimmer := s.Trimmer.Load()
	if trimmer == nil || s.Tokens == nil {
		return adminapi.Compressed{}, Errorf(http.StatusServiceUnavailable, "compress needs token counting and a strategy, and ctxproxy runs without them")
	}
	if trimmer.Mode() == "none" {
		return adminapi.Compressed{}, Errorf(http.StatusConflict, "nothing to compress with: strategy.mode is none")
	}
	sess, err := s.Store.Get(ctx, id)
	if err != nil {
		return adminapi.Compressed{}, NotFound(err, "session %q not found", id)
	}
	msgs, err := FromStored(sess.Messages)
	if err != nil {
		return adminapi.Compressed{}, Errorf(http.StatusInternalServerError, "the stored conversation cannot be read: %v", err)
	}
	counter := s.Tokens.MessageCounter(sess.Model)
	limit := s.LimitFor(sess.Model, sess.Stats)
	before := counter.Prompt(msgs, nil).Tokens
	res := adminapi.Compressed{Before: before, After: before, DryRun: dryRun}
	// Acting from the target itself cuts down to it now: a threshold
	// lower than the target would lower the target with it (Trim cuts to
	// min(target, threshold)). The session's model writes the summaries
	// unless summarize.model names another. Session stays "": the
	// summaries' store writes would change the session under this
	// compress, and its update would then fail as changed meanwhile.
	req := rewrite.Request{Model: sess.Model, Instructions: instructions, Threshold: trimmer.Target(), Wait: true, DryRun: dryRun}
	out, err := trimmer.Trim(ctx, req, msgs, limit-counter.Overhead(nil), counter)
	switch {
	case errors.Is(err, rewrite.ErrOverflow):
		return res, Errorf(http.StatusUnprocessableEntity, "the conversation needs about %d tokens and cannot be cut "+
			"below the model's limit of %d (strategy.on_overflow: %s)", before, limit, trimmer.OnOverflow())
	case err != nil:
		return res, Errorf(http.StatusInternalServerError, "compress failed: %v", err)
	case out.Notice == "" || (out.Dropped == 0 && out.Summarized == 0 && len(out.Messages) == len(msgs)):
		res.Notice = fmt.Sprintf("Nothing to compress: the conversation uses %s of %s tokens, within the target of %s.",
			report.Grouped(before), report.Grouped(limit), report.Percent(trimmer.Target(), 0))
		return res, nil
	}
	after := counter.Prompt(out.Messages, nil).Tokens
	if dryRun {
		res.After, res.Dropped, res.Summarized, res.Notice = after, out.Dropped-out.Summarized, out.Summarized, out.Notice
		return res, nil
	}
	undo, err := s.Store.SaveSnapshot(ctx, snapshots.NewSnapshot(sess, snapshots.ReasonManual))
	if err != nil {
		return res, fmt.Errorf("saving the session before compressing it: %w", err)
	}
	kept := KeepStored(sess.Messages, msgs, out.Messages, time.Now().UTC())
	err = s.Store.Update(ctx, id, func(cur *snapshots.Session) error {
		if !cur.Updated.Equal(sess.Updated) || len(cur.Messages) != len(sess.Messages) {
			return errChanged
		}
		// Cached summaries stay: they are keyed by the messages they cover.
		cur.Messages = kept
		cur.Stats.Tokens, cur.Stats.Limit = after, limit
		cur.Stats.Usage = Finite(float64(after) / float64(max(limit, 1)))
		// rewrite.Result.Dropped counts folded messages too, as the
		// chat path's headers do not: dropped means dropped unsummarized.
		cur.Stats.Dropped, cur.Stats.Summarized = out.Dropped-out.Summarized, out.Summarized
		return nil
	})
	if err != nil {
		return res, err
	}
	res.After, res.Dropped, res.Summarized, res.Notice = after, out.Dropped-out.Summarized, out.Summarized, out.Notice
	res.Undo = SnapshotOf(undo)
	return res, nil
}

// KeepStored maps a strategy's output back to the stored messages, so a
// kept message keeps its timestamp and metadata: strategies keep the order
// and the raw bytes of what they do not change. A message they made or
// changed (a marker, a summary, a shortened tool result) is stored new.
func KeepStored(stored []snapshots.Message, in, out []rewrite.Message, now time.Time) []snapshots.Message {
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
		sm := ToStored(out[i : i+1])[0]
		sm.Timestamp = now
		kept = append(kept, sm)
	}
	return kept
}

// LimitFor is the effective limit of a stored session's model: the last
// request's, else the last one seen for the model, else its table limit.
func (s *Service) LimitFor(model string, st snapshots.Stats) int {
	if st.Limit > 0 {
		return st.Limit
	}
	if s.Seen != nil {
		if n := s.Seen(model); n > 0 {
			return n
		}
	}
	if s.Tokens == nil {
		return 0
	}
	return s.Tokens.Window(model, 0).Effective()
}

// Measure counts a stored conversation changed outside a chat request,
// so that its stats describe it.
func (s *Service) Measure(sess *snapshots.Session) {
	if s.Tokens == nil {
		return
	}
	msgs, err := FromStored(sess.Messages)
	if err != nil {
		return
	}
	sess.Stats.Tokens = s.Tokens.MessageCounter(sess.Model).Prompt(msgs, nil).Tokens
	if sess.Stats.Limit = s.LimitFor(sess.Model, sess.Stats); sess.Stats.Limit > 0 {
		sess.Stats.Usage = Finite(float64(sess.Stats.Tokens) / float64(sess.Stats.Limit))
	}
}

// Remeasure measures a stored session again (after an import or a
// clear).
func (s *Service) Remeasure(ctx context.Context, id string) {
	if s.Tokens == nil {
		return
	}
	if err := s.Store.Update(ctx, id, func(sess *snapshots.Session) error {
		s.Measure(sess)
		return nil
	}); err != nil {
		s.Log.Warn("admin: counting the session failed", "session", id, "err", err)
	}
}

// Describe turns an error of an admin operation into a status and a
// message for the user.
func (s *Service) Describe(err error) (int, string) {
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
		s.Log.Error("admin: stored record is corrupt", "err", err)
		return http.StatusInternalServerError, "the stored record is corrupt and was set aside: " +
			strings.TrimPrefix(err.Error(), "snapshots: ")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "the session store did not answer in time"
	}
	s.Log.Error("admin: session store failed", "err", err)
	return http.StatusInternalServerError, "the session store failed: " + strings.TrimPrefix(err.Error(), "snapshots: ")
}

// NotFound names what was not found when err says so.
func NotFound(err error, format string, args ...any) error {
	if errors.Is(err, snapshots.ErrNotFound) {
		return Errorf(http.StatusNotFound, format, args...)
	}
	return err
}

// statusError is an admin error with its HTTP status.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func Errorf(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

var ErrNoStore = Errorf(http.StatusServiceUnavailable,
	"sessions are off: ctxproxy runs without a session store (snapshots.store)")

// Finite keeps NaN and infinities, which JSON cannot carry, out of
// answers.
func Finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

func SessionInfoOf(i snapshots.Listing) adminapi.SessionInfo {
	out := adminapi.SessionInfo{SessionRow: i.SessionRow, ForwardedUsage: Finite(i.Usage)}
	out.Created, out.Updated, out.Usage = i.Created.UTC(), i.Updated.UTC(), Finite(i.Usage)
	if i.Sent > 0 && i.Limit > 0 {
		out.ForwardedUsage = float64(i.Sent) / float64(i.Limit)
	}
	return out
}

// SnapshotOf is a snapshot's JSON; nil for the zero info (no undo).
func SnapshotOf(i adminapi.SnapshotInfo) *adminapi.SnapshotInfo {
	if i.ID == "" {
		return nil
	}
	i.Created, i.Usage = i.Created.UTC(), Finite(i.Usage)
	return &i
}

func StatsOf(st snapshots.Stats) adminapi.SessionStats {
	out := adminapi.SessionStats{Tokens: st.Tokens, Limit: st.Limit, Usage: Finite(UsageOf(st)), Sent: st.Sent, NumCtx: st.NumCtx,
		Dropped: st.Dropped, Summarized: st.Summarized, PromptTokens: st.PromptTokens,
		CompletionTokens: st.CompletionTokens, AllPromptTokens: st.AllPromptTokens, AllCompletionTokens: st.AllCompletionTokens,
		Requests: st.Requests, Truncations: st.Truncations}
	if !st.LastTruncation.IsZero() {
		t := st.LastTruncation.UTC()
		out.LastTruncation = &t
	}
	out.PrefixKept, out.CachedTokens = st.PrefixKept, st.CachedTokens
	if a := st.Budget; a != nil {
		out.Budget = &adminapi.BudgetReport{Budget: *a, Free: a.Available()}
	}
	return out
}

// UsageOf is a session's usage, from its tokens when the usage was not
// recorded.
func UsageOf(st snapshots.Stats) float64 {
	if st.Usage == 0 && st.Limit > 0 {
		return float64(st.Tokens) / float64(st.Limit)
	}
	return st.Usage
}

// UsageWarning is the warning for a usage, as the chat routes send
// it in X-Ctxproxy-Warning.
func UsageWarning(usage float64) string {
	switch {
	case usage >= 0.9:
		return Warn90
	case usage >= 0.8:
		return Warn80
	}
	return ""
}

func MessagesOf(msgs []snapshots.Message) []adminapi.SessionMessage {
	out := make([]adminapi.SessionMessage, len(msgs))
	for i, m := range msgs {
		out[i] = adminapi.SessionMessage{Role: m.Role, Content: m.Content, Timestamp: m.Timestamp.UTC(), Importance: m.Importance,
			Metadata: m.Metadata, Preserve: m.Preserve}
	}
	return out
}

// The warnings of a conversation approaching its window, sent as
// X-Ctxproxy-Warning from the usage of the
// conversation as the client sent it.
const (
	Warn80 = "Context at 80% capacity. Consider /clear or /save."
	Warn90 = "Context at 90% capacity. Auto-trimming soon."
)
