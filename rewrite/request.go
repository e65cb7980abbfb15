package rewrite

import "fmt"

// Request is what Trim and the strategies may need to know of the chat
// request they run for, besides its messages: who asks (session, model,
// credential), what the backend is sent (num_ctx) and what the client
// asked of the cut (the X-Ctxproxy-* headers, a compress's options). It
// is passed as an argument, never through a context, so that a call shows
// what a strategy depends on; its zero value asks for nothing: the
// configured mode and threshold, no cap, no session.
type Request struct {
	// Session keys remembered summaries (SummaryStore); "" keeps them in
	// this process only.
	Session string
	// Model is the request's model: the default summarizing model.
	Model string
	// Auth is the client's Authorization header value, handed to the
	// Summarizer for backends that need a key. It is a credential: String
	// and JSON leave it out, and nothing logs it.
	Auth string `json:"-"`
	// NumCtx is the num_ctx the proxy sends to Ollama for this request (0:
	// none); summarizer calls send the same (see SummaryRequest.NumCtx).
	NumCtx int
	// Instructions are one-off instructions for the summaries written for
	// this request (/compact <instructions>); summaries written to them
	// are kept apart from the automatic ones.
	Instructions string
	// Mode is the strategy mode asked for (X-Ctxproxy-Strategy); "" means
	// the configured strategy.mode.
	Mode string
	// MaxMessages, when positive, caps the conversation at that many
	// non-system messages before anything else, whatever its usage
	// (X-Ctxproxy-Max-Messages; see MaxMessages).
	MaxMessages int
	// Threshold, when in (0, 1], replaces strategy.threshold: the memory
	// guard lowers it while GPU memory is under pressure (compress
	// earlier), and a compress sets it to the target (cut now).
	Threshold float64
	// Wait makes a fold wait for its summaries (at most summarize.wait)
	// even when it is not its conversation's first: an explicit compress
	// asks for summaries, not for trimming in the meantime.
	Wait bool
	// DryRun asks what Trim would do, doing nothing that lasts: no
	// summarizer call, no background job, no summary remembered, no
	// counter moved. A summary not yet written is folded as a stand-in of
	// the length a summary is expected to have (see Summarize), so the
	// answer is an estimate where summaries are missing and exact
	// elsewhere.
	DryRun bool
}

// String describes r without its credential, so that a Request printed
// in a log line or an error (%v, %+v, %s) leaks no key.
func (r Request) String() string {
	auth := ""
	if r.Auth != "" {
		auth = "[redacted]"
	}
	return fmt.Sprintf("{Session:%q Model:%q Auth:%s NumCtx:%d Instructions:%q Mode:%q MaxMessages:%d Threshold:%v Wait:%t DryRun:%t}",
		r.Session, r.Model, auth, r.NumCtx, r.Instructions, r.Mode, r.MaxMessages, r.Threshold, r.Wait, r.DryRun)
}

// threshold is the trimming threshold in force for r.
func (r Request) threshold(configured float64) float64 {
	if r.Threshold > 0 && r.Threshold <= 1 {
		return r.Threshold
	}
	return configured
}

// Input is what a Strategy works on: the conversation, how far to cut it,
// how to count, and the request it runs for.
type Input struct {
	Messages []Message
	// Target is the most tokens the result should cost, as Counter counts.
	Target  int
	Counter Counter
	// Limit is the request's effective limit (Trim's limit), for the
	// strategies that size things by the window rather than the target
	// (Summarize's block of summaries, Hybrid's recent tokens); 0 when
	// unknown.
	Limit int
	// Step is how far apart the Trimmer's steps are, in tokens (Budget's
	// Q): Hybrid moves what it folds by as much; 0 when unknown.
	Step int
	// Request is the chat request the strategy runs for.
	Request Request
}
