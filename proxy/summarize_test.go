package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// TestSummarize200Turns replays a 200-turn conversation through the proxy
// in summarize mode, the way a chat client does (the whole history every
// turn), against a fake Ollama that also writes the summaries. The
// summarizer is called no more often than iterations are folded, no request
// after the first waits for a summary, and the summaries reach the model
// in the system prompt.
func TestSummarize200Turns(t *testing.T) {
	var summaryCalls atomic.Int64
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{ReplyFunc: func(body []byte) string {
		if strings.Contains(string(body), "You condense one exchange") {
			n := summaryCalls.Add(1)
			return fmt.Sprintf("Summary %d: the user asked about topic details and the assistant explained them.", n)
		}
		return "Here is a detailed answer about that topic, with a few more words to take some room."
	}})
	off := false
	sys := newSystem(t, be.URL, setup{
		strategy:  rewrite.Config{Mode: "summarize"},
		summarize: &rewrite.SummarizeConfig{Wait: time.Second},
		gpu:       gpu.Config{AutoSize: &off, TargetSize: 4096},
	})
	msgs := []map[string]any{{"role": "system", "content": "You are a patient tutor."}}
	summarized, inPrompt, lastFolded, steps := 0, 0, 0, 0
	for turn := 0; turn < 200; turn++ {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: tell me about topic %d in detail please.", turn, turn)})
		body, _ := json.Marshal(map[string]any{"model": "llama3.1:8b", "stream": false, "messages": msgs})
		resp := post(t, sys.url+"/api/chat", body, map[string]string{"X-Session-ID": "long-chat"})
		var v struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		}
		json.NewDecoder(resp.Body).Decode(&v)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: status %d", turn, resp.StatusCode)
		}
		if n := header(resp, "X-Ctxproxy-Summarized"); n > 0 {
			summarized++
			if n/2 != lastFolded {
				steps++
			}
			lastFolded = n / 2 // a folded iteration here is a question and its answer
			got, _ := be.Last("/api/chat")
			// The last /api/chat may be a background summary call: find
			// the forwarded chat among the recent requests.
			for _, r := range be.Requests() {
				if strings.Contains(string(r.Body), "You are a patient tutor.") && strings.Contains(string(r.Body), "<conversation_summary>") {
					got = r
				}
			}
			if strings.Contains(string(got.Body), "<conversation_summary>") {
				inPrompt++
			}
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": v.Message.Content})
		// The user reads the answer before typing the next question: the
		// background summaries get their time, as in a real chat.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sys.compactor.Idle(ctx)
		cancel()
	}
	st := sys.compactor.Stats()
	t.Logf("200 turns: %d requests summarized; %d iterations folded into the last one; summarizer calls %d (the backend saw %d); requests that waited %d, trimmed instead %d",
		summarized, lastFolded, st.Calls, summaryCalls.Load(), st.Waited, st.Fallbacks)
	if summarized < 100 {
		t.Errorf("only %d of 200 requests were summarized", summarized)
	}
	if inPrompt == 0 {
		t.Errorf("no summary reached the system prompt")
	}
	// Each iteration is summarized once, ever, never the whole prefix
	// again, at the step that folds it (the summarizer is the chat's own
	// model): a few iterations a call, only steps waiting for them, and
	// none trimmed for want of a summary.
	if calls := int(summaryCalls.Load()); calls > lastFolded {
		t.Errorf("summarizer called %d times for %d folded iterations", calls, lastFolded)
	}
	if int(st.Waited) > steps || st.Fallbacks != 0 {
		t.Errorf("%d requests waited for a summary in %d steps, %d trimmed instead", st.Waited, steps, st.Fallbacks)
	}
}
