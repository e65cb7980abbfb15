package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// historyTurn posts an Ollama chat request (not streamed) and returns
// the answer's text and the response's headers.
func historyTurn(t *testing.T, e *adminEnv, header map[string]string, msgs []map[string]string) (string, http.Header) {
	t.Helper()
	return historyTurnAt(t, e, "/api/chat", header, msgs)
}

// historyTurnAt is historyTurn on an Ollama or OpenAI chat route.
func historyTurnAt(t *testing.T, e *adminEnv, path string, header map[string]string, msgs []map[string]string) (string, http.Header) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": tinyModel, "stream": false, "messages": msgs})
	req, _ := http.NewRequest(http.MethodPost, e.ts.URL+path, bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d %s", resp.StatusCode, data)
	}
	var v struct {
		Message struct{ Content string } `json:"message"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	if err := e.writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(v.Choices) > 0 {
		return v.Choices[0].Message.Content, resp.Header
	}
	return v.Message.Content, resp.Header
}

// lastForwarded is the conversation the backend got last, as role:content.
func lastForwarded(t *testing.T, e *adminEnv) []string {
	t.Helper()
	var last []byte
	for _, r := range e.be.Requests() {
		if strings.Contains(r.Path, "chat") {
			last = r.Body
		}
	}
	var v struct {
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(last, &v); err != nil {
		t.Fatalf("%v: %s", err, last)
	}
	out := make([]string, len(v.Messages))
	for i, m := range v.Messages {
		out[i] = m.Role + ":" + m.Content
	}
	return out
}

// TestInbandRestoreFullHistory: a client that resends its whole history
// restores a snapshot in-band; its next turns, which still carry the
// history it had before the restore, forward the restored conversation
// and what the client added after the restore. An edit before the restore
// (a diverged history) is forwarded as sent, and ends the restore.
func TestInbandRestoreFullHistory(t *testing.T) {
	e := newAdminEnv(t, "", func(c *Config, _ *Deps) { c.Planning.Inband = true })
	for _, path := range []string{"/api/chat", "/v1/chat/completions"} {
		t.Run(path, func(t *testing.T) { restoreFullHistory(t, e, path) })
	}
}

func restoreFullHistory(t *testing.T, e *adminEnv, path string) {
	id := "full" + strings.ReplaceAll(path, "/", "-")
	hdr := map[string]string{"X-Session-ID": id}
	var hist []map[string]string
	say := func(text string) string {
		hist = append(hist, map[string]string{"role": "user", "content": text})
		answer, _ := historyTurnAt(t, e, path, hdr, hist)
		hist = append(hist, map[string]string{"role": "assistant", "content": answer})
		return answer
	}
	const reply = "assistant:Hello from the model."
	hist = append(hist, map[string]string{"role": "system", "content": "Be brief."})
	say("q1")
	say("q2")
	saved := say("/context snapshot")
	snap := regexp.MustCompile(`\d{8}-\d{6}-[0-9a-f]{6}`).FindString(saved)
	if snap == "" {
		t.Fatalf("no snapshot id in %q", saved)
	}
	say("q3")
	say("q4")
	if got := say("/context restore " + snap); !strings.Contains(got, snap) {
		t.Fatalf("restore answered %q", got)
	}
	restored := []string{"system:Be brief.", "user:q1", reply, "user:q2", reply}

	say("q5")
	want := append(slices.Clone(restored), "user:q5")
	if got := lastForwarded(t, e); !slices.Equal(got, want) {
		t.Fatalf("first turn after the restore forwarded\n%q\nwant\n%q", got, want)
	}
	say("/context")
	say("q6")
	want = append(want, reply, "user:q6")
	if got := lastForwarded(t, e); !slices.Equal(got, want) {
		t.Fatalf("second turn after the restore forwarded\n%q\nwant\n%q", got, want)
	}
	sess, err := e.srv.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, m := range sess.Messages {
		stored = append(stored, m.Role+":"+m.Content)
	}
	if want := append(slices.Clone(want), reply); !slices.Equal(stored, want) {
		t.Errorf("stored\n%q\nwant\n%q", stored, want)
	}

	// An edit before the restore: the history diverged, and is forwarded
	// as sent (less ctxproxy's own exchanges).
	edited := slices.Clone(hist)
	edited[1] = map[string]string{"role": "user", "content": "q1, edited"}
	edited = append(edited, map[string]string{"role": "user", "content": "q7"})
	historyTurnAt(t, e, path, hdr, edited)
	got := lastForwarded(t, e)
	if !slices.Contains(got, "user:q1, edited") || !slices.Contains(got, "user:q3") || got[len(got)-1] != "user:q7" {
		t.Errorf("a diverged history was not forwarded as sent: %q", got)
	}
	sess, err = e.srv.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sess.Metadata[sessions.RestoreKey]; ok {
		t.Errorf("the restore mark outlived the divergence: %v", sess.Metadata)
	}
	// The mark is gone: the original history no longer brings the
	// restore back.
	historyTurnAt(t, e, path, hdr, append(slices.Clone(hist), map[string]string{"role": "user", "content": "q8"}))
	if got := lastForwarded(t, e); !slices.Contains(got, "user:q3") {
		t.Errorf("the restore applied after it ended: %q", got)
	}
}

// TestPruneStoredHistory: an accumulated session pruned by importance. Messages of mixed importance added with `context add` and an
// accumulated turn take the session past its window; after that turn the
// stored history is pruned lowest importance first (system, important and
// newest messages stay), a snapshot holds the whole history, and the next
// turn is back under the window with no "approaching" warning.
func TestPruneStoredHistory(t *testing.T) {
	e := newAdminEnv(t, "")
	const id = "pruned"
	decisions, full := pastWindowSession(t, e, id)

	hdr := map[string]string{"X-Session-ID": id, "X-Ctxproxy-Accumulate": "1"}
	_, h := historyTurn(t, e, hdr, []map[string]string{{"role": "user", "content": "the newest question"}})
	if u, _ := strconv.ParseFloat(h.Get("X-Ctxproxy-Usage"), 64); u <= 100 {
		t.Fatalf("the session is at %.1f%%; the test wants it past its window", u)
	}
	checkPruned(t, e, id, decisions, full)
}

// TestPruneNotForUncutRequests: a turn that asked for no cut leaves its
// stored history whole.
func TestPruneNotForUncutRequests(t *testing.T) {
	e := newAdminEnv(t, "")
	_, full := pastWindowSession(t, e, "uncut")
	hdr := map[string]string{"X-Session-ID": "uncut", "X-Ctxproxy-Accumulate": "1", "X-Ctxproxy-Strategy": "none"}
	historyTurn(t, e, hdr, []map[string]string{{"role": "user", "content": "the newest question"}})
	sess, err := e.srv.store.Get(context.Background(), "uncut")
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Messages) != full {
		t.Errorf("stored %d messages, want all %d", len(sess.Messages), full)
	}
}

// pastWindowSession builds session id with `context add` messages of mixed
// importance past the tiny model's window. It
// returns the important messages and how many messages the session has
// after one more turn.
func pastWindowSession(t *testing.T, e *adminEnv, id string) (decisions []string, full int) {
	t.Helper()
	e.json(http.MethodPut, sessionPath(id), map[string]any{"model": tinyModel}, 200)
	msgs := []map[string]any{{"role": "system", "content": "Architecture context.", "importance": 1.0}}
	for i := range 44 {
		role := []string{"user", "assistant"}[i%2]
		imp := []float64{0.3, 0.5, 0.7}[i%3]
		content := fmt.Sprintf("detail %d %s", i, strings.Repeat("word ", 40))
		if i%7 == 0 {
			imp = 0.9
			content = fmt.Sprintf("decision %d %s", i, strings.Repeat("word ", 40))
			decisions = append(decisions, content)
		}
		msgs = append(msgs, map[string]any{"role": role, "content": content, "importance": imp})
	}
	e.json(http.MethodPost, sessionPath(id)+"/messages", map[string]any{"messages": msgs}, 200)
	return decisions, len(msgs) + 2
}

// checkPruned checks session id after the turn that took it past its
// window, and the turn after it.
func checkPruned(t *testing.T, e *adminEnv, id string, decisions []string, full int) {
	t.Helper()
	ctx := context.Background()
	sess, err := e.srv.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Messages) >= full {
		t.Fatalf("the stored history was not pruned: %d messages", len(sess.Messages))
	}
	contents := map[string]bool{}
	for _, m := range sess.Messages {
		contents[m.Content] = true
		if m.Importance != nil && *m.Importance == 0.3 {
			t.Errorf("a low-importance message stayed: %.20s", m.Content)
		}
	}
	for _, d := range append(decisions, "Architecture context.", "the newest question", "Hello from the model.") {
		if !contents[d] {
			t.Errorf("pruning lost %.20q", d)
		}
	}
	if sess.Stats.Usage >= 0.8 {
		t.Errorf("stored usage after the prune: %.2f", sess.Stats.Usage)
	}

	list, err := e.srv.store.ListSnapshots(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var snap *snapshots.Snapshot
	for _, info := range list {
		if info.Reason == snapshots.ReasonPrune {
			if snap, err = e.srv.store.LoadSnapshot(ctx, id, info.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if snap == nil || len(snap.Messages) != full {
		t.Fatalf("no prune snapshot of the whole history (%d messages): %+v", full, list)
	}

	hdr := map[string]string{"X-Session-ID": id, "X-Ctxproxy-Accumulate": "1"}
	_, h := historyTurn(t, e, hdr, []map[string]string{{"role": "user", "content": "and another"}})
	if u, _ := strconv.ParseFloat(h.Get("X-Ctxproxy-Usage"), 64); u >= 80 {
		t.Errorf("the next turn is at %.1f%%", u)
	}
	if w := h.Values("X-Ctxproxy-Warning"); len(w) > 0 {
		t.Errorf("the next turn still warns: %q", w)
	}
	if n := len(lastForwarded(t, e)); n != len(sess.Messages)+1 {
		t.Errorf("the next turn forwarded %d messages, want the pruned %d and the new one", n, len(sess.Messages))
	}
}

// TestRestoreMark: the mark survives a JSON round trip (the stores keep
// metadata as JSON), and sessions.KeepMark binds it, keeps a newer one, or ends it.
func TestRestoreMark(t *testing.T) {
	sess := &snapshots.Session{Metadata: map[string]any{"agent": "x"},
		Messages: []snapshots.Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}}
	sessions.MarkRestored(sess, "snap-1")
	data, err := json.Marshal(sess.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]any
	if err := json.Unmarshal(data, &md); err != nil {
		t.Fatal(err)
	}
	m := sessions.MarkOf(md)
	if m == nil || m.Snapshot != "snap-1" || m.Messages != 2 || m.Restored != sessions.StoredPrint(sess.Messages) || m.Prefix != "" {
		t.Fatalf("mark after a round trip: %+v", m)
	}
	sess.Metadata = md

	bound := *m
	bound.Prefix = "p"
	sessions.KeepMark(sess, &bound)
	if got := sessions.MarkOf(sess.Metadata); got == nil || *got != bound {
		t.Errorf("not bound: %+v", got)
	}
	if md["agent"] != "x" || sessions.MarkOf(md).Prefix != "" {
		t.Error("KeepMark changed the metadata map it was given")
	}
	other := bound
	other.Snapshot = "snap-0"
	sessions.KeepMark(sess, &other)
	if got := sessions.MarkOf(sess.Metadata); got == nil || got.Snapshot != "snap-1" {
		t.Errorf("a newer restore's mark was replaced: %+v", got)
	}
	sessions.KeepMark(sess, nil)
	if _, ok := sess.Metadata[sessions.RestoreKey]; ok || sess.Metadata["agent"] != "x" {
		t.Errorf("a turn that did not apply the restore left %v", sess.Metadata)
	}
}

// TestLongReplyStoredCut: a reply longer than max_body reaches the client
// whole; the session keeps what fits and says where it was cut, and the
// cut is counted.
func TestLongReplyStoredCut(t *testing.T) {
	reply := strings.Repeat("long answer ", 400) // 4,800 bytes
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: reply, Chunks: 40})
	sys := newSystem(t, be.URL, setup{cfg: Config{MaxBody: 2048}})
	resp := post(t, sys.url+"/api/chat", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"X-Session-ID": "long"})
	if got := readAll(t, resp.Body); strings.Count(got, "long answer") != 400 {
		t.Fatalf("the client got %d of 400 pieces of the reply", strings.Count(got, "long answer"))
	}
	sys.flush(t)
	sess, err := sys.store.Get(t.Context(), "long")
	if err != nil {
		t.Fatal(err)
	}
	last := sess.Messages[len(sess.Messages)-1]
	if last.Role != "assistant" || !strings.HasSuffix(last.Content, plan.ReplyCutMarker) || len(last.Content) > 2048+len(plan.ReplyCutMarker) {
		t.Errorf("stored reply: %s %d bytes, ends %q", last.Role, len(last.Content), last.Content[max(0, len(last.Content)-60):])
	}
	if n := testutil.ToFloat64(sys.srv.metrics.repliesCut); n != 1 {
		t.Errorf("ctxproxy_replies_cut_total = %v, want 1", n)
	}
}
