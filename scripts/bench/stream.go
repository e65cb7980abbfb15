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

// streamed is what one target's streamed answers looked like, unloaded:
// the median time to the first chunk and the median and largest gap
// between chunks, in microseconds.
type streamed struct {
	first, gap, maxGap float64
}

// probeStream sends n streamed chat requests one after another and times
// each chunk (one NDJSON line) as the client reads it. It is a stopwatch,
// not a load generator: one request at a time.
func probeStream(client *http.Client, addr string, body []byte, n int) (streamed, error) {
	var firsts, gaps []float64
	for range n {
		t0 := time.Now()
		resp, err := client.Post("http://"+addr+"/api/chat", "application/json", bytes.NewReader(body))
		if err != nil {
			return streamed{}, err
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return streamed{}, fmt.Errorf("stream via %s: %s %s", addr, resp.Status, b)
		}
		br := bufio.NewReader(resp.Body)
		last := t0
		for i := 0; ; i++ {
			line, err := br.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				now := time.Now()
				if i == 0 {
					firsts = append(firsts, float64(now.Sub(t0).Microseconds()))
				} else {
					gaps = append(gaps, float64(now.Sub(last).Microseconds()))
				}
				last = now
			}
			if err != nil {
				break
			}
		}
		resp.Body.Close()
	}
	if len(firsts) == 0 || len(gaps) == 0 {
		return streamed{}, fmt.Errorf("stream via %s: no chunks", addr)
	}
	return streamed{first: median(firsts), gap: median(gaps), maxGap: slices.Max(gaps)}, nil
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
