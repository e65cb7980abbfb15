package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
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
	// named reports that the client named the session (the session
	// header) rather than ctxproxy fingerprinting it.
	named bool
}

// newExchange starts the exchange of a request on route in dialect d.
func newExchange(d wire.Dialect, route string) *exchange {
	// Room for the X-Ctxproxy-* headers a counted request gets, so the
	// map is not grown while they are set.
	return &exchange{dialect: d, route: route, start: time.Now(), headers: make(http.Header, 16)}
}

// bodyHold is a request body's share of the memory budget, given back
// once: when its exchange ends, or, when the exchange queues its turn for
// the session store, once the store has it (the turn's messages share the
// body's bytes until then).
type bodyHold struct {
	release func()
	once    sync.Once
	kept    atomic.Bool
}

func newBodyHold(release func()) *bodyHold { return &bodyHold{release: release} }

// keep hands the hold over to a later owner, and returns what that owner
// calls when it is done; end then gives nothing back.
func (h *bodyHold) keep() func() {
	if h == nil {
		return nil
	}
	h.kept.Store(true)
	return h.free
}

// end gives the hold back when no one kept it.
func (h *bodyHold) end() {
	if !h.kept.Load() {
		h.free()
	}
}

func (h *bodyHold) free() { h.once.Do(h.release) }

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

// setPlanHeaders sets the X-Ctxproxy-* response headers (docs/headers.md).
func setPlanHeaders(ex *exchange, p *plan) {
	h := headerValues{h: ex.headers, vals: make([]string, 0, 11)}
	if p.counter != nil {
		h.set("X-Ctxproxy-Tokens", strconv.Itoa(p.after.Tokens))
		h.set("X-Ctxproxy-Tokens-Before", strconv.Itoa(p.before.Tokens))
		h.set("X-Ctxproxy-Limit", strconv.Itoa(p.limit))
		// Two numbers, each named: the conversation as the client sent
		// it, and what was forwarded after cutting.
		usage, fwd := p.usage(), p.forwardedUsage()
		h.set("X-Ctxproxy-Usage", strconv.FormatFloat(usage*100, 'f', 1, 64))
		h.set("X-Ctxproxy-Usage-Forwarded", strconv.FormatFloat(fwd*100, 'f', 1, 64))
		switch cut := p.result.Notice != ""; {
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
	h.set("X-Ctxproxy-Dropped", strconv.Itoa(p.result.Dropped-p.result.Summarized))
	h.set("X-Ctxproxy-Summarized", strconv.Itoa(p.result.Summarized))
	if p.numCtx > 0 {
		h.set("X-Ctxproxy-Num-Ctx", strconv.Itoa(p.numCtx))
	}
	if p.result.Notice != "" {
		h.set("X-Ctxproxy-Notice", p.result.Notice)
	}
	if b := p.alloc; b.Total > 0 {
		h.set("X-Ctxproxy-Budget", budgetHeader(b))
	}
	if p.replyAsked > 0 && p.counter != nil {
		if room := p.lim.ReplyRoom(p.after.Tokens); room < p.replyAsked {
			ex.warn(fmt.Sprintf("the reply has room for %d of the %d tokens asked: the prompt takes %d of the %d-token window "+
				"(ctxproxy cuts the prompt only to keep %d free for the reply)", room, p.replyAsked, p.after.Tokens, p.lim.MaxTokens, p.lim.MaxOutputTokens))
		}
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
