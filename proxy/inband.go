package proxy

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/rewrite"

	"github.com/ctxproxy/ctxproxy/snapshots"
)

// In-band commands (commands.inband, issue 9): when the newest message of
// a chat request is a user's "/context …" command (seed 004 R7) or seed
// 000's "/clear" or "/stats", ctxproxy answers it itself, as an assistant
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

// inbandCommand returns the command in the newest message of a request:
// "clear" and "stats" for seed 000's /clear and /stats, "context SUB" for
// /context SUB, with its arguments.
func inbandCommand(req *chatRequest) (cmd string, args []string, ok bool) {
	if len(req.messages) == 0 {
		return "", nil, false
	}
	return commandOf(&req.messages[len(req.messages)-1])
}

// commandOf returns the in-band command a message is, if it is one.
func commandOf(last *rewrite.Message) (cmd string, args []string, ok bool) {
	if last.Role != "user" || len(last.Content) > 200 {
		return "", nil, false
	}
	f := strings.Fields(last.Content)
	switch {
	case len(f) == 1 && (f[0] == "/clear" || f[0] == "/stats"):
		return f[0][1:], nil, true
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

// inband answers a chat request whose newest message is an in-band
// command, and reports whether it did; Server.chat returns when it did.
func (s *Server) inband(w http.ResponseWriter, r *http.Request, ex *exchange, req *chatRequest) bool {
	cmd, args, ok := inbandCommand(req)
	if !ok {
		return false
	}
	if inbandCSRF.Check(r) != nil {
		// A page in the user's browser posting across sites must not
		// clear or restore sessions: such a request goes to the backend,
		// whose own origin checks (OLLAMA_ORIGINS) apply.
		return false
	}
	ctx := r.Context()
	text := s.runInband(ctx, ex.session, req.model, cmd, args)
	ex.status = http.StatusOK
	ex.logAttrs = append(ex.logAttrs, "inband", cmd)
	for k, v := range ex.headers {
		w.Header()[k] = v
	}
	writeAnswer(w, req, text)
	return true
}

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
  /clear               clear this session's context (its metadata stays)
  /stats               this session: messages, running token total`

// runInband runs an in-band command for session and returns the answer's
// text. model is the request's model.
func (s *Server) runInband(ctx context.Context, session, model, cmd string, args []string) string {
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
		return s.inbandStatus(ctx, session, model)
	case "context size", "context auto":
		return s.inbandSize(sub, args)
	}
	// The rest work on the request's session.
	switch {
	case session == "":
		return "ctxproxy: this request has no session: send the " + s.cfg.SessionHeader + " header"
	case s.store == nil:
		return "ctxproxy: " + errNoStore.Error()
	}
	s.flush(ctx)
	text, err := s.sessionCommand(ctx, session, model, cmd, args)
	if err != nil {
		status, msg := s.describe(err)
		if status == http.StatusNotFound && cmd != "context restore" {
			return fmt.Sprintf("Session %s is empty: nothing was sent in it yet.", session)
		}
		return "ctxproxy: " + msg
	}
	return text
}

func (s *Server) sessionCommand(ctx context.Context, session, model, cmd string, args []string) (string, error) {
	switch cmd {
	case "stats":
		_, detail, err := s.session(ctx, session)
		if err != nil {
			return "", err
		}
		return sessionStatsText(detail), nil
	case "context stats":
		_, detail, err := s.session(ctx, session)
		if err != nil {
			return "", err
		}
		return s.memoryStatsText(ctx, detail, cmp.Or(model, detail.Model)), nil
	case "context snapshot":
		info, err := s.takeSnapshot(ctx, session, snapshots.ReasonManual)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Saved snapshot %s (%s, %s tokens).", info.ID, plural(info.Messages, "message"),
			grouped(info.Tokens)), nil
	case "context restore":
		n, undo, err := s.restore(ctx, session, args[0])
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Restored snapshot %s: %s.", args[0], plural(n, "message")) + undoHint(undo), nil
	case "context list":
		if _, _, err := s.session(ctx, session); err != nil {
			return "", err
		}
		list, err := s.store.ListSnapshots(ctx, session)
		if err != nil {
			return "", err
		}
		return snapshotsText(list), nil
	case "context clear", "clear":
		// Seed 004 R7.7: /context clear keeps the system prompt; seed
		// 000's /clear removes every turn and keeps the metadata.
		keepSystem := cmd == "context clear"
		undo, err := s.clearSession(ctx, session, keepSystem, snapshots.ReasonClear)
		if err != nil {
			return "", err
		}
		text := "Context cleared."
		if keepSystem {
			text = "Context cleared (the system prompt stays)."
		}
		return text + undoHint(undo), nil
	case "context compress":
		res, err := s.compress(ctx, session)
		if err != nil {
			return "", err
		}
		if res.Undo == nil {
			return res.Notice, nil
		}
		return fmt.Sprintf("Compressed: %s → %s tokens (%s dropped, %s summarized).\n%s", grouped(res.Before),
			grouped(res.After), plural(res.Dropped, "message"), grouped(res.Summarized), res.Notice) +
			fmt.Sprintf("\nThe context before is snapshot %s: /context restore %s undoes this.", res.Undo.ID, res.Undo.ID), nil
	}
	return "", errorf(http.StatusBadRequest, "unknown command")
}

func undoHint(undo snapshots.SnapshotInfo) string {
	if undo.ID == "" {
		return ""
	}
	return fmt.Sprintf("\nThe context it replaced is snapshot %s: /context restore %s undoes this.", undo.ID, undo.ID)
}

// inbandSize is /context size N and /context auto. They change num_ctx for
// every client, so they are refused when the admin API is off.
func (s *Server) inbandSize(sub string, args []string) string {
	if s.cfg.AdminOff {
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
	if err := s.setContextSize(tokens); err != nil {
		_, msg := s.describe(err)
		return "ctxproxy: " + msg
	}
	if tokens == 0 {
		return "Context size: auto, from free VRAM."
	}
	return fmt.Sprintf("Context size: %s tokens (auto sizing off).", grouped(tokens))
}

// inbandStatus is /context: seed 004 R9's status of the session, or the
// proxy's without one.
func (s *Server) inbandStatus(ctx context.Context, session, model string) string {
	st := s.status(ctx)
	var detail *api.SessionDetail
	if session != "" && s.store != nil {
		s.flush(ctx)
		if _, d, err := s.session(ctx, session); err == nil {
			detail = &d
		}
	}
	return contextStatusText(st, session, detail, model)
}

// Text rendering: readable plain-text tables, in a Markdown code block so
// that chat UIs which render Markdown keep the columns aligned.

func block(body string) string {
	return "```\n" + strings.TrimRight(body, "\n") + "\n```"
}

// rows writes label/value rows aligned.
func rows(pairs ...[2]string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, p := range pairs {
		fmt.Fprintf(tw, "%s\t%s\n", p[0], p[1])
	}
	_ = tw.Flush()
	return b.String()
}

func row(label, value string) [2]string { return [2]string{label, value} }

// contextStatusText is /context: model, tokens of the maximum with the
// percentage, VRAM, KV cache type and memory, snapshots, auto-compression
// and its threshold, and the warning from 80% (seed 004 R9).
func contextStatusText(st api.Status, session string, d *api.SessionDetail, model string) string {
	var r [][2]string
	if session != "" {
		r = append(r, row("Session", session))
	}
	if model == "" && d != nil {
		model = d.Model
	}
	r = append(r, row("Model", cmp.Or(model, "-")))
	m, haveModel := findModel(st.Models, model)
	tokens := 0
	haveTokens := d != nil
	if d != nil {
		tokens = d.Stats.Tokens
		r = append(r, row("Tokens", UsageText(tokens, d.Stats.Sent, d.Stats.Limit)))
	} else if haveModel && m.Effective > 0 {
		r = append(r, row("Tokens", fmt.Sprintf("0 / %s (0.0%%)", grouped(m.Effective))))
	} else {
		r = append(r, row("Tokens", "unknown"))
	}
	r = append(r, row(memoryLabel(st), memoryLine(st)))
	kv := st.Context.KVQuantization
	if haveModel && m.BytesPerToken > 0 && haveTokens {
		kv += fmt.Sprintf(", %s (%s tokens × %s)", bytesIEC(float64(tokens)*float64(m.BytesPerToken)),
			grouped(tokens), bytesIEC(float64(m.BytesPerToken)))
	} else {
		kv += ", memory unknown (the model's size per token is not known yet)"
	}
	r = append(r, row("KV cache", kv))
	if d != nil {
		r = append(r, row("Snapshots", grouped(d.Snapshots)))
	} else if session != "" {
		r = append(r, row("Snapshots", "0 (nothing stored in this session yet)"))
	}
	r = append(r, row("Auto-compress", compressLine(st.Strategy)))
	size := "auto (from free VRAM)"
	if !st.Context.Auto {
		size = "fixed at " + grouped(st.Context.TargetSize) + " tokens"
	}
	if haveModel && m.NumCtx > 0 {
		size += ", num_ctx " + grouped(m.NumCtx)
	}
	r = append(r, row("Context size", size))
	text := block(rows(r...))
	if d != nil && d.Warning != "" {
		text += "\n⚠ " + d.Warning
	}
	return text
}

func compressLine(s api.StrategyStatus) string {
	if s.Mode == "" || s.Mode == "none" {
		return "off"
	}
	line := fmt.Sprintf("on at %s (%s, down to %s)", percent(s.Threshold, 0), s.Mode, percent(s.Target, 0))
	if s.EffectiveThreshold > 0 && s.EffectiveThreshold != s.Threshold {
		line += fmt.Sprintf(", now %s for memory", percent(s.EffectiveThreshold, 0))
	}
	return line
}

func memoryLabel(st api.Status) string {
	if st.GPU.Probe == "cpu" {
		return "RAM"
	}
	return "VRAM"
}

func memoryLine(st api.Status) string {
	g := st.GPU
	if g.Total == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%s / %s (%s)", gib(g.Used), gib(g.Total), percent(g.Usage, 1))
}

// findModel finds a model's status; "llama3.1" and "llama3.1:latest" are
// one model to Ollama.
func findModel(models []api.ModelStatus, name string) (api.ModelStatus, bool) {
	for _, m := range models {
		if name != "" && strings.TrimSuffix(m.Name, ":latest") == strings.TrimSuffix(name, ":latest") {
			return m, true
		}
	}
	return api.ModelStatus{}, false
}

// sessionStatsText is seed 000's /stats: the session and its running
// token total.
func sessionStatsText(d api.SessionDetail) string {
	st := d.Stats
	r := [][2]string{
		row("Session", d.SessionID),
		row("Model", cmp.Or(d.Model, "-")),
		row("Messages", grouped(d.Messages)),
		row("Tokens", UsageText(st.Tokens, st.Sent, st.Limit)),
		row("Requests", fmt.Sprintf("%s (%s prompt + %s completion tokens)", grouped(st.Requests),
			grouped(st.PromptTokens), grouped(st.CompletionTokens))),
		row("Trimmed", fmt.Sprintf("%s dropped, %s summarized", plural(st.Dropped, "message"), grouped(st.Summarized))),
		row("Snapshots", grouped(d.Snapshots)),
		row("Created", when(d.Created)),
		row("Updated", when(d.Updated)),
	}
	if len(d.Metadata) > 0 {
		r = append(r, row("Metadata", metadataLine(d.Metadata)))
	}
	text := block(rows(r...))
	if d.Warning != "" {
		text += "\n⚠ " + d.Warning
	}
	return text
}

// memoryStatsText is /context stats: model memory, KV cache size and
// compression ratios (seed 004 R7.9).
func (s *Server) memoryStatsText(ctx context.Context, d api.SessionDetail, model string) string {
	st := s.status(ctx)
	r := [][2]string{row("Model", cmp.Or(model, "-"))}
	modelMemory := "not reported by the backend"
	if s.monitor != nil {
		if lm, ok := s.monitor.Snapshot().Model(model); ok {
			modelMemory = fmt.Sprintf("%s (%s in VRAM)", bytesIEC(float64(lm.Size)), bytesIEC(float64(lm.SizeVRAM)))
		}
	}
	r = append(r, row("Model memory", modelMemory))
	g := st.GPU
	r = append(r, row(memoryLabel(st), fmt.Sprintf("%s, %s, level %s", memoryLine(st), cmp.Or(g.Probe, "-"), g.Level)))
	for _, dev := range g.Devices {
		r = append(r, row("Device", fmt.Sprintf("%s: %s / %s, %s free", cmp.Or(dev.Name, "-"), gib(dev.Used),
			gib(dev.Total), bytesIEC(float64(dev.Free)))))
	}
	stats := d.Stats
	q := st.Context.KVQuantization
	if m, ok := findModel(st.Models, model); ok && m.BytesPerToken > 0 {
		bpt := float64(m.BytesPerToken)
		r = append(r, row("KV cache", fmt.Sprintf("%s in use (%s tokens × %s, %s)", bytesIEC(float64(stats.Tokens)*bpt),
			grouped(stats.Tokens), bytesIEC(bpt), q)))
		if m.NumCtx > 0 {
			r = append(r, row("KV reserved", fmt.Sprintf("%s at num_ctx %s", bytesIEC(float64(m.NumCtx)*bpt), grouped(m.NumCtx))))
		}
	} else {
		r = append(r, row("KV cache", q+", size per token not known yet"))
	}
	r = append(r, row("Tokens", UsageText(stats.Tokens, stats.Sent, stats.Limit)))
	if stats.Tokens > 0 && stats.Sent > 0 {
		r = append(r, row("Compression", fmt.Sprintf("%s → %s tokens sent (ratio %.2f)", grouped(stats.Tokens),
			grouped(stats.Sent), float64(stats.Sent)/float64(stats.Tokens))))
	} else {
		r = append(r, row("Compression", "none yet"))
	}
	r = append(r, row("Trimmed", fmt.Sprintf("%s dropped, %s summarized", plural(stats.Dropped, "message"), grouped(stats.Summarized))))
	r = append(r, row("Requests", fmt.Sprintf("%s (%s prompt + %s completion tokens)", grouped(stats.Requests),
		grouped(stats.PromptTokens), grouped(stats.CompletionTokens))))
	trunc := grouped(stats.Truncations)
	if stats.LastTruncation != nil {
		trunc += " (last " + when(*stats.LastTruncation) + ")"
	}
	r = append(r, row("Truncations", trunc+" by the backend"))
	if m, ok := findModel(st.Models, model); ok && m.Calibration.Observations > 0 {
		r = append(r, row("Calibration", fmt.Sprintf("×%.2f over %s", m.Calibration.Ratio,
			plural(m.Calibration.Observations, "observation"))))
	}
	return block(rows(r...))
}

// snapshotsText is /context list.
func snapshotsText(list []snapshots.SnapshotInfo) string {
	if len(list) == 0 {
		return "No snapshots yet."
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tREASON\tMESSAGES\tTOKENS\tUSAGE\tSIZE")
	for _, sn := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sn.ID, when(sn.Created), cmp.Or(sn.Reason, "-"),
			grouped(sn.Messages), grouped(sn.Tokens), percent(sn.Usage, 0), bytesIEC(float64(sn.Bytes)))
	}
	_ = tw.Flush()
	return block(b.String())
}

// metadataLine writes metadata as key=value pairs sorted by key.
func metadataLine(m map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v, ok := m[k].(string)
		if !ok {
			data, _ := json.Marshal(m[k])
			v = string(data)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ", ")
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// grouped writes n with thousands separators: 131072 → "131,072".
func grouped(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return grouped(n) + " " + noun + "s"
}

func percent(f float64, decimals int) string {
	return strconv.FormatFloat(finite(f)*100, 'f', decimals, 64) + "%"
}

// bytesIEC writes a byte count in binary units: "512.0 MiB".
func bytesIEC(n float64) string {
	if n < 1024 {
		return strconv.FormatFloat(n, 'f', 0, 64) + " B"
	}
	unit := "KiB"
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		n /= 1024
		unit = u
		if n < 1024 {
			break
		}
	}
	return strconv.FormatFloat(n, 'f', 1, 64) + " " + unit
}

func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// writeAnswer writes text as the assistant's complete answer in the
// request's dialect: Ollama JSON or an NDJSON stream ending in "done":
// true, OpenAI chat.completion or SSE chunks ending in "data: [DONE]".
// Token counts are zero: no model ran.
func writeAnswer(w http.ResponseWriter, req *chatRequest, text string) {
	h := w.Header()
	now := time.Now()
	msg := map[string]string{"role": "assistant", "content": text}
	if req.dialect == Ollama {
		final := map[string]any{"model": req.model, "created_at": now.UTC().Format(time.RFC3339Nano),
			"message": msg, "done": true, "done_reason": "stop", "total_duration": 0, "load_duration": 0,
			"prompt_eval_count": 0, "prompt_eval_duration": 0, "eval_count": 0, "eval_duration": 0}
		if !req.stream {
			writeJSON(w, http.StatusOK, final)
			return
		}
		h.Set("Content-Type", "application/x-ndjson")
		first, _ := json.Marshal(map[string]any{"model": req.model, "created_at": final["created_at"],
			"message": msg, "done": false})
		final["message"] = map[string]string{"role": "assistant", "content": ""}
		last, _ := json.Marshal(final)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append(append(append(first, '\n'), last...), '\n'))
		return
	}
	id := "chatcmpl-ctxproxy-" + randomHex(12)
	usage := map[string]int{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
	if !req.stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "chat.completion", "created": now.Unix(),
			"model": req.model, "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}},
			"usage": usage})
		return
	}
	var opts struct {
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(req.body, &opts)
	chunk := func(choices []any, usage any) []byte {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": now.Unix(), "model": req.model,
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

// inbandHistory takes ctxproxy's own exchanges out of a conversation a
// client resends whole. A chat UI keeps the in-band commands and
// ctxproxy's answers in its history; they are not for the model, and a
// clear must hold for a client that resends everything: after a "/clear"
// or "/context clear" exchange, only the leading system messages and what
// came after the clear are forwarded (seed 000: the next prompt starts
// fresh). It reports whether it changed anything.
func inbandHistory(msgs []rewrite.Message) ([]rewrite.Message, bool) {
	// The newest message is never taken out: a command there was answered
	// in-band before the conversation reached here.
	cut, skip := -1, map[int]bool{}
	for i := 0; i+1 < len(msgs)-1; i++ {
		cmd, _, ok := commandOf(&msgs[i])
		if !ok || msgs[i+1].Role != "assistant" {
			continue
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
	for lead < len(msgs) && isSystemRole(msgs[lead].Role) {
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

// UsageText shows a conversation's usage of the window as two numbers,
// each named, when ctxproxy cut it: "3,200 as sent / 1,900 (168.4%);
// 1,100 forwarded (57.9%)". The ⚠ follows what the model saw, so a
// conversation cut to fit is not flagged for what it was before.
func UsageText(asSent, forwarded, limit int) string {
	pct := func(n int) float64 {
		if limit <= 0 {
			return 0
		}
		return float64(n) / float64(limit)
	}
	if forwarded <= 0 || forwarded == asSent {
		line := fmt.Sprintf("%s / %s (%s)", grouped(asSent), grouped(limit), percent(pct(asSent), 1))
		if pct(asSent) >= 0.8 {
			line += " ⚠"
		}
		return line
	}
	line := fmt.Sprintf("%s as sent / %s (%s); %s forwarded (%s)", grouped(asSent), grouped(limit),
		percent(pct(asSent), 1), grouped(forwarded), percent(pct(forwarded), 1))
	if pct(forwarded) >= 0.8 {
		line += " ⚠"
	}
	return line
}
