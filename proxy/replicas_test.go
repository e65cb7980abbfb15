package proxy

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/redistest"
)

// replicaOptions are what a test replica does besides the default.
type replicaOptions struct {
	// summarize: mode summarize over a 4,096-token window, its summaries
	// written by the backend's own model, counted without calibration.
	summarize bool
	// calibrate: calibration on, learned with the other replicas
	// (sessions.ShareCalibration).
	calibrate bool
	// prefix is the Redis key prefix, the cluster's name; default
	// "replicas:".
	prefix string
	// inband answers in-band commands; turnWait is
	// snapshots.redis.turn_wait (default 100 ms).
	inband   bool
	turnWait time.Duration
}

// newReplica is one ctxproxy replica in front of backendURL, with a
// Redis store of its own (its own cache and writer) on the shared Redis
// at addr, as replicas behind a load balancer run.
func newReplica(t testing.TB, backendURL, addr string, o replicaOptions) (string, *snapshots.RedisStore) {
	t.Helper()
	log := testLogger(t)
	scfg := snapshots.Config{Store: snapshots.StoreRedis, Redis: snapshots.RedisConfig{Addr: addr, Prefix: cmp.Or(o.prefix, "replicas:"),
		TurnWait: cmp.Or(o.turnWait, 100*time.Millisecond)}}
	store, err := snapshots.NewRedisStore(context.Background(), scfg, log)
	if err != nil {
		t.Fatal(err)
	}
	writer := writerOf(t, store, scfg, log)
	var gcfg gpu.Config
	var tcfg budget.Config
	scfgStrategy := rewrite.Config{}
	var extra []rewrite.Strategy
	if o.summarize {
		off := false
		gcfg = gpu.Config{AutoSize: &off, TargetSize: 4096}
		// Counted alike on every replica: calibration learns from each
		// replica's own replies, and counts that differ put the cuts
		// elsewhere (see the closing comment of TestReplicasSummarizeOnce).
		if !o.calibrate {
			tcfg.Calibrate = &off
		}
		scfgStrategy.Mode = "summarize"
		summ := backend.NewSummarizer(backendURL, func() string { return KindOllama }, backend.SummarizerConfig{}, nil, log)
		comp := rewrite.NewCompactor(rewrite.SummarizeConfig{Wait: time.Second}, summ,
			rewrite.CompactorOptions{Store: sessions.SummaryStore{Store: store}, Log: log})
		t.Cleanup(func() { comp.Close() })
		extra = []rewrite.Strategy{comp.Summarize(), comp.Hybrid()}
	}
	probe := &fixedProbe{devices: []gpu.Device{{Vendor: "nvidia", Name: "Fake GPU", Total: 24 << 30, Used: 4 << 30, Free: 20 << 30}}}
	mon := gpu.NewMonitor(probe, gcfg, gpu.MonitorOptions{Logger: log})
	mon.Sample(context.Background())
	trimmer, err := rewrite.NewTrimmer(scfgStrategy, log, extra...)
	if err != nil {
		t.Fatal(err)
	}
	tokens := budget.NewRegistry(tcfg, log)
	if o.calibrate {
		// Stopped before the store closes (cleanups run last first),
		// which ends a read of the feed that is waiting.
		ctx, stop := context.WithCancel(context.Background())
		go sessions.ShareCalibration(ctx, tokens, snapshots.NewFeed(store, "calibration"), log)
		t.Cleanup(stop)
	}
	name := fmt.Sprintf("replica-%d", replicaNames.Add(1))
	srv, err := New(Config{Backend: backendURL, Status: admin.StatusInfo{Replica: name}, Planning: plan.Config{Inband: o.inband}}, Deps{Tokens: tokens, Trimmer: trimmer,
		Sizer: gpu.NewSizer(gcfg), Monitor: mon, Store: store, Writer: writer}, log)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts.URL, store
}

// replicaNames numbers the replicas the tests start.
var replicaNames atomic.Int64

// TestReplicasReadTheirWrites: three replicas on one Redis, a client in
// accumulate mode (it sends only its new turn) whose turns go round robin,
// each sent the moment the previous reply ends. Every forwarded request
// carries the whole conversation so far, in order: the replica that takes
// a turn waits for the previous turn, stored by another replica, before it
// builds on the history.
func TestReplicasReadTheirWrites(t *testing.T) {
	addr := redistest.Start(t)
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	var replicas []string
	var store *snapshots.RedisStore
	for range 3 {
		url, st := newReplica(t, be.URL, addr, replicaOptions{})
		replicas, store = append(replicas, url), st
	}
	const turns = 60
	h := map[string]string{"X-Session-ID": "round-robin", "X-Ctxproxy-Accumulate": "1"}
	missing := 0
	answered := map[string]bool{} // X-Ctxproxy-Replica
	start := time.Now()
	for i := range turns {
		if i == turns/2 {
			// A replica announces a turn and dies before it stores it:
			// the next turn waits for it once, up to turn_wait, and
			// says so; the turns after it do not wait.
			if _, err := store.BeginTurn(context.Background(), "round-robin"); err != nil {
				t.Fatal(err)
			}
		}
		body := fmt.Sprintf(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"question %d"}]}`, i)
		resp := post(t, replicas[i%len(replicas)]+"/api/chat", []byte(body), h)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: status %d", i, resp.StatusCode)
		}
		answered[resp.Header.Get("X-Ctxproxy-Replica")] = true
		warned := strings.Contains(strings.Join(resp.Header.Values("X-Ctxproxy-Warning"), " "), "turn_wait")
		if i == turns/2 && !warned {
			t.Errorf("turn %d, after a replica died mid-turn: no warning", i)
		} else if i != turns/2 && warned {
			t.Errorf("turn %d warned of a turn not stored", i)
		}
		got, _ := be.Last("/api/chat")
		var sent struct {
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(got.Body, &sent); err != nil {
			t.Fatal(err)
		}
		var questions []string
		for _, m := range sent.Messages {
			if m.Role == "user" {
				questions = append(questions, m.Content)
			}
		}
		want := make([]string, i+1)
		for k := range want {
			want[k] = fmt.Sprintf("question %d", k)
		}
		if strings.Join(questions, "|") != strings.Join(want, "|") {
			missing++
			t.Logf("turn %d (replica %d): forwarded %d of %d questions", i, i%len(replicas), len(questions), i+1)
		}
	}
	t.Logf("%d turns in %v (one of them waited turn_wait for a turn never stored)", turns, time.Since(start))
	if missing > 0 {
		t.Errorf("%d of %d forwarded requests lacked earlier turns", missing, turns)
	}
	if len(answered) != len(replicas) || answered[""] {
		t.Errorf("X-Ctxproxy-Replica named %v, want the %d replicas", answered, len(replicas))
	}
	// Each replica's metrics say which replica they come from.
	resp, err := http.Get(replicas[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	found := false
	for name := range answered {
		found = found || strings.Contains(string(metrics), `ctxproxy_replica_info{replica="`+name+`"} 1`)
	}
	if !found {
		t.Errorf("/metrics has no ctxproxy_replica_info naming one of %v", answered)
	}
}

// TestReplicasSummarizeOnce: a chat client (the whole history each turn)
// in mode summarize, its turns round robin over three replicas on one
// Redis, makes as many summarizer calls as the same chat on one replica:
// a replica that reaches a cut finds in Redis the summaries another one
// wrote. Every turn from the first summary on forwards the summaries.
//
// Counting is by estimate without calibration here. With calibration on,
// replicas learn together (TestReplicasCountAlike), but a reply's lesson
// reaches them about a millisecond after the reply ends: a turn sent at
// once may be counted without it, on one replica as on three, and cut one
// iteration elsewhere (20 or 21 calls, either way). Exact counts (the
// backend's own tokenizer) are the same on every replica.
func TestReplicasSummarizeOnce(t *testing.T) {
	addr := redistest.Start(t)
	run := func(n int, prefix string) (calls, first, without int) {
		var count atomic.Int64
		be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{ReplyFunc: func(body []byte) string {
			if strings.Contains(string(body), "You condense one exchange") {
				return fmt.Sprintf("Summary %d: the user asked about a topic and the assistant explained it.", count.Add(1))
			}
			return "Here is a detailed answer about that topic, with a few more words to take some room."
		}})
		var urls []string
		for range n {
			url, _ := newReplica(t, be.URL, addr, replicaOptions{summarize: true, prefix: prefix + ":"})
			urls = append(urls, url)
		}
		msgs := []map[string]any{{"role": "system", "content": "You are a patient tutor."}}
		for i := range 120 {
			msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: tell me about topic %d in some detail, please, with examples.", i, i)})
			body, _ := json.Marshal(map[string]any{"model": "llama3.1:8b", "stream": false, "messages": msgs})
			resp := post(t, urls[i%n]+"/api/chat", body, map[string]string{"X-Session-ID": prefix + "-chat"})
			var v struct {
				Message struct{ Content string } `json:"message"`
			}
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("turn %d: status %d", i, resp.StatusCode)
			}
			var chat []byte
			for _, r := range be.Requests() {
				if strings.Contains(string(r.Body), "You are a patient tutor.") {
					chat = r.Body
				}
			}
			switch summary := strings.Contains(string(chat), "<conversation_summary>"); {
			case summary && first == 0:
				first = i + 1
			case !summary && first > 0:
				without++
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": v.Message.Content})
		}
		return int(count.Load()), first, without
	}
	one, firstOne, withoutOne := run(1, "one")
	three, firstThree, withoutThree := run(3, "three")
	t.Logf("summarizer calls: %d on one replica, %d on three; first summary at turn %d and %d", one, three, firstOne, firstThree)
	if one == 0 || three != one {
		t.Errorf("%d summarizer calls on three replicas, %d on one", three, one)
	}
	if withoutOne+withoutThree > 0 {
		t.Errorf("turns after the first summary without one: %d on one replica, %d on three", withoutOne, withoutThree)
	}
}

// TestReplicasStoreBeforeLastByte: with replicas sharing Redis, a turn
// that later turns build on is in Redis before its reply's last byte
// leaves, so a client that has the whole reply can lose its turn to no
// crash. Read straight from Redis (another store, its own cache) the
// moment each reply ends, on every shape of reply.
func TestReplicasStoreBeforeLastByte(t *testing.T) {
	addr := redistest.Start(t)
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	url, _ := newReplica(t, be.URL, addr, replicaOptions{})
	reader, err := snapshots.NewRedisStore(context.Background(), snapshots.Config{Store: snapshots.StoreRedis,
		Redis: snapshots.RedisConfig{Addr: addr, Prefix: "replicas:"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	cases := []struct{ name, path, body string }{
		{"ollama stream", "/api/chat", `{"model":"llama3.1:8b","messages":[{"role":"user","content":"%s"}]}`},
		{"ollama whole", "/api/chat", `{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"%s"}]}`},
		{"openai stream", "/v1/chat/completions", `{"model":"llama3.1:8b","stream":true,"messages":[{"role":"user","content":"%s"}]}`},
		{"openai whole", "/v1/chat/completions", `{"model":"llama3.1:8b","messages":[{"role":"user","content":"%s"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			session := strings.ReplaceAll(c.name, " ", "-")
			h := map[string]string{"X-Session-ID": session, "X-Ctxproxy-Accumulate": "1"}
			for i := range 20 {
				q := fmt.Sprintf("question %d", i)
				resp := post(t, url+c.path, fmt.Appendf(nil, c.body, q), h)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("turn %d: status %d: %s", i, resp.StatusCode, body)
				}
				sess, err := reader.Get(context.Background(), session)
				if err != nil {
					t.Fatalf("turn %d: the session is not in Redis when its reply has ended: %v", i, err)
				}
				n := len(sess.Messages)
				if n != 2*(i+1) || sess.Messages[n-2].Content != q || sess.Messages[n-1].Role != "assistant" {
					t.Fatalf("turn %d: Redis holds %d messages when the reply has ended, want %d ending with %q and the reply",
						i, n, 2*(i+1), q)
				}
			}
		})
	}
}

// BenchmarkAccumulateTurnRedis is one accumulate-mode turn through a
// replica on Redis, from the request to the reply's last byte: the cost
// of storing the turn before that byte leaves is in it.
//
//	go test -run '^$' -bench AccumulateTurnRedis -benchtime 2000x ./proxy/
func BenchmarkAccumulateTurnRedis(b *testing.B) {
	addr := redistest.Start(b)
	be := fakebackend.New(b, fakebackend.Ollama, fakebackend.Options{})
	url, _ := newReplica(b, be.URL, addr, replicaOptions{})
	client := &http.Client{}
	for i := 0; b.Loop(); i++ {
		// A new session every 50 turns keeps the history, and the fake's
		// work, about the same size throughout.
		body := fmt.Sprintf(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"question %d"}]}`, i)
		req, _ := http.NewRequest("POST", url+"/api/chat", strings.NewReader(body))
		req.Header.Set("X-Session-ID", fmt.Sprintf("bench-%d", i/50))
		req.Header.Set("X-Ctxproxy-Accumulate", "1")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestReplicasCountAlike: three replicas calibrating their counts from
// the replies each serves, a chat's turns round robin over them. They
// learn together (one feed in Redis, applied in one order by each), so
// the same request is counted alike on every replica; each on its own
// would have learned from a third of the replies.
func TestReplicasCountAlike(t *testing.T) {
	addr := redistest.Start(t)
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	var replicas []string
	for range 3 {
		url, _ := newReplica(t, be.URL, addr, replicaOptions{calibrate: true})
		replicas = append(replicas, url)
	}
	var msgs []map[string]string
	for i := range 30 {
		// Prose and code in turn, so that what each replica learns
		// from its own third of the replies differs.
		content := strings.Repeat(fmt.Sprintf("Tell me about topic %d in some detail. ", i), 1+i%7)
		if i%2 == 1 {
			content = strings.Repeat(fmt.Sprintf("func f%d(x []int) int { return x[%d] * 0x%x } ", i, i, i*97), 1+i%5)
		}
		msgs = append(msgs, map[string]string{"role": "user", "content": content})
		body, _ := json.Marshal(map[string]any{"model": "llama3.1:8b", "stream": false, "messages": msgs})
		resp := post(t, replicas[i%len(replicas)]+"/api/chat", body, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: status %d", i, resp.StatusCode)
		}
		msgs = append(msgs, map[string]string{"role": "assistant", "content": "Here is an answer about that topic, with a few words more."})
	}
	probe, _ := json.Marshal(map[string]any{"model": "llama3.1:8b", "messages": msgs})
	counts := make([]int, len(replicas))
	deadline := time.Now().Add(5 * time.Second)
	for {
		for i, url := range replicas {
			resp := post(t, url+"/ctxproxy/tokenize", probe, nil)
			var v adminapi.TokenizeResponse
			err := json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil || v.Exact {
				t.Fatalf("tokenize: %v (exact %v): the probe must be an estimate", err, v.Exact)
			}
			counts[i] = v.Count
		}
		if counts[0] == counts[1] && counts[1] == counts[2] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the same conversation counted %v on three replicas", counts)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the same conversation counted %d on every replica", counts[0])
}

// TestReplicasCommandsAwaitTurns: a "/clear" typed on one replica, and an
// admin read, come after a turn of the session that another replica has
// begun and not stored yet: the clear waits for it, and clears it too.
func TestReplicasCommandsAwaitTurns(t *testing.T) {
	addr := redistest.Start(t)
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	url, store := newReplica(t, be.URL, addr, replicaOptions{inband: true, turnWait: 10 * time.Second})
	ctx := context.Background()
	h := map[string]string{"X-Session-ID": "commands"}
	chatTurn := func(content string) {
		t.Helper()
		body := fmt.Sprintf(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":%q}]}`, content)
		resp := post(t, url+"/api/chat", []byte(body), h)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%q: status %d", content, resp.StatusCode)
		}
	}
	// The other replica's turn, stored a moment after the command came.
	late := func(content string) {
		seq, err := store.BeginTurn(ctx, "commands")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			err := store.Update(ctx, "commands", func(s *snapshots.Session) error {
				s.AppendTurn([]snapshots.Message{{Role: "user", Content: content}}, &snapshots.Message{Role: "assistant", Content: "ok"}, time.Now())
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			store.EndTurn(ctx, "commands", seq)
		}()
	}

	chatTurn("first question")
	late("a question answered elsewhere")
	resp, err := http.Get(url + "/ctxproxy/sessions/commands/messages")
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Messages []struct{ Content string } }
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if n := len(v.Messages); n != 4 || v.Messages[2].Content != "a question answered elsewhere" {
		t.Fatalf("the admin API read %d messages, want 4 ending with the other replica's turn", n)
	}

	late("another question answered elsewhere")
	chatTurn("/clear")
	sess, err := store.Get(ctx, "commands")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(sess.Messages); n != 0 {
		t.Errorf("after /clear the session holds %d messages (the other replica's turn landed after the clear)", n)
	}
}
