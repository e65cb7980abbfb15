package proxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"

	"net/http/httptest"
)

// BenchmarkChatWarm100K is a warm 100-message, 100 KB conversation resent
// through the whole pipeline (session, sizing, counting, recording), the
// harness's "big chat warm" in process.
func BenchmarkChatWarm100K(b *testing.B) { benchWarmChat(b, chatBody100K()) }

// benchWarmChat resends body, a conversation with nothing to cut, through
// the whole pipeline against a trivial backend.
func benchWarmChat(b *testing.B, body []byte) {
	sys := newSystem(b, trivialOllama(b), setup{})
	sys.srv.log = slog.New(slog.DiscardHandler)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	post := func() {
		resp, err := client.Post(sys.url+"/api/chat", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		post()
	}
}

// trivialOllama answers every chat with a fixed small reply without
// reading more than the body, so that profiles show ctxproxy's work.
func trivialOllama(b testing.TB) string {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"llama3.1:8b","message":{"role":"assistant","content":"ok"},"done":true,"prompt_eval_count":10,"eval_count":1}`)
	}))
	b.Cleanup(be.Close)
	return be.URL
}

func plannedExchange() (*exchange, plan.Plan) {
	p := plan.Plan{Model: "llama3.1:8b", Counter: budget.NewMessageCounter(tokenizer.Approx{}, 0), Limit: 8192, NumCtx: 8192,
		Before: budget.Estimate{Tokens: 9000}, After: budget.Estimate{Tokens: 5000},
		Result: rewrite.Result{Dropped: 10, Notice: "Context trimmed."},
		Split:  adminapi.Budget{Total: 8192, SystemPrompt: 120, Tools: 337, Template: 3, ResponseReserve: 1024, Conversation: 4540}}
	return &exchange{headers: http.Header{}}, p
}

// The plan's headers are set under canonical keys, each with one value,
// from one allocation of values (and the numbers' strings).
func TestSetPlanHeaders(t *testing.T) {
	ex, p := plannedExchange()
	setPlanHeaders(ex, p)
	for k, v := range ex.headers {
		if k != http.CanonicalHeaderKey(k) {
			t.Errorf("header %q is not canonical", k)
		}
		if len(v) != 1 && k != "X-Ctxproxy-Warning" {
			t.Errorf("%s: %q, want one value", k, v)
		}
	}
	if got := ex.headers.Get("X-Ctxproxy-Tokens-Before"); got != "9000" {
		t.Errorf("X-Ctxproxy-Tokens-Before %q", got)
	}
	if got := ex.headers.Get("X-Ctxproxy-Num-Ctx"); got != "8192" {
		t.Errorf("X-Ctxproxy-Num-Ctx %q", got)
	}
	// A header added later does not overwrite its neighbour's value.
	ex.headers.Add("X-Ctxproxy-Tokens", "1")
	if got := ex.headers.Get("X-Ctxproxy-Tokens-Before"); got != "9000" {
		t.Errorf("after an Add: X-Ctxproxy-Tokens-Before %q", got)
	}
	n := testing.AllocsPerRun(100, func() {
		ex, p := plannedExchange()
		setPlanHeaders(ex, p)
	}) - testing.AllocsPerRun(100, func() { _, _ = plannedExchange() })
	// One header at a time: 21 allocations.
	if n > 15 {
		t.Errorf("%v allocations to set the plan's headers, want at most 15", n)
	}
}

func BenchmarkSetPlanHeaders(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		ex, p := plannedExchange()
		setPlanHeaders(ex, p)
	}
}

// chatBodyN is an Ollama chat of n messages of about 300 bytes each, the
// harness's scale workload.
func chatBodyN(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"llama3.1:8b","stream":false,"messages":[`)
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":%q,"content":%q}`, role, strings.Repeat(fmt.Sprintf("turn %d ", i), 300/len(fmt.Sprintf("turn %d ", i))))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkChatWarm1000 resends a 1,000-message conversation: per turn,
// only the new work should be paid.
func BenchmarkChatWarm1000(b *testing.B) { benchWarmChat(b, chatBodyN(1000)) }

// BenchmarkStoredMessages1000 is the conversion of a 1,000-message
// history for the store: what an accumulated turn no longer pays (only its
// new turn is converted) unless it takes a pre-overflow snapshot.
func BenchmarkStoredMessages1000(b *testing.B) {
	req, err := wire.DecodeChat(wire.Ollama, chatBodyN(1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = sessions.StoredMessages(wire.Ollama, req.Messages)
	}
}
