package inband

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/report"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// In-band commands (commands.inband): when the newest message of
// a chat request is a user's "/context …" command or
// a short "/clear" or "/stats", ctxproxy answers it itself, as an assistant
// message in the request's dialect (streamed or not), without calling the
// backend. Any chat client — Open WebUI, a terminal client, an editor
// plugin — thereby gets the context commands with no change to it.
//
// The risk, and why the option is off by default: with it on, a user
// message that is exactly one of these commands is never seen by the
// model. Someone who means to ask the model about "/context clear" has
// their session cleared instead (it is snapshotted first, so "/context
// restore" undoes it). "/context size" and "/context auto" change num_ctx
// for every client of this ctxproxy, so any chat user can change it; they
// are refused when the admin API is off (listening beyond loopback
// without admin.token). A client that resends its whole history (not
// accumulate mode) also sends the command and its answer to the model on
// later turns, where they cost a few tokens.
//
// Only a whole message matches: the command word and its arguments
// separated by spaces, nothing else. "/context please explain" is not a
// command and goes to the model.

// inbandCSRF refuses in-band commands from cross-site browser requests.
var inbandCSRF = http.NewCrossOriginProtection()

// inbandCommands are the /context subcommands answered in-band, and how
// many arguments each takes.
var inbandCommands = map[string]int{
	"status": 0, "stats": 0, "size": 1, "auto": 0, "snapshot": 0, "restore": 1,
	"list": 0, "clear": 0, "compress": 0, "help": 0,
}

// Command returns the in-band command the newest message of req is:
// "clear" and "stats" for /clear and /stats, "context SUB" for /context
// SUB, with its arguments; ok false when it is none. A request a page in
// the user's browser posts across sites is never one: it must not clear or
// restore sessions, and goes to the backend, whose own origin checks
// (OLLAMA_ORIGINS) apply.
func Command(r *http.Request, req *wire.Request) (cmd string, args []string, ok bool) {
	if len(req.Messages) == 0 {
		return "", nil, false
	}
	cmd, args, ok = commandOf(&req.Messages[len(req.Messages)-1])
	if ok && inbandCSRF.Check(r) != nil {
		return "", nil, false
	}
	return cmd, args, ok
}

// commandOf returns the in-band command a message is, if it is one.
func commandOf(last *rewrite.Message) (cmd string, args []string, ok bool) {
	if last.Role != "user" || len(last.Content) > 200 ||
		!strings.HasPrefix(strings.TrimLeft(last.Content, " \t\r\n"), "/") {
		// Most messages: no command, and nothing to split.
		return "", nil, false
	}
	f := strings.Fields(last.Content)
	switch {
	case len(f) == 1 && (f[0] == "/clear" || f[0] == "/stats"):
		return f[0][1:], nil, true
	case len(f) >= 1 && f[0] == "/compact":
		return "compact", f[1:], true
	case len(f) == 1 && f[0] == "/context":
		return "context status", nil, true
	case len(f) >= 2 && f[0] == "/context":
		want, known := inbandCommands[f[1]]
		// A known subcommand with the wrong number of arguments is still
		// a command: it gets its usage rather than going to the model.
		if known && (len(f)-2 == want || len(f) <= 3) {
			return "context " + f[1], f[2:], true
		}
	}
	return "", nil, false
}

// Commands answers the in-band commands over the sessions and status
// services, rendering with package report as the CLI does.
type Commands struct {
	Sessions *sessions.Service
	Status   *admin.Status
	Monitor  *gpu.Monitor
	// SessionHeader names the header that names a session, for the
	// answer to a request without one.
	SessionHeader string
	// AdminOff refuses /context size and /context auto, which change
	// num_ctx for every client, as the admin API is refused.
	AdminOff bool
}

// printer shows times in UTC, named: the chat's reader may be anywhere.
var printer = report.Printer{Loc: time.UTC, Zone: true}

// inbandHelp lists the commands.
const inbandHelp = `ctxproxy answers these commands itself:
  /context             context status: model, tokens, VRAM, KV cache, snapshots
  /context stats       memory statistics: model memory, KV cache, compression
  /context size N      fix the context size (num_ctx) at N tokens
  /context auto        size the context from free VRAM
  /context snapshot    save a snapshot of this session now
  /context list        this session's snapshots
  /context restore ID  restore a snapshot (the context it replaces is saved first)
  /context clear       clear this session's context except the system prompt
  /context compress    trim or summarize this session's stored context now
  /compact TEXT        compress now, TEXT added to the summary prompt
  /clear               clear this session's context (its metadata stays)
  /stats               this session: messages, running token total`

// Run runs an in-band command for session and returns the answer's text.
// model is the request's model.
func (ib *Commands) Run(ctx context.Context, session, model, cmd string, args []string) string {
	sub := strings.TrimPrefix(cmd, "context ")
	if want, ok := inbandCommands[sub]; ok && strings.HasPrefix(cmd, "context ") && len(args) != want {
		usage := "/context " + sub
		if sub == "size" {
			usage += " N"
		} else if sub == "restore" {
			usage += " ID"
		}
		return "ctxproxy: usage: " + usage
	}
	switch cmd {
	case "context help":
		return inbandHelp
	case "context status":
		return ib.statusText(ctx, session, model)
	case "context size", "context auto":
		return ib.size(sub, args)
	}
	// The rest work on the request's session.
	switch {
	case session == "":
		return "ctxproxy: this request has no session: send the " + ib.SessionHeader + " header"
	case ib.Sessions.Store == nil:
		return "ctxproxy: " + sessions.ErrNoStore.Error()
	}
	ib.Sessions.Settle(ctx, session)
	text, err := ib.sessionCommand(ctx, session, model, cmd, args)
	if err != nil {
		status, msg := ib.Sessions.Describe(err)
		if status == http.StatusNotFound && cmd != "context restore" {
			return fmt.Sprintf("Session %s is empty: nothing was sent in it yet.", session)
		}
		return "ctxproxy: " + msg
	}
	return text
}

func (ib *Commands) sessionCommand(ctx context.Context, session, model, cmd string, args []string) (string, error) {
	switch cmd {
	case "stats":
		_, detail, err := ib.Sessions.Get(ctx, session)
		if err != nil {
			return "", err
		}
		warning := detail.Warning
		detail.Warning = ""
		return render(func(b *strings.Builder) error { return report.SessionStats(b, printer, detail) }, warning), nil
	case "context stats":
		_, detail, err := ib.Sessions.Get(ctx, session)
		if err != nil {
			return "", err
		}
		return ib.memoryStatsText(ctx, detail, cmp.Or(model, detail.Model)), nil
	case "context snapshot":
		info, err := ib.Sessions.Snapshot(ctx, session, snapshots.ReasonManual)
		if err != nil {
			return "", err
		}
		return report.SnapshotSaved(*sessions.SnapshotOf(info)), nil
	case "context restore":
		n, undo, err := ib.Sessions.Restore(ctx, session, args[0])
		if err != nil {
			return "", err
		}
		return report.SnapshotRestored(args[0], n) + undoHint(undo.ID), nil
	case "context list":
		if _, _, err := ib.Sessions.Get(ctx, session); err != nil {
			return "", err
		}
		list, err := ib.Sessions.Store.ListSnapshots(ctx, session)
		if err != nil {
			return "", err
		}
		if len(list) == 0 {
			return "No snapshots yet.", nil
		}
		infos := make([]adminapi.SnapshotInfo, len(list))
		for i, info := range list {
			infos[i] = *sessions.SnapshotOf(info)
		}
		return render(func(b *strings.Builder) error { return report.Snapshots(b, printer, infos) }, ""), nil
	case "context clear", "clear":
		// /context clear keeps the system prompt; /clear removes every
		// turn and keeps the metadata.
		keepSystem := cmd == "context clear"
		undo, err := ib.Sessions.Clear(ctx, session, keepSystem, snapshots.ReasonClear)
		if err != nil {
			return "", err
		}
		text := "Context cleared."
		if keepSystem {
			text = "Context cleared (the system prompt stays)."
		}
		return text + undoHint(undo.ID), nil
	case "context compress", "compact":
		res, err := ib.Sessions.Compact(ctx, session, strings.Join(args, " "))
		if err != nil {
			return "", err
		}
		if res.Undo == nil {
			return res.Notice, nil
		}
		return report.Compressed(res) + undoHint(res.Undo.ID), nil
	}
	return "", sessions.Errorf(http.StatusBadRequest, "unknown command")
}

// undoHint is report.UndoHint on a line of its own, worded for the chat.
func undoHint(id string) string {
	if id == "" {
		return ""
	}
	return "\n" + report.UndoHint(id, "/context restore "+id)
}

// render writes a view into a Markdown code block, so that chat UIs which
// render Markdown keep the columns aligned; a warning follows the block.
func render(write func(*strings.Builder) error, warning string) string {
	var b strings.Builder
	if err := write(&b); err != nil {
		return "ctxproxy: " + err.Error()
	}
	text := "```\n" + strings.TrimRight(b.String(), "\n") + "\n```"
	if warning != "" {
		text += "\n" + printer.Warning(warning)
	}
	return text
}

// size is /context size N and /context auto. They change num_ctx for
// every client, so they are refused when the admin API is off.
func (ib *Commands) size(sub string, args []string) string {
	if ib.AdminOff {
		return "ctxproxy: /context " + sub + " changes the context size for every client, and the admin API is off " +
			"here (ctxproxy listens beyond loopback without admin.token)"
	}
	tokens := 0
	if sub == "size" {
		n, err := strconv.Atoi(strings.ReplaceAll(args[0], ",", ""))
		if err != nil || n <= 0 {
			return fmt.Sprintf("ctxproxy: /context size takes a number of tokens, not %q", args[0])
		}
		tokens = n
	}
	if err := ib.Status.SetContextSize(tokens); err != nil {
		_, msg := ib.Sessions.Describe(err)
		return "ctxproxy: " + msg
	}
	return report.ContextSize(adminapi.ContextSize{Auto: tokens == 0, Target: tokens})
}

// statusText is /context: the status of the session, or the
// proxy's without one.
func (ib *Commands) statusText(ctx context.Context, session, model string) string {
	st := ib.Status.Report(ctx)
	f := report.Facts{Model: model, SessionID: session, Status: &st}
	warning := ""
	if session != "" && ib.Sessions.Store != nil {
		ib.Sessions.Settle(ctx, session)
		if _, d, err := ib.Sessions.Get(ctx, session); err == nil {
			warning, d.Warning = d.Warning, ""
			f.Session = &d
		}
	}
	return render(func(b *strings.Builder) error { return report.ContextStatus(b, printer, f) }, warning)
}

// memoryStatsText is /context stats: model memory, KV cache size and
// compression ratios.
func (ib *Commands) memoryStatsText(ctx context.Context, d adminapi.SessionDetail, model string) string {
	st := ib.Status.Report(ctx)
	var running []adminapi.RunningModel
	if ib.Monitor != nil {
		if lm, ok := ib.Monitor.Reading().Model(model); ok {
			running = []adminapi.RunningModel{{Name: model, Size: int64(lm.Size), SizeVRAM: int64(lm.SizeVRAM)}}
		}
	}
	f := report.Facts{Model: model, Status: &st, Session: &d}
	return render(func(b *strings.Builder) error { return report.MemoryStats(b, printer, f, running) }, "")
}

// WriteAnswer writes text as the assistant's complete answer in the
// request's dialect: Ollama JSON or an NDJSON stream ending in "done":
// true, OpenAI chat.completion or SSE chunks ending in "data: [DONE]".
// Token counts are zero: no model ran.
func WriteAnswer(w http.ResponseWriter, req *wire.Request, text string) {
	if req.Conv != nil {
		writeDialectAnswer(w, req, text)
		return
	}
	h := w.Header()
	now := time.Now()
	msg := map[string]string{"role": "assistant", "content": text}
	if req.Dialect == wire.Ollama {
		final := map[string]any{"model": req.Model, "created_at": now.UTC().Format(time.RFC3339Nano),
			"message": msg, "done": true, "done_reason": "stop", "total_duration": 0, "load_duration": 0,
			"prompt_eval_count": 0, "prompt_eval_duration": 0, "eval_count": 0, "eval_duration": 0}
		if !req.Stream {
			wire.WriteJSON(w, http.StatusOK, final)
			return
		}
		h.Set("Content-Type", "application/x-ndjson")
		first, _ := json.Marshal(map[string]any{"model": req.Model, "created_at": final["created_at"],
			"message": msg, "done": false})
		final["message"] = map[string]string{"role": "assistant", "content": ""}
		last, _ := json.Marshal(final)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append(append(append(first, '\n'), last...), '\n'))
		return
	}
	id := "chatcmpl-ctxproxy-" + randomHex(12)
	usage := map[string]int{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
	if !req.Stream {
		wire.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "chat.completion", "created": now.Unix(),
			"model": req.Model, "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}},
			"usage": usage})
		return
	}
	var opts struct {
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(req.Body, &opts)
	chunk := func(choices []any, usage any) []byte {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": now.Unix(), "model": req.Model,
			"choices": choices}
		if usage != nil {
			c["usage"] = usage
		}
		data, _ := json.Marshal(c)
		return append(append([]byte("data: "), data...), '\n', '\n')
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var out []byte
	out = append(out, chunk([]any{map[string]any{"index": 0, "delta": msg, "finish_reason": nil}}, nil)...)
	out = append(out, chunk([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}, nil)...)
	if opts.StreamOptions != nil && opts.StreamOptions.IncludeUsage {
		out = append(out, chunk([]any{}, usage)...)
	}
	out = append(out, "data: [DONE]\n\n"...)
	_, _ = w.Write(out)
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		return strings.Repeat("0", n)
	}
	return hex.EncodeToString(b)
}

// History takes ctxproxy's own exchanges out of a conversation a
// client resends whole. A chat UI keeps the in-band commands and
// ctxproxy's answers in its history; they are not for the model, and a
// clear must hold for a client that resends everything: after a "/clear"
// or "/context clear" exchange, only the leading system messages and what
// came after the clear are forwarded (the next prompt starts
// fresh). It reports whether it changed anything.
func History(msgs []rewrite.Message) ([]rewrite.Message, bool) {
	// The newest message is never taken out: a command there was answered
	// in-band before the conversation reached here.
	cut := -1
	var skip map[int]bool // most conversations have no command to skip
	for i := 0; i+1 < len(msgs)-1; i++ {
		cmd, _, ok := commandOf(&msgs[i])
		if !ok || msgs[i+1].Role != "assistant" {
			continue
		}
		if skip == nil {
			skip = map[int]bool{}
		}
		skip[i], skip[i+1] = true, true
		if cmd == "clear" || cmd == "context clear" {
			cut = i + 2
		}
		i++
	}
	if len(skip) == 0 {
		return msgs, false
	}
	lead := 0
	for lead < len(msgs) && wire.IsSystemRole(msgs[lead].Role) {
		lead++
	}
	out := make([]rewrite.Message, 0, len(msgs))
	for i := range msgs {
		switch {
		case skip[i]:
		case i < cut && i >= lead:
		default:
			out = append(out, msgs[i])
		}
	}
	return out, true
}

// writeDialectAnswer writes text as the assistant's complete answer (an
// in-band command's) in a conversation dialect's shape, streamed or not,
// by translating an Ollama answer as a backend reply is translated.
func writeDialectAnswer(w http.ResponseWriter, req *wire.Request, text string) {
	_, rt, err := wire.ToOllama(req.Dialect, req.Body, translate.RequestOptions{}, 0)
	if err != nil {
		info := translate.Info{Model: req.Model, Stream: req.Stream}
		rt = wire.TranslationFor(req.Dialect, info)
	}
	line := func(content string, done bool) []byte {
		l := map[string]any{"model": req.Model, "created_at": time.Now().UTC().Format(time.RFC3339Nano),
			"message": map[string]string{"role": "assistant", "content": content}, "done": done}
		if done {
			l["done_reason"], l["prompt_eval_count"], l["eval_count"] = "stop", 0, 0
		}
		b, _ := json.Marshal(l)
		return b
	}
	h := w.Header()
	if !rt.Streamed() {
		out, err := rt.Whole(line(text, true))
		if err != nil {
			wire.WriteError(w, req.Dialect, wire.Error{Status: http.StatusInternalServerError, Message: "ctxproxy could not write its answer"})
			return
		}
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		return
	}
	lc := rt.Lines()
	out, _ := lc.Append(nil, line(text, false))
	out, _ = lc.Append(out, line("", true))
	out, _ = lc.Finish(out)
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}
