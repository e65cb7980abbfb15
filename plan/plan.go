// Package plan decides what ctxproxy forwards for one request, without
// HTTP: the history a chat turn builds on, num_ctx from the memory
// actually free, the model's window, the prompt counted, and the
// conversation cut to fit it and encoded.
//
// A request is read once, at the edge, into a Request and its Options
// (what the client asked of ctxproxy in headers). Planner.Prepare returns
// a Plan; the plan does not change after that. A harder cut
// (Planner.Cut), and the count of a prompt forwarded before it was
// counted (Planner.Settle), return new plans. The chat routes and the
// raw-prompt routes (/api/generate, /v1/completions) go through the same
// Prepare.
package plan

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// Request is what is planned: a chat request as decoded, or a raw
// prompt (Raw set, Prompt its text). The planner does not change it.
type Request struct {
	Chat *wire.Request
	// Raw is a raw-prompt request of dialect Dialect; Prompt its prompt
	// as a string.
	Raw     *wire.RawRequest
	Prompt  string
	Dialect wire.Dialect
	// Body is a raw request's body, forwarded as sent.
	Body []byte
}

// Chat is the Request of a decoded chat request.
func Chat(req *wire.Request) Request { return Request{Chat: req, Dialect: req.Dialect} }

// Raw is the Request of a raw-prompt request of dialect d.
func Raw(d wire.Dialect, req *wire.RawRequest, prompt string, body []byte) Request {
	return Request{Raw: req, Prompt: prompt, Dialect: d, Body: body}
}

// Options are what the client asked of ctxproxy for one request, read
// from its headers at the edge (docs/headers.md).
type Options struct {
	// Session is the request's session ("" for none); Named reports
	// that the client named it in the session header rather than
	// ctxproxy fingerprinting it.
	Session string
	Named   bool
	// Strategy is X-Ctxproxy-Strategy: "" for the configured one.
	Strategy string
	// Accumulate is X-Ctxproxy-Accumulate: 1, the stored history put
	// before the turn sent.
	Accumulate bool
	// MaxMessages is X-Ctxproxy-Max-Messages: 0 for no cap.
	MaxMessages int
	// Credential is the client's Authorization, for a summarizer on the
	// same backend; never printed.
	Credential string
	// Backend is X-Ctxproxy-Backend: the server the client sends the
	// request to, by name, with several ("" lets ctxproxy choose).
	Backend string
}

// Plan is what the planner decided for one request. It is a value:
// Prepare, Cut and Settle each return a new one.
type Plan struct {
	Model string
	// Dialect is the client's.
	Dialect wire.Dialect
	// Messages are what is forwarded; Sent the conversation as the
	// client meant it (the stored history included when accumulating);
	// NewTurn what the client sent this time (accumulating).
	Messages []rewrite.Message
	Sent     []rewrite.Message
	NewTurn  []rewrite.Message
	// Turn is this turn as announced to the replicas sharing the store
	// (accumulating; nil otherwise). Its owner, the request, releases it
	// or hands it to the writer with the turn's record.
	Turn *Turn
	// TurnWait is how long the turn waited for other replicas' turns.
	TurnWait    time.Duration
	Accumulated bool
	// Changed reports that Messages differ from the request's.
	Changed bool
	// NumCtx is the num_ctx forwarded (0: none), NumReason why.
	NumCtx    int
	NumReason string
	// Limit is the room for the prompt: the window less the reply's
	// reserve. Limits are the model's limits as the request runs with
	// them; Split how its window is divided.
	Limit  int
	Limits budget.Window
	Split  adminapi.Budget
	// Window is the context window the backend runs the request with,
	// when ctxproxy knows it (num_ctx, or Ollama's default): a reported
	// count at it may be censored.
	Window int
	// Before and After are the counts of the prompt as sent and as
	// forwarded; Result what the strategy did.
	Before, After budget.Estimate
	Result        rewrite.Result
	// Counter counts this request's prompt: the model's own tokenizer,
	// the backend's tokenize API, or an estimate. nil: not counted. The
	// plans Cut makes of one prepared plan share it; it remembers the
	// last prompt it counted (Counted), the one forwarded.
	Counter Counter
	// Exact is the backend's model when the prompt was counted with its
	// own tokenizer (nil when estimated), ExactShape the request's shape
	// as exact counting tells shapes apart; NotExact says why a request
	// bound for Ollama was not counted exactly.
	Exact      *backend.Details
	ExactShape string
	NotExact   string
	// Details are what the backend said of the model.
	Details backend.Details
	// Translate: the request is translated to Ollama's /api/chat, and
	// Reply carries its answer back to the client's dialect.
	Translate bool
	Reply     wire.Translation
	// ToOllama: the request goes to Ollama's own chat route (num_ctx,
	// truncate). Resend: an overflow the backend reports despite the
	// count is cut harder and sent again (never for a client that asked
	// for no cut).
	ToOllama, Resend bool
	// Retries is the number of overflow retries the request took.
	Retries int
	// ReplyAsked is the reply the request asked for when it was more
	// than the floor Limits keeps (Window.Yield): the reply gets what the
	// prompt leaves of it. 0 otherwise.
	ReplyAsked int
	// Restore is the pending restore this request applied (a client that
	// resends its whole history, after /context restore).
	Restore *sessions.Mark
	// KeepWhole keeps an accumulated history unpruned (the client's
	// truncate: false, or strategy none for the request).
	KeepWhole bool
	// Tools are the request's tool definitions.
	Tools json.RawMessage
	// Body is what is forwarded, once cut (Cut); for a request ctxproxy
	// leaves as sent (Fixed), the body as it came.
	Body  wire.Payload
	Fixed bool
	// Notice is ctxproxy's word on a request it leaves as sent
	// (X-Ctxproxy-Notice); Warnings are for the client
	// (X-Ctxproxy-Warning) and the log.
	Notice   string
	Warnings []string
	// Server is the server the plan is made for and goes to. Backend is
	// its name when there are several ("" with one), Moved the server
	// the request or its session left for it.
	Server  *fleet.Node
	Backend string
	Moved   string
	// Placed: this turn puts its session on Server where its record
	// names no server or another, and replicas share the store: the
	// record is stored before the reply's last byte leaves, so that the
	// session's next turn goes to the same server whichever replica
	// receives it.
	Placed bool

	req *wire.Request
	in  Request
	opt Options
	// tries are the servers after Server, in the order a refused
	// request moves to them (Move).
	tries []*fleet.Node
	// uncut are the messages before any strategy (accumulated history
	// and in-band edits applied), uncutChanged whether they already
	// differ from the request's; a harder cut starts from them again.
	uncut        []rewrite.Message
	uncutChanged bool
	opts         translate.RequestOptions
	// pending is the model whose tokenizer was still being built when
	// the request's bytes proved it fits as sent: it was forwarded
	// uncounted, and Settle counts it. nil once counted.
	pending *backend.Pending
}

// warn adds a warning to p, which is a copy being made: the plan it was
// copied from keeps its own list.
func (p *Plan) warn(msg string) {
	if !slices.Contains(p.Warnings, msg) {
		p.Warnings = append(slices.Clip(p.Warnings), msg)
	}
}

// Uncounted reports that p's prompt was forwarded before its model's
// tokenizer was built: Settle counts it.
func (p Plan) Uncounted() bool { return p.pending != nil }

// Request is the chat request p was made for (nil for a raw prompt).
func (p Plan) Request() *wire.Request { return p.req }

// Usage is the share of the limit the conversation, as the client sent
// it, takes.
func (p Plan) Usage() float64 {
	if p.Limit <= 0 {
		return 0
	}
	return float64(p.Before.Tokens) / float64(p.Limit)
}

// ForwardedUsage is the share of the limit what was forwarded takes.
func (p Plan) ForwardedUsage() float64 {
	if p.Limit <= 0 {
		return 0
	}
	return float64(p.After.Tokens) / float64(p.Limit)
}

// CountMethod is how the prompt was counted: exact, backend or estimate.
func (p Plan) CountMethod() string {
	switch {
	case p.Exact != nil:
		return "exact"
	case p.Before.Exact:
		return "backend"
	}
	return "estimate"
}

// Approximate reports that p's prompt, counted with the model's own
// tokenizer, is not counted exactly (images for a vision model whose
// image cost the server decides at run time): its count is not checked
// against the backend's.
func (p Plan) Approximate() bool {
	ec, ok := p.Counter.(exactPrompt)
	return ok && ec.Approximate()
}

// Counted is the last prompt p's exact counter counted, as the server
// renders it; false when p was not counted with the model's tokenizer.
func (p Plan) Counted() (exact.Prompt, bool) {
	if ec, ok := p.Counter.(exactPrompt); ok {
		return ec.Counted()
	}
	return exact.Prompt{}, false
}
