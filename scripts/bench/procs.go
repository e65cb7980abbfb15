package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ: /proc/PID/stat counts CPU time in
// ticks of 1/100 s on every Linux the harness runs on.
const clockTick = 10 * time.Millisecond

// proc is one server the harness started.
type proc struct {
	name string
	addr string
	cmd  *exec.Cmd
}

func start(name, addr, logFile string, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{name: name, addr: addr, cmd: cmd}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s did not listen on %s (see %s)", name, addr, logFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// cpu is the process's user + system CPU time so far (rusage, as
// /proc/PID/stat reports it).
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the first, utime the 12th, stime the 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * clockTick
}

// mem returns the process's resident memory now and at its peak, in MiB.
func (p *proc) mem() (rss, peak float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmRSS":
			rss = kb / 1024
		case "VmHWM":
			peak = kb / 1024
		}
	}
	return rss, peak
}

// load is one wrk run: what wrk measured and the CPU the proxy spent.
type load struct {
	Requests   int64   `json:"requests"`
	DurationUS int64   `json:"duration_us"`
	Errors     int64   `json:"errors"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
	cpu        time.Duration
}

func (l load) rps() float64 { return float64(l.Requests) / (float64(l.DurationUS) / 1e6) }

// cpuPerReq is the proxy's CPU per request in microseconds.
func (l load) cpuPerReq() float64 {
	if l.Requests == 0 {
		return 0
	}
	return float64(l.cpu.Microseconds()) / float64(l.Requests)
}

// workload is a request wrk repeats.
type workload struct {
	name   string
	method string
	path   string
	body   []byte
}

// script writes wrk's Lua script for w: the request, and a done hook
// that prints the summary as one JSON line.
func (w workload) script(dir string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "wrk.method = %q\n", w.method)
	if w.body != nil {
		bodyFile := filepath.Join(dir, w.name+".json")
		if err := os.WriteFile(bodyFile, w.body, 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "local f = io.open(%q, \"rb\")\nwrk.body = f:read(\"*a\")\nf:close()\n", bodyFile)
		b.WriteString("wrk.headers[\"Content-Type\"] = \"application/json\"\n")
	}
	b.WriteString(`done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('\nBENCH {"requests":%d,"duration_us":%d,"errors":%d,"p50":%d,"p99":%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
`)
	path := filepath.Join(dir, w.name+".lua")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// drive runs wrk against p with script for d and measures p's CPU.
func drive(p *proc, script, path string, threads, conns int, d time.Duration) (load, error) {
	url := "http://" + p.addr + path
	before := p.cpu()
	out, err := exec.Command("wrk", "-t"+strconv.Itoa(threads), "-c"+strconv.Itoa(conns),
		"-d"+strconv.Itoa(int(d.Seconds()))+"s", "-s", script, url).CombinedOutput()
	after := p.cpu()
	if err != nil {
		return load{}, fmt.Errorf("wrk %s: %v\n%s", url, err, out)
	}
	_, js, ok := bytes.Cut(out, []byte("BENCH "))
	if !ok {
		return load{}, fmt.Errorf("wrk %s: no summary\n%s", url, out)
	}
	var l load
	if err := json.Unmarshal(bytes.TrimSpace(js), &l); err != nil {
		return load{}, fmt.Errorf("wrk %s: %v\n%s", url, err, out)
	}
	if l.Errors > 0 || l.Requests == 0 {
		return load{}, fmt.Errorf("wrk %s: %d errors in %d requests\n%s", url, l.Errors, l.Requests, out)
	}
	l.cpu = after - before
	return l, nil
}
