package fleetbench

import (
	"strings"
	"testing"
	"time"
)

func TestParseBackend(t *testing.T) {
	for _, tt := range []struct{ in, server, from string }{
		{"b", "b", ""},
		{"b; moved-from=a", "b", "a"},
		{"", "", ""},
	} {
		if s, f := parseBackend(tt.in); s != tt.server || f != tt.from {
			t.Errorf("parseBackend(%q) = %q, %q; want %q, %q", tt.in, s, f, tt.server, tt.from)
		}
	}
}

// Two sessions of four turns: the second half's prompt time, the lost
// turn, the percentiles and the sessions that stayed on one server.
func TestSummarize(t *testing.T) {
	ok := func(s, n int, server string, ttfb, prompt time.Duration) Turn {
		return Turn{Session: s, Turn: n, Status: 200, Backend: server, TTFB: ttfb, PromptEval: prompt, PromptCount: 100, Cached: -1}
	}
	turns := []Turn{
		ok(1, 1, "a", 100*time.Millisecond, time.Second), ok(1, 2, "a", 200*time.Millisecond, time.Second),
		ok(1, 3, "a", 300*time.Millisecond, 2*time.Second), ok(1, 4, "a", 400*time.Millisecond, 3*time.Second),
		ok(2, 1, "b", 500*time.Millisecond, time.Second), ok(2, 2, "b", 600*time.Millisecond, time.Second),
		{Session: 2, Turn: 3, Status: 502, Err: "HTTP 502"}, ok(2, 4, "c", 700*time.Millisecond, 5*time.Second),
	}
	s := Summarize("sessions", turns, 2, 4, time.Minute)
	if s.PromptTime != 10*time.Second || s.PromptTokens != 300 || s.Cached != -1 {
		t.Errorf("second half: %s, %d tokens, cached %d; want 10s, 300, -1", s.PromptTime, s.PromptTokens, s.Cached)
	}
	if s.Lost != 1 || s.OneServer != 1 || s.Servers != 3 {
		t.Errorf("lost %d, on one server %d, servers %d; want 1, 1, 3", s.Lost, s.OneServer, s.Servers)
	}
	if s.P50 != 400*time.Millisecond || s.P90 != 700*time.Millisecond {
		t.Errorf("p50 %s, p90 %s; want 400ms, 700ms", s.P50, s.P90)
	}
	var b strings.Builder
	Table(&b, []Summary{s}, &s)
	if !strings.Contains(b.String(), "| sessions | 2 × 4 | 10.00 s | 1.00 |") {
		t.Errorf("table:\n%s", b.String())
	}
}
