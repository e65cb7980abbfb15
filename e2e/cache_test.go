//go:build e2e

package e2e

import (
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/replay"
)

// TestRealOllama_PromptCache is the short replay of docs/benchmarks.md's
// prompt-cache table: a 30-turn chat, the whole history sent each turn,
// window 4,096, through a per-turn trimmer, smart and summarize (the
// summarizer the chat's own model on the same Ollama). Over the second
// half the trimmer moves the forwarded prefix on every turn; smart and
// summarize move it only at their cuts, so Ollama reads a fraction of the
// prompt time, and summarize forwards its summaries on every turn after
// the first.
func TestRealOllama_PromptCache(t *testing.T) {
	o := need(t)
	var log strings.Builder
	results, err := replay.Run(t.Context(), replay.Config{
		Ollama: o.url, Bin: suite.bin, Model: "tiny", Turns: 30, Window: 4096,
		Paths: []string{replay.PerTurn, "smart", "summarize"}, UserChars: 100, Seed: 1,
		Dir: t.TempDir(), Log: &log,
	})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	replay.Table(&table, results)
	t.Log("\n" + table.String())
	trimmer := results[0].SecondHalf()
	if trimmer.Cuts < 10 {
		t.Errorf("the per-turn trimmer moved the prefix on %d of 15 turns; the comparison needs a full window", trimmer.Cuts)
	}
	for _, r := range results[1:] {
		h := r.SecondHalf()
		// Measured: 0.70–0.77 of the prompt kept (the summaries' lengths
		// vary from run to run); the trimmer keeps about a tenth.
		if h.Cuts > 5 || h.MeanKept < 0.6 {
			t.Errorf("%s: %d cuts in 15 turns, %.2f of the prompt kept on average", r.Path, h.Cuts, h.MeanKept)
		}
		// The gap is 3 to 6 times in every run measured; half leaves room
		// for a busy machine.
		if ratio := h.PromptTime.Seconds() / trimmer.PromptTime.Seconds(); ratio > 0.5 {
			t.Errorf("%s: %.2f× the trimmer's prompt time", r.Path, ratio)
		}
	}
	first, missing := results[2].FirstSummary()
	if first == 0 || missing > 0 {
		t.Errorf("summarize: first summary at turn %d, %d turns after it without one", first, missing)
	}
	cutTurns := 0
	for _, turn := range results[2].Turns {
		if turn.Cut {
			cutTurns++
		}
	}
	if calls := results[2].SummarizerCalls; calls == 0 || calls > 2*cutTurns {
		t.Errorf("summarize: %d summarizer calls for %d cuts: not written at the cuts", calls, cutTurns)
	}
}
