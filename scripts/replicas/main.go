// Command replicas runs three ctxproxy replicas of the built binary on one
// real redis-server, in front of the fake Ollama, and replays what
// replicas must hold (docs/scaling.md): a client in accumulate mode whose
// turns go round robin, each sent the moment the reply ends; the same with
// a replica killed by SIGKILL in the middle; concurrent turns on one
// session; a chat in mode summarize, against the same chat on one
// replica; and a chat counted by calibrated estimates, counted alike by
// every replica. It exits 1 when a check fails.
//
//	go build -o /tmp/ctxproxy ./cmd/ctxproxy
//	go run ./scripts/replicas -ctxproxy /tmp/ctxproxy
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/loopback"
)

func main() {
	bin := flag.String("ctxproxy", "ctxproxy", "the ctxproxy binary")
	turns := flag.Int("turns", 60, "turns of each replay")
	flag.Parse()
	r := &run{bin: *bin}
	defer r.stopAll()
	if err := r.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		r.stopAll()
		os.Exit(1)
	}
	checks := []struct {
		name string
		fn   func(int) error
	}{
		{"back-to-back turns round robin: every turn forwards the whole history", r.backToBack},
		{"a replica killed by SIGKILL mid-run: no acknowledged turn lost", r.killed},
		{"concurrent turns on one session: every turn stored, paired", r.concurrent},
		{"summaries: as many summarizer calls as on one replica", r.summaries},
		{"calibrated counts: one conversation counted alike on every replica", r.counts},
	}
	failed := 0
	for _, c := range checks {
		start := time.Now()
		err := c.fn(*turns)
		status := "PASS"
		if err != nil {
			status, failed = "FAIL", failed+1
		}
		fmt.Printf("%s  %-75s %6s", status, c.name, time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			fmt.Printf("  %v", err)
		}
		fmt.Println()
	}
	if failed > 0 {
		r.stopAll()
		fmt.Printf("%d of %d checks failed\n", failed, len(checks))
		os.Exit(1)
	}
}

// run is the redis-server, the fake backend and the replicas.
type run struct {
	bin, redis, dir string
	fake            *fakebackend.Fake
	summaryCalls    atomic.Int64
	procs           []*exec.Cmd
	cleanups        cleanups
}

func (r *run) setup() error {
	dir, err := os.MkdirTemp("", "replicas-")
	if err != nil {
		return err
	}
	r.dir = dir
	port, err := loopback.FreePort()
	if err != nil {
		return err
	}
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server is not installed: %w", err)
	}
	r.redis = fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(redisBin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := r.launch(cmd); err != nil {
		return err
	}
	r.fake = fakebackend.New(&r.cleanups, fakebackend.Ollama, fakebackend.Options{ReplyFunc: func(body []byte) string {
		if bytes.Contains(body, []byte("You condense one exchange")) {
			return fmt.Sprintf("Summary %d: the user asked about a topic and the assistant explained it.", r.summaryCalls.Add(1))
		}
		return "Here is an answer about that topic, with a few words more."
	}})
	for range 100 {
		if c, err := net.Dial("tcp", r.redis); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server did not answer on %s", r.redis)
}

func (r *run) launch(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	r.procs = append(r.procs, cmd)
	return nil
}

func (r *run) stopAll() {
	for _, c := range r.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	}
	r.procs = nil
	for _, f := range r.cleanups {
		f()
	}
	r.cleanups = nil
	if r.dir != "" {
		os.RemoveAll(r.dir)
		r.dir = ""
	}
}

// replica is a running ctxproxy.
type replica struct {
	url string
	cmd *exec.Cmd
}

// replicas starts n replicas on the Redis store under prefix, with the
// YAML of conf (the strategy, and whether counts are calibrated).
func (r *run) replicas(n int, prefix, conf string) ([]*replica, error) {
	var out []*replica
	for i := range n {
		dir := filepath.Join(r.dir, fmt.Sprintf("%s-%d", prefix, i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		yaml := fmt.Sprintf("snapshots: {store: redis, redis: {addr: %q, prefix: %q}}\n"+
			"context: {auto_size: false, target_size: 4096}\n%s\n", r.redis, prefix+":", conf)
		conf := filepath.Join(dir, "ctxproxy.yaml")
		if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
			return nil, err
		}
		port, err := loopback.FreePort()
		if err != nil {
			return nil, err
		}
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		logf, err := os.Create(filepath.Join(dir, "ctxproxy.log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(r.bin, "serve", "--config", conf, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--backend", r.fake.URL, "--log-level", "warn")
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
		if err := r.launch(cmd); err != nil {
			return nil, err
		}
		ready := false
		for range 200 {
			if resp, err := http.Get(url + "/ctxproxy/readyz"); err == nil {
				resp.Body.Close()
				if ready = resp.StatusCode == http.StatusOK; ready {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !ready {
			return nil, fmt.Errorf("replica %d did not become ready (see %s)", i, logf.Name())
		}
		out = append(out, &replica{url: url, cmd: cmd})
	}
	return out, nil
}

// chat sends one turn; accumulate sends only the new user message.
func chat(url, session string, accumulate bool, msgs []map[string]string) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": "llama3.1:8b", "stream": false, "messages": msgs})
	req, err := http.NewRequest(http.MethodPost, url+"/api/chat", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("X-Session-ID", session)
	if accumulate {
		req.Header.Set("X-Ctxproxy-Accumulate", "1")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, data)
	}
	var v struct {
		Message struct{ Content string } `json:"message"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return "", err
	}
	return v.Message.Content, nil
}

// forwardedQuestions returns the user messages of the last chat request
// the backend got for the session whose first question is marker.
func (r *run) forwardedQuestions(marker string) []string {
	reqs := r.fake.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		body := reqs[i].Body
		if reqs[i].Path != "/api/chat" || !bytes.Contains(body, []byte(marker)) || bytes.Contains(body, []byte("You condense")) {
			continue
		}
		var sent struct {
			Messages []struct{ Role, Content string }
		}
		_ = json.Unmarshal(body, &sent)
		var qs []string
		for _, m := range sent.Messages {
			if m.Role == "user" {
				qs = append(qs, m.Content)
			}
		}
		return qs
	}
	return nil
}

// accumulate replays turns back to back round robin over reps, in
// accumulate mode; with kill, replica 1 answers the turn halfway and is
// killed by SIGKILL the moment its reply has arrived, and a turn that
// fails (not acknowledged) is sent again to the next replica. It returns
// the number of forwarded requests that lacked earlier turns or had them
// out of order.
func (r *run) accumulate(reps []*replica, session string, turns int, kill bool) (int, error) {
	var acked []string
	bad, next := 0, 0
	for i := range turns {
		killNow := kill && i == turns/2
		if killNow {
			next = 1
		}
		q := fmt.Sprintf("%s question %d", session, i)
		var err error
		for try := range len(reps) {
			rep := reps[(next+try)%len(reps)]
			if _, err = chat(rep.url, session, true, []map[string]string{{"role": "user", "content": q}}); err == nil {
				next = (next + try + 1) % len(reps)
				break
			}
		}
		if err != nil {
			return bad, fmt.Errorf("turn %d: no replica answered: %w", i, err)
		}
		if killNow {
			_ = syscall.Kill(-reps[1].cmd.Process.Pid, syscall.SIGKILL)
		}
		acked = append(acked, q)
		if got := r.forwardedQuestions(session + " question 0"); strings.Join(got, "|") != strings.Join(acked, "|") {
			bad++
		}
	}
	return bad, nil
}

func (r *run) backToBack(turns int) error {
	reps, err := r.replicas(3, "b2b", "strategy: {mode: smart}\ntokens: {calibrate: false}")
	if err != nil {
		return err
	}
	bad, err := r.accumulate(reps, "b2b", turns, false)
	if err == nil && bad > 0 {
		err = fmt.Errorf("%d of %d forwarded requests lacked earlier turns or had them out of order", bad, turns)
	}
	return err
}

func (r *run) killed(turns int) error {
	reps, err := r.replicas(3, "kill", "strategy: {mode: smart}\ntokens: {calibrate: false}")
	if err != nil {
		return err
	}
	bad, err := r.accumulate(reps, "kill", turns, true)
	if err != nil {
		return err
	}
	// The replica is killed the moment the client has its reply: the
	// turn it answered must already be in Redis, since it is stored
	// before the reply's last byte leaves.
	if bad > 0 {
		return fmt.Errorf("%d of %d forwarded requests lacked acknowledged turns", bad, turns)
	}
	return nil
}

func (r *run) concurrent(turns int) error {
	reps, err := r.replicas(3, "conc", "strategy: {mode: none}\ntokens: {calibrate: false}")
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, turns)
	for i := range turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := fmt.Sprintf("concurrent question %d", i)
			if _, err := chat(reps[i%len(reps)].url, "conc", true, []map[string]string{{"role": "user", "content": q}}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the writers store the last turns
	resp, err := http.Get(reps[0].url + "/ctxproxy/sessions/conc/messages")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var v struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return err
	}
	users, paired := 0, true
	for k, m := range v.Messages {
		if m.Role == "user" {
			users++
			paired = paired && k+1 < len(v.Messages) && v.Messages[k+1].Role == "assistant"
		}
	}
	if len(v.Messages) != 2*turns || users != turns || !paired {
		return fmt.Errorf("stored %d messages, %d questions, paired %v; want %d", len(v.Messages), users, paired, 2*turns)
	}
	return nil
}

// summarize replays a chat UI's turns (the whole history each time) over
// reps in mode summarize, and returns the summarizer calls and the turns
// after the first summary that forwarded none.
func (r *run) summarize(reps []*replica, session string, turns int) (int64, int, error) {
	before := r.summaryCalls.Load()
	msgs := []map[string]string{{"role": "system", "content": "You are a patient tutor " + session + "."}}
	first, without := 0, 0
	for i := range turns {
		msgs = append(msgs, map[string]string{"role": "user",
			"content": fmt.Sprintf("Question %d: tell me about topic %d in some detail, please, with examples.", i, i)})
		reply, err := chat(reps[i%len(reps)].url, session, false, msgs)
		if err != nil {
			return 0, 0, fmt.Errorf("turn %d: %w", i, err)
		}
		var body []byte
		reqs := r.fake.Requests()
		for k := len(reqs) - 1; k >= 0; k-- {
			if bytes.Contains(reqs[k].Body, []byte("You are a patient tutor "+session+".")) {
				body = reqs[k].Body
				break
			}
		}
		switch summary := bytes.Contains(body, []byte("<conversation_summary>")); {
		case summary && first == 0:
			first = i + 1
		case !summary && first > 0:
			without++
		}
		msgs = append(msgs, map[string]string{"role": "assistant", "content": reply})
	}
	if first == 0 {
		return 0, 0, fmt.Errorf("no turn forwarded a summary")
	}
	return r.summaryCalls.Load() - before, without, nil
}

func (r *run) summaries(turns int) error {
	one, err := r.replicas(1, "sum1", "strategy: {mode: summarize}\ntokens: {calibrate: false}")
	if err != nil {
		return err
	}
	three, err := r.replicas(3, "sum3", "strategy: {mode: summarize}\ntokens: {calibrate: false}")
	if err != nil {
		return err
	}
	n := 2 * turns
	calls1, without1, err := r.summarize(one, "one", n)
	if err != nil {
		return err
	}
	calls3, without3, err := r.summarize(three, "three", n)
	if err != nil {
		return err
	}
	if calls3 != calls1 || without1+without3 > 0 {
		return fmt.Errorf("summarizer calls: %d on three replicas, %d on one; turns after the first summary without one: %d and %d",
			calls3, calls1, without3, without1)
	}
	fmt.Printf("      %d summarizer calls in %d turns, on one replica and on three\n", calls1, n)
	return nil
}

// cleanups collects what fakebackend.New asks to run at the end.
type cleanups []func()

func (c *cleanups) Cleanup(f func()) { *c = append(*c, f) }

// counts replays a chat UI's turns round robin over three replicas that
// calibrate their counts, prose and code in turn, then asks each replica
// to count the whole conversation: the counts must agree, within a few
// seconds of the last reply.
func (r *run) counts(turns int) error {
	turns = min(turns, 30) // within the 4,096-token window, uncut
	reps, err := r.replicas(3, "count", "strategy: {mode: none}")
	if err != nil {
		return err
	}
	var msgs []map[string]string
	for i := range turns {
		content := strings.Repeat(fmt.Sprintf("Tell me about topic %d in some detail. ", i), 1+i%7)
		if i%2 == 1 {
			content = strings.Repeat(fmt.Sprintf("func f%d(x []int) int { return x[%d] * 0x%x } ", i, i, i*97), 1+i%5)
		}
		msgs = append(msgs, map[string]string{"role": "user", "content": content})
		reply, err := chat(reps[i%len(reps)].url, "count", false, msgs)
		if err != nil {
			return fmt.Errorf("turn %d: %w", i, err)
		}
		msgs = append(msgs, map[string]string{"role": "assistant", "content": reply})
	}
	probe, _ := json.Marshal(map[string]any{"model": "llama3.1:8b", "messages": msgs})
	var counts []int
	for range 100 {
		counts = counts[:0]
		for _, rep := range reps {
			resp, err := http.Post(rep.url+"/ctxproxy/tokenize", "application/json", bytes.NewReader(probe))
			if err != nil {
				return err
			}
			var v struct{ Count int }
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil {
				return err
			}
			counts = append(counts, v.Count)
		}
		if counts[0] == counts[1] && counts[1] == counts[2] {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the same conversation counted %v on three replicas", counts)
}
