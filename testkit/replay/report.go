package replay

import (
	"fmt"
	"io"
	"slices"
)

// Table writes results as a Markdown table of their second halves, with
// each prompt time as a multiple of the per-turn trimmer's.
func Table(w io.Writer, results []Result) {
	ref := find(results, PerTurn)
	fmt.Fprintln(w, "| path | prompt time | × trimmer | wall time | forwarded (of limit) | cuts | prefix kept | cached (backend) | reloads | summarizer calls | summaries |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range results {
		h := r.SecondHalf()
		ratio := "—"
		if ref != nil && ref.SecondHalf().PromptTime > 0 {
			ratio = fmt.Sprintf("%.2f", h.PromptTime.Seconds()/ref.SecondHalf().PromptTime.Seconds())
		}
		sums := "—"
		if first, missing := r.FirstSummary(); first > 0 {
			sums = fmt.Sprintf("from turn %d, %d turns without", first, missing)
		}
		cuts, kept, cached := fmt.Sprint(h.Cuts), fmt.Sprintf("%.2f", h.MeanKept), "—"
		if h.MeanCached >= 0 { // Ollama 0.30 and later say
			cached = fmt.Sprintf("%.2f", h.MeanCached)
		}
		if r.Path == Alone { // Ollama cuts inside, out of the recorder's sight
			cuts, kept = "every turn", "—"
		}
		fmt.Fprintf(w, "| %s | %.2f s | %s | %.2f s | %.0f (%.0f%%) | %s | %s | %s | %d | %d | %s |\n",
			r.Path, h.PromptTime.Seconds(), ratio, h.Wall.Seconds(), h.MeanForwarded, 100*h.MeanShare,
			cuts, kept, cached, h.Reloads, r.SummarizerCalls, sums)
	}
}

// Check returns the cache targets results miss, over their second
// halves: smart, summarize and hybrid spend at most 0.35× the per-turn
// trimmer's prompt time and every other strategy at most 0.5×, each
// forwarding on average at least half of the limit; summarize and hybrid
// take at most 3× smart's wall time, and every turn after their first
// summary forwards one.
func Check(results []Result) []string {
	var out []string
	ref := find(results, PerTurn)
	smart := find(results, "smart")
	for _, r := range results {
		if r.Path == Alone || r.Path == PerTurn {
			continue
		}
		h := r.SecondHalf()
		if ref != nil {
			bound := 0.5
			if slices.Contains([]string{"smart", "summarize", "hybrid"}, r.Path) {
				bound = 0.35
			}
			if got := h.PromptTime.Seconds() / ref.SecondHalf().PromptTime.Seconds(); got > bound {
				out = append(out, fmt.Sprintf("%s: prompt time %.2f× the per-turn trimmer's, over %.2f×", r.Path, got, bound))
			}
		}
		if h.MeanShare < 0.5 {
			out = append(out, fmt.Sprintf("%s: forwarded %.0f%% of the limit on average, under half", r.Path, 100*h.MeanShare))
		}
		if r.Path != "summarize" && r.Path != "hybrid" {
			continue
		}
		if smart != nil {
			if got := h.Wall.Seconds() / smart.SecondHalf().Wall.Seconds(); got > 3 {
				out = append(out, fmt.Sprintf("%s: wall time %.2f× smart's, over 3×", r.Path, got))
			}
		}
		switch first, missing := r.FirstSummary(); {
		case first == 0:
			out = append(out, r.Path+": no turn forwarded a summary")
		case missing > 0:
			out = append(out, fmt.Sprintf("%s: %d turns after the first summary (turn %d) forwarded none", r.Path, missing, first))
		}
	}
	return out
}

func find(results []Result, path string) *Result {
	for i := range results {
		if results[i].Path == path {
			return &results[i]
		}
	}
	return nil
}
