package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// maxSummaries bounds the summaries kept per session; the oldest go
// first. A conversation folds one iteration at a time, so this covers
// hundreds of turns.
const maxSummaries = 512

// SummaryStore keeps the summarize strategy's summaries in the session
// store (snapshots.Session.Summaries), so they survive restarts and are
// shared by replicas on Redis. It is called from background summary jobs,
// never on the request path. On a store that replicas share
// (snapshots.Claimer: Redis) it claims each summary before it is written,
// so that the replicas write it once (rewrite.SummaryClaimer).
type SummaryStore struct{ Store Store }

var (
	_ rewrite.SummaryStore   = SummaryStore{}
	_ rewrite.SummaryClaimer = SummaryStore{}
)

// claimPrefix sets summary claims apart from other claims in a session.
const claimPrefix = "summary:"

// ClaimSummary implements rewrite.SummaryClaimer on a store with claims;
// on one without (the file store, one process), every claim is granted
// at once with nothing to release, and summaries are written as if there
// were no claims.
func (st SummaryStore) ClaimSummary(ctx context.Context, session, key string, ttl time.Duration) (func(context.Context) error, bool, error) {
	cl, ok := st.Store.(snapshots.Claimer)
	if !ok {
		return nil, true, nil
	}
	token, ok, err := cl.Claim(ctx, session, claimPrefix+key, ttl)
	if !ok || err != nil {
		return nil, ok, err
	}
	return func(ctx context.Context) error { return cl.Release(ctx, session, claimPrefix+key, token) }, true, nil
}

// Get returns session's summaries; a session not stored yet has none.
func (st SummaryStore) Get(ctx context.Context, session string) ([]rewrite.Summary, error) {
	sess, err := st.Store.Get(ctx, session)
	if errors.Is(err, snapshots.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]rewrite.Summary, len(sess.Summaries))
	for i, s := range sess.Summaries {
		out[i] = rewrite.Summary{Key: s.Key, Covers: s.Covers, Span: s.Span, Text: s.Text, Tokens: s.Tokens, Created: s.Created}
	}
	return out, nil
}

// Put adds s to session's summaries, replacing one with the same key.
func (st SummaryStore) Put(ctx context.Context, session string, s rewrite.Summary) error {
	return st.Store.Update(ctx, session, func(sess *snapshots.Session) error {
		stored := snapshots.Summary{Key: s.Key, Covers: s.Covers, Span: s.Span, Text: s.Text, Tokens: s.Tokens, Created: s.Created}
		for i := range sess.Summaries {
			if sess.Summaries[i].Key == s.Key {
				sess.Summaries[i] = stored
				return nil
			}
		}
		sess.Summaries = append(sess.Summaries, stored)
		if n := len(sess.Summaries) - maxSummaries; n > 0 {
			sess.Summaries = sess.Summaries[n:]
		}
		return nil
	})
}
