package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// samples are the figures of every round, by workload, target and
// measure ("small/ctxproxy/rps").
type samples map[string][]float64

func (s samples) add(key string, v float64) { s[key] = append(s[key], v) }

// row is one line of the table: a measure of the subject against the
// base, as a ratio of the two or, for latencies, as what each adds.
type row struct {
	workload, measure string
	base, subject     string // keys without the round
	unit              string
	// ratio targets: ok(median ratio); diff targets: ok(median of
	// subject − base over rounds).
	diff   bool
	target string
	ok     func(float64) bool
}

func runTable(o options) error {
	store := filepath.Join(o.dir, "data")
	s, err := startAll(o, store)
	if err != nil {
		return err
	}
	defer s.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	big := chatBody("llama3.1:8b", 100, 1000, false)
	loads := []struct {
		w       workload
		targets []*proc
	}{
		{workload{"small", "POST", "/api/chat", []byte(smallChat)}, []*proc{s.bare, s.ctx}},
		{workload{"big", "POST", "/api/chat", big}, []*proc{s.bare, s.bareJSON, s.ctx}},
		{workload{"cut", "POST", "/api/chat", chatBody("bench-small", 100, 1000, false)}, []*proc{s.bare, s.bareJSON, s.ctx}},
		{workload{"tags", "GET", "/api/tags", nil}, []*proc{s.bare, s.ctx}},
	}
	scripts := map[string]string{}
	var all []workload
	for _, l := range loads {
		if scripts[l.w.name], err = l.w.script(o.dir); err != nil {
			return err
		}
		all = append(all, l.w)
	}
	streamBody := []byte(strings.Replace(smallChat, `"stream":false`, `"stream":true`, 1))
	for _, p := range []*proc{s.fake, s.bare, s.bareJSON, s.ctx} {
		if err := warm(client, p, all); err != nil {
			return err
		}
	}
	sm := samples{}
	t0 := time.Now()
	for r := range o.rounds {
		for _, l := range loads {
			for i := range l.targets {
				p := l.targets[(i+r)%len(l.targets)] // a different target first each round
				ld, err := drive(p, scripts[l.w.name], l.w.path, o.threads, o.conns, o.duration)
				if err != nil {
					return err
				}
				sm.add(l.w.name+"/"+p.name+"/rps", ld.rps())
				sm.add(l.w.name+"/"+p.name+"/cpu", ld.cpuPerReq())
			}
		}
		// Unloaded: one request at a time. wrk -c1 times each target in a
		// window of its own; the probes take the targets in turn, request
		// by request (stream.go), and are what the targets are judged on.
		trio := []*proc{s.fake, s.bare, s.ctx}
		turn := slices.Concat(trio[r%3:], trio[:r%3]) // a different target first each round
		lat := map[string]float64{}
		for _, p := range turn {
			ld, err := drive(p, scripts["big"], "/api/chat", 1, 1, o.duration)
			if err != nil {
				return err
			}
			lat[p.name] = ld.P50
		}
		paired, err := probeLatency(client, turn, "/api/chat", big, o.latencyN)
		if err != nil {
			return err
		}
		for _, name := range []string{"bare", "ctxproxy"} {
			sm.add("wrk1/"+name+"/added", lat[name]-lat["fake backend"])
			sm.add("unloaded/"+name+"/added", paired[name]-paired["fake backend"])
		}
		st, err := probeStreams(client, turn, streamBody, o.streamN)
		if err != nil {
			return err
		}
		for _, name := range []string{"bare", "ctxproxy"} {
			sm.add("stream/"+name+"/first", st[name].first-st["fake backend"].first)
			sm.add("stream/"+name+"/gap", st[name].gap)
			sm.add("stream/"+name+"/maxgap", st[name].maxGap)
		}
		for _, p := range []*proc{s.bare, s.ctx} {
			rss, peak := p.mem()
			sm.add("mem/"+p.name+"/rss", rss)
			sm.add("mem/"+p.name+"/peak", peak)
		}
		fmt.Fprintf(os.Stderr, "bench: round %d of %d done (%s)\n", r+1, o.rounds, time.Since(t0).Round(time.Second))
	}
	printTable(o, sm)
	return nil
}

var rows = []row{
	{workload: "small chat (≈200 B)", measure: "req/s", base: "small/bare/rps", subject: "small/ctxproxy/rps", unit: "",
		target: "≥ 0.80×", ok: func(v float64) bool { return v >= 0.8 }},
	{workload: "small chat (≈200 B)", measure: "CPU µs/request", base: "small/bare/cpu", subject: "small/ctxproxy/cpu", unit: "µs",
		target: "≤ 1.5×", ok: func(v float64) bool { return v <= 1.5 }},
	{workload: "big chat warm (100 msgs, 100 KB)", measure: "req/s", base: "big/bare/rps", subject: "big/ctxproxy/rps"},
	{workload: "big chat warm (100 msgs, 100 KB)", measure: "req/s vs bare+json", base: "big/bare+json/rps", subject: "big/ctxproxy/rps"},
	{workload: "big chat warm (100 msgs, 100 KB)", measure: "CPU µs/request", base: "big/bare/cpu", subject: "big/ctxproxy/cpu", unit: "µs",
		target: "≤ 2.0×", ok: func(v float64) bool { return v <= 2 }},
	{workload: "big chat cut (8k window)", measure: "req/s vs bare+json", base: "cut/bare+json/rps", subject: "cut/ctxproxy/rps",
		target: "≥ 1.0×", ok: func(v float64) bool { return v >= 1 }},
	{workload: "big chat cut (8k window)", measure: "CPU µs/request", base: "cut/bare/cpu", subject: "cut/ctxproxy/cpu", unit: "µs"},
	{workload: "passthrough GET /api/tags", measure: "req/s", base: "tags/bare/rps", subject: "tags/ctxproxy/rps",
		target: "≥ 0.95×", ok: func(v float64) bool { return v >= 0.95 }},
	{workload: "passthrough GET /api/tags", measure: "CPU µs/request", base: "tags/bare/cpu", subject: "tags/ctxproxy/cpu", unit: "µs"},
	{workload: "unloaded, 100 KB chat", measure: "added p50, wrk -c1, one target after another", base: "wrk1/bare/added", subject: "wrk1/ctxproxy/added", unit: "µs",
		diff: true},
	{workload: "unloaded, 100 KB chat", measure: "added p50, targets in turn", base: "unloaded/bare/added", subject: "unloaded/ctxproxy/added", unit: "µs",
		diff: true, target: "≤ bare + 300 µs", ok: func(v float64) bool { return v <= 300 }},
	{workload: "stream, small chat (20 chunks 1 ms apart)", measure: "added to first chunk", base: "stream/bare/first", subject: "stream/ctxproxy/first", unit: "µs",
		diff: true, target: "≤ bare + 100 µs", ok: func(v float64) bool { return v <= 100 }},
	{workload: "stream, small chat (20 chunks 1 ms apart)", measure: "chunk gap p50", base: "stream/bare/gap", subject: "stream/ctxproxy/gap", unit: "µs",
		diff: true, target: "≤ bare + 100 µs", ok: func(v float64) bool { return v <= 100 }},
	{workload: "stream, small chat (20 chunks 1 ms apart)", measure: "largest chunk gap", base: "stream/bare/maxgap", subject: "stream/ctxproxy/maxgap", unit: "µs"},
	{workload: "memory", measure: "RSS after each round, MiB", base: "mem/bare/rss", subject: "mem/ctxproxy/rss"},
	{workload: "memory", measure: "peak RSS, MiB", base: "mem/bare/peak", subject: "mem/ctxproxy/peak"},
}

func printTable(o options, sm samples) {
	fmt.Printf("wrk -t%d -c%d, %s per run, %d interleaved rounds; medians, [min–max] over rounds\n\n",
		o.threads, o.conns, o.duration, o.rounds)
	fmt.Println("| workload | measure | bare | ctxproxy | ctxproxy/bare | target | met |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- |")
	for _, rw := range rows {
		b, c := sm[rw.base], sm[rw.subject]
		n := min(len(b), len(c))
		ratios := make([]float64, n)
		diffs := make([]float64, n)
		for i := range n {
			if b[i] != 0 {
				ratios[i] = c[i] / b[i]
			}
			diffs[i] = c[i] - b[i]
		}
		judge := median(ratios)
		digits := 2
		if rw.ok != nil && !rw.diff {
			// A ratio that rounds onto its target's line shows the digit
			// that decided the verdict ("0.797×", not "0.80×" and "no").
			if r, _ := strconv.ParseFloat(strconv.FormatFloat(judge, 'f', 2, 64), 64); rw.ok(r) != rw.ok(judge) {
				digits = 3
			}
		}
		cell := fmt.Sprintf("%.*f× [%.2f–%.2f]", digits, judge, slices.Min(ratios), slices.Max(ratios))
		if rw.diff {
			cell = fmt.Sprintf("%+.0f µs [%+.0f…%+.0f]", median(diffs), slices.Min(diffs), slices.Max(diffs))
			judge = median(diffs)
		}
		met := ""
		if rw.ok != nil {
			met = "no"
			if rw.ok(judge) {
				met = "yes"
			}
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", rw.workload, rw.measure,
			figure(b, rw.unit), figure(c, rw.unit), cell, rw.target, met)
	}
	fmt.Println()
	fmt.Println("bare: httputil.ReverseProxy with Go's default transport (64 idle per host); bare+json: the same, decoding each body into")
	fmt.Println("map[string]any and encoding it again. CPU from /proc/PID/stat (utime+stime) over each run, in 10 ms ticks.")
	fmt.Println("Latency rows are what each proxy adds to the fake backend's own figure, measured in the same round;")
	fmt.Println("\"in turn\": one request to each target after another, so that the machine's drift falls on all alike.")
}

func figure(v []float64, unit string) string {
	m := median(v)
	var s string
	switch {
	case len(v) == 0:
		return "—"
	case m >= 1000:
		s = fmt.Sprintf("%.0f", m)
	case m >= 10:
		s = fmt.Sprintf("%.1f", m)
	default:
		s = fmt.Sprintf("%.2f", m)
	}
	return strings.TrimSpace(s + " " + unit)
}
