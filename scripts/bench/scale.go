package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/snapshots"
)

// runScale prints what a request costs as the conversation grows (the
// same conversation resent, nothing to cut) and as the store holds more
// sessions (seeded into the file store directly, then a small chat).
func runScale(o options) error {
	lengths, err := ints(o.scale)
	if err != nil {
		return err
	}
	counts, err := ints(o.sessions)
	if err != nil {
		return err
	}
	fmt.Printf("wrk -t%d -c%d, %s per run, %d interleaved rounds per point; medians, [min–max] over rounds\n\n",
		o.threads, o.conns, o.duration, o.rounds)
	fmt.Println("| conversation | body | bare CPU/request | ctxproxy CPU/request | ctxproxy/bare | ctxproxy req/s | ctxproxy RSS after / peak |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- |")
	for _, n := range lengths {
		body := chatBody("llama3.1:8b", n, 300, false)
		sm, rss, peak, err := measurePoint(o, filepath.Join(o.dir, "len-"+strconv.Itoa(n)), nil,
			workload{"len" + strconv.Itoa(n), "POST", "/api/chat", body}, true)
		if err != nil {
			return err
		}
		fmt.Printf("| %d messages | %d KB | %s | %s | %s | %s | %.0f / %.0f MiB |\n", n, len(body)/1000,
			figure(sm["bare"], "µs"), figure(sm["ctx"], "µs"), ratioCell(sm["ctx"], sm["bare"]), figure(sm["rps"], ""), rss, peak)
	}
	fmt.Println()
	fmt.Println("| sessions stored | seeding | ctxproxy start | idle RSS | small chat CPU/request | req/s | RSS after / peak |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- |")
	for _, n := range counts {
		store := filepath.Join(scratchFS(o.dir), fmt.Sprintf("ctxproxy-bench-sessions-%d-%d", os.Getpid(), n))
		t0 := time.Now()
		if err := seed(store, n); err != nil {
			return err
		}
		seeded := time.Since(t0)
		var started time.Duration
		var idle float64
		sm, rss, peak, err := measurePoint(o, filepath.Join(o.dir, "sessions-"+strconv.Itoa(n)), func(s servers, took time.Duration) {
			started = took
			idle, _ = s.ctx.mem()
		}, workload{"small", "POST", "/api/chat", []byte(smallChat)}, false, store)
		os.RemoveAll(store)
		if err != nil {
			return err
		}
		fmt.Printf("| %d | %s | %s | %.0f MiB | %s | %s | %.0f / %.0f MiB |\n", n, seeded.Round(time.Millisecond),
			started.Round(time.Millisecond), idle, figure(sm["ctx"], "µs"), figure(sm["rps"], ""), rss, peak)
	}
	return nil
}

// measurePoint starts the servers on a fresh store, runs w through
// ctxproxy (and bare, when withBare) for the rounds, and returns the CPU
// per request of each ("bare", "ctx") and ctxproxy's req/s ("rps"), and
// ctxproxy's memory after the last round.
func measurePoint(o options, dir string, started func(servers, time.Duration), w workload, withBare bool, store ...string) (map[string][]float64, float64, float64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, 0, err
	}
	po := o
	po.dir = dir
	st := filepath.Join(dir, "data")
	if len(store) > 0 {
		st = store[0]
	}
	t0 := time.Now()
	s, err := startAll(po, st)
	if err != nil {
		return nil, 0, 0, err
	}
	defer s.stop()
	if started != nil {
		started(s, time.Since(t0))
	}
	script, err := w.script(dir)
	if err != nil {
		return nil, 0, 0, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	targets := []*proc{s.ctx}
	if withBare {
		targets = append(targets, s.bare)
	}
	for _, p := range targets {
		if err := warm(client, p, []workload{w}); err != nil {
			return nil, 0, 0, err
		}
	}
	sm := map[string][]float64{}
	for r := range o.rounds {
		for i := range targets {
			p := targets[(i+r)%len(targets)]
			ld, err := drive(p, script, w.path, o.threads, o.conns, o.duration)
			if err != nil {
				return nil, 0, 0, err
			}
			key := "bare"
			if p == s.ctx {
				key = "ctx"
				sm["rps"] = append(sm["rps"], ld.rps())
			}
			sm[key] = append(sm[key], ld.cpuPerReq())
		}
	}
	rss, peak := s.ctx.mem()
	return sm, rss, peak, nil
}

// seed writes n sessions of four messages straight into a file store.
func seed(dir string, n int) error {
	st, err := snapshots.NewFileStore(snapshots.Config{Dir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer st.Close()
	msgs := []snapshots.Message{{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: "What is the capital of France?"}, {Role: "assistant", Content: "Paris."},
		{Role: "user", Content: "And of Italy?"}}
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				err := st.Update(context.Background(), fmt.Sprintf("seeded-%d", i), func(s *snapshots.Session) error {
					s.Model = "llama3.1:8b"
					s.SetMessages(slices.Clone(msgs), time.Now()) // it stamps them in place
					return nil
				})
				if err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// scratchFS is where seeded stores go: memory (/dev/shm) when there is
// one, since seeding 100,000 sessions with an fsync each on a disk takes
// longer than the measurement.
func scratchFS(dir string) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return dir
}

func ratioCell(num, den []float64) string {
	n := min(len(num), len(den))
	if n == 0 {
		return "—"
	}
	r := make([]float64, n)
	for i := range n {
		r[i] = num[i] / den[i]
	}
	lo, hi := r[0], r[0]
	for _, v := range r {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmt.Sprintf("%.2f× [%.2f–%.2f]", median(r), lo, hi)
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q: not a list of numbers", s)
		}
		out = append(out, n)
	}
	return out, nil
}
