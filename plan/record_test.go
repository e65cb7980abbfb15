package plan

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// holder is a request's holds as the recorder sees them: it counts the
// hand-overs and the writer's call once the turn is stored.
type holder struct{ handed, freed atomic.Int32 }

func (h *holder) HandOver() { h.handed.Add(1) }

func (h *holder) Stored() { h.freed.Add(1) }

// The recorder takes a plan and the Outcome of its reply: it queues the
// turn (an accumulated one appended to the stored history), hands the
// request's holds to the writer, which gives them back once the turn is
// stored, and says what it found of the backend's count.
func TestRecordHandsHoldsToTheWriter(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	store, err := snapshots.NewFileStore(snapshots.Config{Dir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	writer := snapshots.NewWriter(store, snapshots.Config{}, log)
	t.Cleanup(func() { writer.Close(context.Background()) })
	tokens := budget.NewRegistry(budget.Config{Encoding: tokenizer.EncodingApproximate}, log)
	rec := NewRecorder(RecorderDeps{Tokens: tokens, Writer: writer, Trimmer: &atomic.Pointer[rewrite.Trimmer]{},
		Trackers: sessions.NewTrackers(), Log: log})

	turn := []rewrite.Message{{Role: "user", Content: "hello there"}}
	counter := tokens.MessageCounter("small").Frozen()
	before := counter.Prompt(turn, nil)
	p := Plan{Model: "small", Dialect: wire.Ollama, Messages: turn, Sent: turn, NewTurn: turn, Accumulated: true,
		Counter: counter, Before: before, After: before, Limit: 1000, Window: 2048, opt: Options{Session: "s1", Named: true}}
	h := &holder{}
	reply := wire.Reply{Status: 200, Complete: true, Content: "hi", PromptTokens: before.Tokens + 2, OutputTokens: 1, CachedTokens: -1}
	got := rec.Record(p, Outcome{Reply: reply, Holds: h})
	if got.PromptTokens != reply.PromptTokens || got.Truncated || got.ReplyCut {
		t.Errorf("recorded %+v", got)
	}
	if err := writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.handed.Load() != 1 || h.freed.Load() != 1 {
		t.Errorf("holds handed over %d times, given back %d times; want once each", h.handed.Load(), h.freed.Load())
	}
	sess, err := store.Get(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Messages) != 2 || sess.Messages[1].Content != "hi" || sess.Model != "small" {
		t.Errorf("stored %d messages (%+v), model %q", len(sess.Messages), sess.Messages, sess.Model)
	}

	// A model the backend does not have: no turn, nothing handed over.
	h = &holder{}
	rec.Record(p, Outcome{Reply: wire.Reply{Status: 404, PromptTokens: -1, CachedTokens: -1}, Holds: h})
	if h.handed.Load() != 0 {
		t.Errorf("a 404 handed the holds over")
	}
}
