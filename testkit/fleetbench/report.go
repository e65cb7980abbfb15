package fleetbench

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// Summary is one run's turns summed up.
type Summary struct {
	// Name says what ran ("sessions", "round_robin", "sessions, kill").
	Name string
	// Sessions and Turns are the plan's.
	Sessions, Turns int
	// PromptTime is Ollama's prompt_eval_duration summed over the second
	// half of every session's turns; PromptTokens its prompt_eval_count
	// there, Cached its prompt_eval_cached_count (-1: not reported).
	PromptTime           time.Duration
	PromptTokens, Cached int
	// P50 and P90 are the answered turns' times to first byte.
	P50, P90 time.Duration
	// Lost counts turns not answered 200.
	Lost int
	// OneServer counts sessions whose turns all went to one server;
	// Servers the servers that served some turn.
	OneServer, Servers int
	// Wall is how long the run took.
	Wall time.Duration
}

// Summarize sums turns up, from sessions of turns turns each.
func Summarize(name string, turns []Turn, sessions, perSession int, wall time.Duration) Summary {
	s := Summary{Name: name, Sessions: sessions, Turns: perSession, Wall: wall, Cached: -1}
	var ttfb []time.Duration
	for _, t := range turns {
		if !t.OK() {
			s.Lost++
			continue
		}
		ttfb = append(ttfb, t.TTFB)
		if t.Turn > perSession/2 {
			s.PromptTime += t.PromptEval
			s.PromptTokens += t.PromptCount
			if t.Cached >= 0 {
				s.Cached = max(s.Cached, 0) + t.Cached
			}
		}
	}
	// Turns never sent (a run cut short) are lost too.
	s.Lost += max(sessions*perSession-len(turns), 0)
	slices.Sort(ttfb)
	s.P50, s.P90 = percentile(ttfb, 0.5), percentile(ttfb, 0.9)
	servers := ServersOf(turns)
	used := map[string]bool{}
	for _, list := range servers {
		if len(list) == 1 {
			s.OneServer++
		}
		for _, b := range list {
			used[b] = true
		}
	}
	s.Servers = len(used)
	return s
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// ServersOf returns, for each session, the servers its answered turns
// went to, in the order it first went to each ("" when an answer did
// not say).
func ServersOf(turns []Turn) map[int][]string {
	out := map[int][]string{}
	for _, t := range turns {
		if t.OK() && !slices.Contains(out[t.Session], t.Backend) {
			out[t.Session] = append(out[t.Session], t.Backend)
		}
	}
	return out
}

// Table writes summaries as a Markdown table, each prompt time also as a
// multiple of ref's (none when ref is nil).
func Table(w io.Writer, sums []Summary, ref *Summary) {
	fmt.Fprintln(w, "| run | sessions × turns | prompt time, 2nd half | × round robin | prompt tokens (cached) | TTFB p50 | TTFB p90 | turns lost | sessions on one server | servers | wall |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range sums {
		ratio := "—"
		if ref != nil && ref.PromptTime > 0 {
			ratio = fmt.Sprintf("%.2f", s.PromptTime.Seconds()/ref.PromptTime.Seconds())
		}
		cached := ""
		if s.Cached >= 0 {
			cached = fmt.Sprintf(" (%d)", s.Cached)
		}
		fmt.Fprintf(w, "| %s | %d × %d | %.2f s | %s | %d%s | %s | %s | %d | %d of %d | %d | %s |\n",
			s.Name, s.Sessions, s.Turns, s.PromptTime.Seconds(), ratio, s.PromptTokens, cached,
			s.P50.Round(time.Millisecond), s.P90.Round(time.Millisecond), s.Lost, s.OneServer, s.Sessions, s.Servers,
			s.Wall.Round(time.Second))
	}
}
