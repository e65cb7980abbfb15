package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// The unloaded probes are stopwatches, not load generators: one request at
// a time. They take the targets in turn request by request (the fake
// backend, bare, ctxproxy, then again from the next one), so that what the
// machine does meanwhile — a neighbour's burst, a slow second — lands on
// every target alike and falls out of the differences. Timing each
// target's requests in a window of its own, one window after another, as
// wrk -c1 does, puts that drift into the difference itself: on a shared
// 2-core machine it moved the figures by hundreds of microseconds.

// streamed is what one target's streamed answers looked like, unloaded:
// the median time to the first chunk and the median and largest gap
// between chunks, in microseconds.
type streamed struct {
	first, gap, maxGap float64
}

// probeStreams sends n streamed chat requests through each target in turn
// and times each chunk (one NDJSON line) as the client reads it.
func probeStreams(client *http.Client, targets []*proc, body []byte, n int) (map[string]streamed, error) {
	firsts := map[string][]float64{}
	gaps := map[string][]float64{}
	for i := range n {
		for j := range targets {
			p := targets[(i+j)%len(targets)]
			first, g, err := streamOnce(client, p.addr, body)
			if err != nil {
				return nil, err
			}
			firsts[p.name] = append(firsts[p.name], first)
			gaps[p.name] = append(gaps[p.name], g...)
		}
	}
	out := map[string]streamed{}
	for _, p := range targets {
		if len(firsts[p.name]) == 0 || len(gaps[p.name]) == 0 {
			return nil, fmt.Errorf("stream via %s: no chunks", p.addr)
		}
		out[p.name] = streamed{first: median(firsts[p.name]), gap: median(gaps[p.name]), maxGap: slices.Max(gaps[p.name])}
	}
	return out, nil
}

// streamOnce sends one streamed request and returns the microseconds to
// its first chunk and between the chunks after it.
func streamOnce(client *http.Client, addr string, body []byte) (first float64, gaps []float64, err error) {
	t0 := time.Now()
	resp, err := client.Post("http://"+addr+"/api/chat", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, nil, fmt.Errorf("stream via %s: %s %s", addr, resp.Status, b)
	}
	br := bufio.NewReader(resp.Body)
	last, seen := t0, false
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			now := time.Now()
			if !seen {
				first, seen = float64(now.Sub(t0).Microseconds()), true
			} else {
				gaps = append(gaps, float64(now.Sub(last).Microseconds()))
			}
			last = now
		}
		if err != nil {
			break
		}
	}
	if !seen {
		return 0, nil, fmt.Errorf("stream via %s: no chunks", addr)
	}
	return first, gaps, nil
}

// probeLatency sends n requests of body to path through each target in
// turn and returns each target's median time to the whole answer, in
// microseconds.
func probeLatency(client *http.Client, targets []*proc, path string, body []byte, n int) (map[string]float64, error) {
	took := map[string][]float64{}
	for i := range n {
		for j := range targets {
			p := targets[(i+j)%len(targets)]
			t0 := time.Now()
			resp, err := client.Post("http://"+p.addr+path, "application/json", bytes.NewReader(body))
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				return nil, err
			}
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("%s via %s: %s", path, p.addr, resp.Status)
			}
			took[p.name] = append(took[p.name], float64(time.Since(t0).Microseconds()))
		}
	}
	out := map[string]float64{}
	for _, p := range targets {
		out[p.name] = median(took[p.name])
	}
	return out, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
