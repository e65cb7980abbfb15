package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// exchange is what one intercepted request tells: the X-Ctxproxy-*
// headers its answer gets and what its log line and metrics say. The steps
// of the path add to it; none of them steers by it.
type exchange struct {
	dialect wire.Dialect
	route   string
	model   string
	session string
	stream  bool
	start   time.Time
	status  int
	// headers are added to the response (X-Ctxproxy-*).
	headers  http.Header
	logAttrs []any
}

// newExchange starts the exchange of a request on route in dialect d.
func newExchange(d wire.Dialect, route string) *exchange {
	// Room for the X-Ctxproxy-* headers a counted request gets, so the
	// map is not grown while they are set.
	return &exchange{dialect: d, route: route, start: time.Now(), headers: make(http.Header, 16)}
}

// holds are what a chat request holds while it runs, besides its place
// among the requests in flight (edge.Gate.Admit, given back when
// ServeHTTP returns): its body's share of the memory budget
// (Gate.TakeBody), and, accumulating on a store replicas share, its turn
// in the session's order (plan.Turn). The request gives both back when it
// ends (release), unless it handed them to the session writer with its
// turn's record (handOver): the turn's messages share the body's bytes
// until the store has them, and other replicas wait for the turn until
// it is stored. Only the request's goroutine calls its methods.
type holds struct {
	body   func()
	turn   *plan.Turn
	handed bool
	once   sync.Once
}

// HandOver hands what h holds to the writer, which gives it back
// (Stored) once the turn is stored, or will not be; release then gives
// nothing back.
func (h *holds) HandOver() { h.handed = true }

// Stored gives back what h holds, for the writer.
func (h *holds) Stored() { h.free() }

// release gives back what h holds, unless the writer has it.
func (h *holds) release() {
	if !h.handed {
		h.free()
	}
}

// writerHas reports whether the writer has h's turn, which then ends
// once it is stored.
func (h *holds) writerHas() bool { return h != nil && h.handed && h.turn != nil }

func (h *holds) free() {
	h.once.Do(func() {
		h.body()
		h.turn.End()
	})
}

// headerValues sets headers whose values are one-element slices of one
// backing array: the plan's ten headers cost one allocation instead of
// one each. Keys must be canonical (they are constants here).
type headerValues struct {
	h    http.Header
	vals []string
}

func (hv *headerValues) set(key, v string) {
	hv.vals = append(hv.vals, v)
	n := len(hv.vals)
	hv.h[key] = hv.vals[n-1 : n : n]
}

// warn adds a warning for the client (X-Ctxproxy-Warning) and the log.
func (ex *exchange) warn(msg string) {
	if !slices.Contains(ex.headers.Values("X-Ctxproxy-Warning"), msg) {
		ex.headers.Add("X-Ctxproxy-Warning", msg)
	}
}

// tell adds what p says for the client to the exchange: its warnings,
// and the notice of a request left as sent.
func (ex *exchange) tell(p plan.Plan) {
	for _, w := range p.Warnings {
		ex.warn(w)
	}
	if p.Notice != "" {
		ex.headers.Set("X-Ctxproxy-Notice", p.Notice)
	}
	if p.Backend != "" {
		v := p.Backend
		if p.Moved != "" {
			v += "; moved-from=" + p.Moved
		}
		ex.headers.Set("X-Ctxproxy-Backend", v)
	}
}

// seen is what the status page shows of how p's model is run and
// counted.
func seen(p plan.Plan) admin.ModelSeen {
	return admin.ModelSeen{Name: p.Model, Facts: p.Details.Facts, NumCtx: p.NumCtx, Reason: p.NumReason, Limit: p.Limit,
		Counting: p.CountMethod(), Exact: p.Exact, NotExact: p.NotExact}
}

// setPlanHeaders sets the X-Ctxproxy-* response headers (docs/headers.md).
func setPlanHeaders(ex *exchange, p plan.Plan) {
	h := headerValues{h: ex.headers, vals: make([]string, 0, 11)}
	if p.Counter != nil {
		h.set("X-Ctxproxy-Tokens", strconv.Itoa(p.After.Tokens))
		h.set("X-Ctxproxy-Tokens-Before", strconv.Itoa(p.Before.Tokens))
		h.set("X-Ctxproxy-Limit", strconv.Itoa(p.Limit))
		// Two numbers, each named: the conversation as the client sent
		// it, and what was forwarded after cutting.
		usage, fwd := p.Usage(), p.ForwardedUsage()
		h.set("X-Ctxproxy-Usage", strconv.FormatFloat(usage*100, 'f', 1, 64))
		h.set("X-Ctxproxy-Usage-Forwarded", strconv.FormatFloat(fwd*100, 'f', 1, 64))
		switch cut := p.Result.Notice != ""; {
		case cut && fwd >= 0.8:
			ex.warn(fmt.Sprintf("Context at %.0f%% capacity after cutting (the conversation as sent is at %.0f%%).", fwd*100, usage*100))
		case cut:
			// The cut has answered it: X-Ctxproxy-Notice says what was
			// done. An "approaching" warning would mislead.
		case usage >= 0.9:
			ex.warn(sessions.Warn90)
		case usage >= 0.8:
			ex.warn(sessions.Warn80)
		}
	}
	// Result.Dropped counts every message not forwarded, folded ones too.
	h.set("X-Ctxproxy-Dropped", strconv.Itoa(p.Result.Dropped-p.Result.Summarized))
	h.set("X-Ctxproxy-Summarized", strconv.Itoa(p.Result.Summarized))
	if p.NumCtx > 0 {
		h.set("X-Ctxproxy-Num-Ctx", strconv.Itoa(p.NumCtx))
	}
	if p.Result.Notice != "" {
		h.set("X-Ctxproxy-Notice", p.Result.Notice)
	}
	if b := p.Split; b.Total > 0 {
		h.set("X-Ctxproxy-Budget", budgetHeader(b))
	}
	if p.ReplyAsked > 0 && p.Counter != nil {
		if room := p.Limits.ReplyRoom(p.After.Tokens); room < p.ReplyAsked {
			ex.warn(fmt.Sprintf("the reply has room for %d of the %d tokens asked: the prompt takes %d of the %d-token window "+
				"(ctxproxy cuts the prompt only to keep %d free for the reply)", room, p.ReplyAsked, p.After.Tokens, p.Limits.MaxTokens, p.Limits.MaxOutputTokens))
		}
	}
}

// setRawHeaders sets the X-Ctxproxy-* response headers of a raw prompt,
// which is counted and never cut.
func setRawHeaders(ex *exchange, p plan.Plan) {
	h := ex.headers
	h.Set("X-Ctxproxy-Tokens", strconv.Itoa(p.After.Tokens))
	h.Set("X-Ctxproxy-Tokens-Before", strconv.Itoa(p.Before.Tokens))
	h.Set("X-Ctxproxy-Limit", strconv.Itoa(p.Limit))
	h.Set("X-Ctxproxy-Usage", strconv.FormatFloat(float64(p.After.Tokens)*100/float64(max(1, p.Limit)), 'f', 1, 64))
	if p.NumCtx > 0 {
		h.Set("X-Ctxproxy-Num-Ctx", strconv.Itoa(p.NumCtx))
	}
}

// budgetHeader is X-Ctxproxy-Budget's value: "total=8192 system=120
// tools=337 template=3 reserve=1024 conversation=5000 available=1708", built in one
// buffer (it is set on every counted request).
func budgetHeader(b adminapi.Budget) string {
	buf := make([]byte, 0, 96)
	for i, part := range [...]struct {
		key string
		n   int
	}{{"total=", b.Total}, {"system=", b.SystemPrompt}, {"tools=", b.Tools}, {"template=", b.Template}, {"reserve=", b.ResponseReserve},
		{"conversation=", b.Conversation}, {"available=", b.Available()}} {
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = strconv.AppendInt(append(buf, part.key...), int64(part.n), 10)
	}
	return string(buf)
}
