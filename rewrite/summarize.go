package rewrite

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/check"
)

// Defaults of the summarize: keys (config.example.yaml).
const (
	DefaultKeepRecent     = 3
	DefaultMinMessages    = 6
	DefaultSummaryTokens  = 256
	DefaultSummaryTimeout = 60 * time.Second
	DefaultPrefetchAt     = 0.70
	DefaultSummaryWait    = 2 * time.Second
)

// ErrEmptySummary reports a summarizer answer with no text in it.
var ErrEmptySummary = errors.New("rewrite: summarizer returned an empty summary")

// SummarizeConfig mirrors the configuration's summarize: section. Its zero value
// works: every zero field means the default its comment names.
type SummarizeConfig struct {
	// Model is the model that writes summaries; "" means the model of the
	// request being summarized (the model already loaded).
	Model string `mapstructure:"model"`
	// Backend is the URL of a server of its own for the summarizer's
	// calls; "" means the proxy's backend. BackendKind is the API it
	// speaks (ollama or openai; "" means ollama), APIKey the bearer token
	// it wants: the clients' credentials never go to it.
	Backend     string `mapstructure:"backend"`
	BackendKind string `mapstructure:"backend_kind"`
	APIKey      string `mapstructure:"api_key"`
	// KeepRecent is how many of the newest iterations mode summarize keeps
	// verbatim at least; 0 means
	// DefaultKeepRecent, negative none (the newest one is always kept).
	KeepRecent int `mapstructure:"keep_recent"`
	// KeepRecentTokens is how many tokens of the newest messages mode
	// hybrid keeps verbatim; 0 means a third of the
	// effective limit.
	KeepRecentTokens int `mapstructure:"keep_recent_tokens"`
	// MinMessages is the shortest conversation worth summarizing; 0 means
	// DefaultMinMessages,
	// negative no minimum.
	MinMessages int `mapstructure:"min_messages"`
	// MaxTokens bounds one summary; a longer answer is cut. 0 means
	// DefaultSummaryTokens.
	MaxTokens int `mapstructure:"max_tokens"`
	// Timeout bounds one summarizer call; 0 means DefaultSummaryTimeout.
	Timeout time.Duration `mapstructure:"timeout"`
	// PrefetchAt is the usage, as a share of the effective limit, from
	// which the summaries the next trim will need are written in the
	// background; 0 means DefaultPrefetchAt, negative never.
	PrefetchAt float64 `mapstructure:"prefetch_at"`
	// Prompt is the system prompt of every summarizer call; "" means
	// SummaryPrompt. It is told to condense the exchange in <exchange>,
	// with <earlier_summary> for context.
	Prompt string `mapstructure:"prompt"`
	// Schedule is when the summaries a step folds are written: auto,
	// ahead or at_cut (ScheduleAuto, ScheduleAhead, ScheduleAtCut); ""
	// means auto.
	Schedule string `mapstructure:"schedule"`
	// Wait is how long the first request of a conversation that needs
	// summaries waits for them before it is trimmed instead; 0 means
	// DefaultSummaryWait, negative not at all. Later requests never wait:
	// they fold the summaries that are ready and trim the rest, and fold
	// the others in once they are written.
	Wait time.Duration `mapstructure:"wait"`
}

func (c SummarizeConfig) withDefaults() SummarizeConfig {
	c.KeepRecent = orDefault(c.KeepRecent, DefaultKeepRecent)
	c.MinMessages = orDefault(c.MinMessages, DefaultMinMessages)
	if c.MaxTokens <= 0 {
		c.MaxTokens = DefaultSummaryTokens
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultSummaryTimeout
	}
	if c.PrefetchAt == 0 {
		c.PrefetchAt = DefaultPrefetchAt
	}
	if c.Wait == 0 {
		c.Wait = DefaultSummaryWait
	}
	return c
}

// Validate reports every problem with c at once.
func (c SummarizeConfig) Validate() error {
	var errs []error
	errs = append(errs, check.NotNegative("summarize.max_tokens", c.MaxTokens),
		check.NotNegative("summarize.keep_recent_tokens", c.KeepRecentTokens),
		check.NotNegative("summarize.timeout", c.Timeout))
	if c.PrefetchAt > 1 {
		errs = append(errs, fmt.Errorf("summarize.prefetch_at: %v is above 1", c.PrefetchAt))
	}
	if c.Backend != "" {
		if u, err := url.Parse(c.Backend); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("summarize.backend: %q is not an http(s) URL", c.Backend))
		}
	}
	errs = append(errs, check.OneOf("summarize.backend_kind", c.BackendKind, "ollama", "openai"),
		check.OneOf("summarize.schedule", c.Schedule, ScheduleAuto, ScheduleAhead, ScheduleAtCut))
	if (c.BackendKind != "" || c.APIKey != "") && c.Backend == "" {
		errs = append(errs, errors.New("summarize.backend_kind and summarize.api_key need summarize.backend"))
	}
	return errors.Join(errs...)
}

// Summarizer writes the summary of one iteration of a conversation. The
// proxy's implementation calls the backend itself; an implementation must
// be safe for concurrent use and honour ctx's deadline.
type Summarizer interface {
	Summarize(ctx context.Context, req SummaryRequest) (string, error)
}

// SummaryRequest is one summarizer call.
type SummaryRequest struct {
	// Model writes the summary (summarize.model, else the request's).
	Model string
	// Messages are the messages to fold: one iteration, a user turn and
	// what followed it up to the next.
	Messages []Message
	// Previous is the summary of the iterations before, for context only:
	// the new summary extends it and does not repeat it.
	Previous string
	// MaxTokens bounds the answer (summarize.max_tokens).
	MaxTokens int
	// NumCtx is the context size the proxy sets for Model on Ollama; the
	// call sends the same, because every distinct num_ctx makes Ollama
	// reload the model (Ollama's server/sched.go, runnerRef.needsReload,
	// compares the runner options, num_ctx among them). 0 sets none.
	NumCtx int
	// Auth is the Authorization header value of the client's request, for
	// backends that need a key; "" sends none. Never log it.
	Auth string
	// System is the system prompt (summarize.prompt); "" means
	// SummaryPrompt.
	System string
	// Instructions are one-off instructions for this summary (/compact
	// <instructions>), appended to the system prompt; "" adds none.
	Instructions string
}

// SummaryPrompt is the system prompt of every summarizer call. It asks for
// 2-3 sentences per iteration, short enough to fold many; what a later turn most often needs
// back — names, decisions, numbers, file paths, open tasks, the user's
// goals — is named so that the model keeps it.
const SummaryPrompt = `You condense one exchange of a conversation between a user and an AI assistant, so that the assistant can continue the conversation without seeing the exchange again.

Write 2 to 3 plain sentences about the exchange inside <exchange>. Keep every name, decision, number, file path, identifier, URL, error message, open task and goal the user stated; say which tools were called and what they returned. Use <earlier_summary> only to understand references: do not repeat it. Write in the language of the conversation. No preamble, no lists, no markdown: only the sentences.`

// Bounds on what a summarizer call reads: a long tool result is cut in the
// middle so that the prompt fits the summarizing model's context.
const (
	maxSummaryInput  = 24000 // bytes of <exchange> when the context size is unknown
	minSummaryInput  = 2000
	bytesPerTokenLow = 3 // a conservative bytes-per-token for sizing the input
)

// Prompt returns the system and user messages of the summarizer call for
// r: r.System (SummaryPrompt by default) with r.Instructions after it, and
// the previous summary and the exchange, each in its
// own delimited block. Long message contents are cut in the middle so the
// exchange fits the summarizing model's context (r.NumCtx when known).
func (r SummaryRequest) Prompt() (system, user string) {
	system = r.System
	if strings.TrimSpace(system) == "" {
		system = SummaryPrompt
	}
	if in := strings.TrimSpace(r.Instructions); in != "" {
		system += "\n\nInstructions for this summary: " + in
	}
	budget := maxSummaryInput
	if r.NumCtx > 0 {
		budget = min(budget, max((r.NumCtx-r.MaxTokens-512)*bytesPerTokenLow-len(system)-len(r.Previous), minSummaryInput))
	}
	var b strings.Builder
	if p := strings.TrimSpace(r.Previous); p != "" {
		b.WriteString("<earlier_summary>\n")
		b.WriteString(p)
		b.WriteString("\n</earlier_summary>\n\n")
	}
	b.WriteString("<exchange>\n")
	for _, line := range renderExchange(r.Messages, budget) {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteString("</exchange>")
	return system, b.String()
}

// renderExchange writes each message as "role: content", tool calls as
// "assistant called name(arguments)", cutting the longest contents in the
// middle until the whole fits budget bytes.
func renderExchange(msgs []Message, budget int) []string {
	type part struct {
		head, body string
	}
	var parts []part
	for _, m := range msgs {
		if m.Synthetic {
			continue
		}
		head := m.Role
		if isToolResult(&m) {
			head = "tool result"
			if m.ToolCallID != "" {
				head += " (" + m.ToolCallID + ")"
			}
		}
		if m.Name != "" {
			head += " " + m.Name
		}
		body := m.Content
		if n := len(m.Images); n > 0 {
			body = strings.TrimSpace(body + " [" + strconv.Itoa(n) + " " + plural(n, "image", "images") + "]")
		}
		if body != "" || len(m.ToolCalls) == 0 {
			parts = append(parts, part{head + ": ", body})
		}
		for _, tc := range m.ToolCalls {
			parts = append(parts, part{m.Role + " called ", tc.Name + "(" + tc.Arguments + ")"})
		}
	}
	// Water-filling: find the largest per-part cap under which everything
	// fits, so that short messages stay whole and only long ones are cut.
	total := 0
	lens := make([]int, len(parts))
	for i, p := range parts {
		lens[i] = len(p.body)
		total += len(p.head) + len(p.body) + 1
	}
	limit := -1 // no cut
	if total > budget && len(parts) > 0 {
		lo, hi := 0, budget
		for lo < hi {
			mid := (lo + hi + 1) / 2
			sum := 0
			for i, p := range parts {
				sum += len(p.head) + min(lens[i], mid) + 1
			}
			if sum <= budget {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		limit = max(lo, 200)
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		body := p.body
		if limit >= 0 && len(body) > limit {
			body = cutBytes(body, limit)
		}
		out[i] = p.head + body
	}
	return out
}

// cutBytes keeps the start and end of s, about n bytes in all, with a note
// in between; it never splits a UTF-8 sequence.
func cutBytes(s string, n int) string {
	const note = " […] "
	head := snapHead(s, n/2)
	tail := snapTail(s, len(s)-(n-n/2), head)
	return s[:head] + note + s[tail:]
}

// TrimSummary cleans a summarizer's answer: it drops a <think> block that
// reasoning models put first, joins the lines into one paragraph (a
// summary is a line of the injected block), removes anything that would
// close that block early, and cuts the text to maxTokens (as c counts;
// nil c means about 4 bytes a token) at a sentence end where it can. It
// reports whether it had to cut.
func TrimSummary(text string, maxTokens int, c Counter) (string, bool) {
	if i := strings.Index(text, "</think>"); i >= 0 && strings.Contains(text[:i], "<think>") {
		text = text[i+len("</think>"):]
	}
	text = strings.ReplaceAll(text, blockClose, "")
	text = strings.ReplaceAll(text, blockOpen, "")
	text = strings.Join(strings.Fields(text), " ")
	if text == "" || maxTokens <= 0 {
		return text, false
	}
	count := func(s string) int {
		if c == nil {
			return (len(s) + 3) / 4
		}
		return c.CountText(s)
	}
	total := count(text)
	if total <= maxTokens {
		return text, false
	}
	n := len(text) * maxTokens / total
	for n > 0 && count(text[:n]) > maxTokens {
		n = n * 9 / 10
	}
	for n > 0 && !utf8.RuneStart(text[n]) {
		n--
	}
	cut := text[:n]
	// Prefer the end of the last whole sentence in the second half.
	if i := lastSentenceEnd(cut); i >= len(cut)/2 {
		return cut[:i], true
	}
	if i := strings.LastIndexByte(cut, ' '); i > 0 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,;:") + "…", true
}

func lastSentenceEnd(s string) int {
	for i := len(s) - 1; i > 0; i-- {
		switch s[i] {
		case '.', '!', '?':
			if i == len(s)-1 || s[i+1] == ' ' {
				return i + 1
			}
		}
	}
	if i := strings.LastIndex(s, "。"); i >= 0 {
		return i + len("。")
	}
	return -1
}

// Summary is one remembered summary: the 2-3 sentences of one iteration.
// Its fields match snapshots.Summary.
type Summary struct {
	// Key is a hash of the iteration and of every iteration before it
	// (the iterations it covers), so a summary is only reused for the
	// very conversation it was written for.
	Key string
	// Covers is how many iterations, from the first, the key covers: this
	// summary is of iterations Covers-Span to Covers-1.
	Covers int
	// Span is how many iterations it condenses, written in one call (a
	// batch, at a cut); 0 means 1.
	Span int
	// Text is the summary.
	Text string
	// Tokens is what Text cost when it was written.
	Tokens int
	// Created is when it was written.
	Created time.Time
}

// SummaryStore remembers summaries per session, so that a transparent
// proxy, which sees the whole history again on every request, summarizes
// each iteration once: across requests, restarts and replicas. ctxproxy's
// keeps them in the session state (snapshots.Session.Summaries).
//
// A store should keep every summary of a session (a few hundred bytes
// each, one per iteration): those of the oldest iterations are needed as
// long as the conversation goes on. Get is called once per background job,
// Put once per summary written, never on a request's path.
type SummaryStore interface {
	// Get returns the summaries of session, in any order; none is not an
	// error.
	Get(ctx context.Context, session string) ([]Summary, error)
	// Put adds s to session, replacing one with the same Key.
	Put(ctx context.Context, session string, s Summary) error
}

// SummaryClaimer is implemented by a SummaryStore that replicas share, so
// that a summary is written once for them all: two replicas that reach
// the same cut of a conversation at the same moment would otherwise both
// call the summarizer for the same iterations.
//
// Before a background job calls the summarizer for a batch of
// iterations, it claims the key of the batch's first iteration (replicas
// may end a batch in different places, never start one elsewhere). While
// another replica holds that claim, the job makes no call: it reads the
// store now and then until that replica's summary lands there, or until
// the claim is free again (released, or expired because its holder died
// or hangs), and then claims again. Requests meanwhile trim what is not
// summarized yet, as they do whenever a summary is not ready. A claim that
// fails (the store is down) is logged, and the summary written anyway: a
// summary written twice is better than none. The job releases its claim
// once the summary is stored, and leaves it to expire when the summarizer
// fails.
//
// A store without this interface (one process) writes every summary
// without a claim.
type SummaryClaimer interface {
	// ClaimSummary claims key of session for ttl at most, and reports
	// whether the caller holds it now (false: another caller does).
	// release, when not nil, ends the caller's claim if it still holds
	// (one that expired and was taken by another stays theirs). A store
	// that replicas do not share grants every claim with a nil release:
	// the summary is then written at once.
	ClaimSummary(ctx context.Context, session, key string, ttl time.Duration) (release func(context.Context) error, ok bool, err error)
}
