package repl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/client"
	"github.com/ctxproxy/ctxproxy/report"
)

// Options are the flags a context command may use.
type Options struct {
	Role       string
	Importance *float64
	Metadata   map[string]any
	// Model is the session model "new" records.
	Model string
	// Reason is why "snapshot" takes one.
	Reason string
	// Purge makes "clear" remove the session and its snapshots.
	Purge bool
}

// Commands runs the context commands for one session over the
// admin API: "ctxproxy context" and the chat's slash commands share it.
type Commands struct {
	Client  *client.Client
	Printer report.Printer
	Out     io.Writer
	// Stdin is read by add and import given "-".
	Stdin   io.Reader
	Session string
	// Model is the model the chat talks to ("" on the command line: the
	// session's own).
	Model string
	// JSON prints the admin API's answers as they came, for scripts.
	JSON    bool
	Options Options
	// slash words hints as slash commands rather than command lines.
	slash bool
}

// ErrUsage marks a command line that does not make sense.
var ErrUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
}

// Run runs one context command.
func (a *Commands) Run(ctx context.Context, cmd string, args []string) error {
	want, known := commandArgs[cmd]
	switch {
	case !known:
		return usagef("unknown command %q", cmd)
	case len(args) < want[0] || len(args) > want[1]:
		return usagef("%s takes %s", cmd, argsText(want))
	case a.Session == "" && !sessionless[cmd]:
		return usagef("%s needs a session: pass --session ID", cmd)
	}
	switch cmd {
	case "status":
		return a.status(ctx)
	case "show":
		return a.show(ctx)
	case "stats":
		return a.stats(ctx)
	case "list":
		return a.list(ctx)
	case "new":
		return a.create(ctx)
	case "add":
		return a.add(ctx, args)
	case "snapshot":
		s, raw, err := a.Client.Snapshot(ctx, a.Session, a.Options.Reason)
		if err != nil || a.JSON {
			return a.printJSON(raw, err)
		}
		return a.say("%s", report.SnapshotSaved(s))
	case "restore":
		r, raw, err := a.Client.Restore(ctx, a.Session, args[0])
		if err != nil || a.JSON {
			return a.printJSON(raw, err)
		}
		if err := a.say("%s", report.SnapshotRestored(args[0], r.Messages)); err != nil {
			return err
		}
		return a.undoHint(r.Undo)
	case "clear":
		raw, err := a.Client.Clear(ctx, a.Session, a.Options.Purge)
		if err != nil || a.JSON {
			return a.printJSON(raw, err)
		}
		if a.Options.Purge {
			return a.say("Session %s removed.", report.Clean(a.Session))
		}
		// The chat's /clear says the same.
		return a.say("Context cleared.")
	case "compress":
		return a.Compact(ctx, "")
	case "size", "auto":
		return a.size(ctx, cmd, args)
	case "export":
		return a.export(ctx, args)
	case "import":
		return a.importFile(ctx, args[0])
	}
	return nil
}

// sessionless are the commands that work without --session.
var sessionless = map[string]bool{"status": true, "list": true, "size": true, "auto": true}

// commandArgs is how many arguments each command takes, at least and at
// most.
var commandArgs = map[string][2]int{
	"status": {0, 0}, "show": {0, 0}, "stats": {0, 0}, "list": {0, 0}, "new": {0, 0},
	"add": {1, 1 << 30}, "snapshot": {0, 0}, "restore": {1, 1}, "clear": {0, 0}, "compress": {0, 0},
	"size": {0, 1}, "auto": {0, 0}, "export": {0, 1}, "import": {1, 1},
}

func argsText(want [2]int) string {
	switch {
	case want[1] == 0:
		return "no arguments"
	case want[0] == 0:
		return "at most one argument"
	case want[0] == want[1]:
		return "one argument"
	}
	return "an argument"
}

// say prints a line of what was done.
func (a *Commands) say(format string, args ...any) error {
	_, err := fmt.Fprintf(a.Out, format+"\n", args...)
	return err
}

// printJSON prints an admin answer as it came, for scripts; with err it
// returns err and prints nothing.
func (a *Commands) printJSON(raw []byte, err error) error {
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.Out, "%s\n", strings.TrimSpace(string(raw)))
	return err
}

// undoHint says how to go back after import or restore replaced the
// context (ctxproxy saved it first).
func (a *Commands) undoHint(undo *adminapi.SnapshotInfo) error {
	if undo == nil || undo.ID == "" {
		return nil
	}
	if a.slash {
		return a.say("%s", report.UndoHint(undo.ID, "/context restore "+report.Clean(undo.ID)))
	}
	return a.say("%s", report.UndoHint(undo.ID, "ctxproxy context restore "+shellQuote(undo.ID)+" --session "+shellQuote(a.Session)))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(report.Clean(s), "'", `'\''`) + "'"
}

// gather fetches the proxy status and the session at once.
func (a *Commands) gather(ctx context.Context) (adminapi.Status, []byte, adminapi.SessionDetail, []byte, error) {
	var (
		wg               sync.WaitGroup
		st               adminapi.Status
		s                adminapi.SessionDetail
		rawSt, rawS      []byte
		errStatus, errSs error
	)
	wg.Go(func() { st, rawSt, errStatus = a.Client.Status(ctx) })
	wg.Go(func() { s, rawS, errSs = a.Client.Session(ctx, a.Session) })
	wg.Wait()
	if errSs != nil {
		return st, rawSt, s, rawS, errSs
	}
	return st, rawSt, s, rawS, errStatus
}

// status is /context: the session's context status (report.ContextStatus),
// or the proxy's status without a session.
func (a *Commands) status(ctx context.Context) error {
	if a.Session == "" {
		st, raw, err := a.Client.Status(ctx)
		if err != nil || a.JSON {
			return a.printJSON(raw, err)
		}
		return report.ProxyStatus(a.Out, st)
	}
	st, rawSt, s, rawS, err := a.gather(ctx)
	if err != nil {
		return err
	}
	if a.JSON {
		return a.printJSON(jsonObject(map[string][]byte{"proxy": rawSt, "session": rawS}))
	}
	return report.ContextStatus(a.Out, a.Printer, report.Facts{Model: a.Model, Status: &st, Session: &s})
}

// stats is /context stats: memory and compression (report.MemoryStats).
func (a *Commands) stats(ctx context.Context) error {
	st, rawSt, s, rawS, err := a.gather(ctx)
	if err != nil {
		return err
	}
	// Only Ollama says how much memory a loaded model takes (GET
	// /api/ps, passed through); elsewhere the line says it is unknown.
	var running []adminapi.RunningModel
	var rawPS []byte
	if st.Backend.Kind == client.DialectOllama {
		if m, raw, err := a.Client.RunningModels(ctx); err == nil {
			running, rawPS = m, raw
		}
	}
	if a.JSON {
		return a.printJSON(jsonObject(map[string][]byte{"proxy": rawSt, "session": rawS, "ps": rawPS}))
	}
	return report.MemoryStats(a.Out, a.Printer, report.Facts{Model: a.Model, Status: &st, Session: &s}, running)
}

// SessionStats is the chat's /stats: the session and its running token
// total, without the messages.
func (a *Commands) SessionStats(ctx context.Context) error {
	s, raw, err := a.Client.Session(ctx, a.Session)
	if err != nil || a.JSON {
		return a.printJSON(raw, err)
	}
	return report.SessionStats(a.Out, a.Printer, s)
}

// show is "ctxproxy context show": the session's stats and its stored
// messages. With --json it prints the session's object with the messages
// added as "conversation".
func (a *Commands) show(ctx context.Context) error {
	s, raw, err := a.Client.Session(ctx, a.Session)
	if err != nil {
		return a.printJSON(raw, err)
	}
	ms, rawMs, err := a.Client.Messages(ctx, a.Session)
	if err != nil {
		return a.printJSON(rawMs, err)
	}
	if a.JSON {
		var list struct {
			Messages json.RawMessage `json:"messages"`
		}
		obj := strings.TrimSpace(string(raw))
		if json.Unmarshal(rawMs, &list) != nil || len(list.Messages) == 0 || !strings.HasSuffix(obj, "}") {
			return a.printJSON(raw, nil)
		}
		joined := strings.TrimSuffix(obj, "}") + `,"conversation":` + string(list.Messages) + "}"
		return a.printJSON([]byte(joined), nil)
	}
	if err := report.SessionStats(a.Out, a.Printer, s); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(a.Out); err != nil {
		return err
	}
	return report.Messages(a.Out, a.Printer, ms.Messages)
}

// jsonObject joins admin answers into one JSON object; a missing answer
// is null.
func jsonObject(parts map[string][]byte) ([]byte, error) {
	obj := map[string]json.RawMessage{}
	for k, v := range parts {
		if len(strings.TrimSpace(string(v))) == 0 {
			v = []byte("null")
		}
		obj[k] = v
	}
	return json.Marshal(obj)
}

// list is /context list: the session's snapshots, or
// every session without one.
func (a *Commands) list(ctx context.Context) error {
	if a.Session == "" {
		ss, raw, err := a.Client.Sessions(ctx)
		if err != nil || a.JSON {
			return a.printJSON(raw, err)
		}
		return report.Sessions(a.Out, a.Printer, ss)
	}
	snaps, raw, err := a.Client.Snapshots(ctx, a.Session)
	if err != nil || a.JSON {
		return a.printJSON(raw, err)
	}
	return report.Snapshots(a.Out, a.Printer, snaps)
}

// create is "new": it creates a session, with metadata, before anything
// is added to it.
func (a *Commands) create(ctx context.Context) error {
	meta := a.Options.Metadata
	if meta == nil {
		meta = map[string]any{}
	}
	s, raw, err := a.Client.PutSession(ctx, a.Session, meta, a.Options.Model)
	if err != nil || a.JSON {
		return a.printJSON(raw, err)
	}
	line := "Session " + report.Clean(s.SessionID) + " is ready"
	if s.SessionID == "" {
		line = "Session " + report.Clean(a.Session) + " is ready"
	}
	if len(s.Metadata) > 0 {
		line += " (" + report.MetadataLine(s.Metadata) + ")"
	}
	return a.say("%s.", line)
}

// add pins a message to the session: `ctxproxy context add --session S
// --importance 0.9 "Implement feature X"`.
func (a *Commands) add(ctx context.Context, args []string) error {
	text := strings.Join(args, " ")
	if text == "-" {
		data, err := io.ReadAll(io.LimitReader(a.Stdin, client.MaxAnswer))
		if err != nil {
			return fmt.Errorf("reading the message from stdin: %w", err)
		}
		text = strings.TrimRight(string(data), "\r\n")
	}
	if strings.TrimSpace(text) == "" {
		return usagef("add needs the message's text")
	}
	role := a.Options.Role
	if role == "" {
		role = "user"
	}
	r, raw, err := a.Client.AddMessages(ctx, a.Session, []adminapi.NewMessage{{
		Role: role, Content: &text, Importance: a.Options.Importance, Metadata: a.Options.Metadata,
	}})
	if err != nil || a.JSON {
		return a.printJSON(raw, err)
	}
	return a.say("Added %s to session %s (%s in all).", report.Plural(r.Appended, "message"), report.Clean(a.Session),
		report.Plural(r.Messages, "message"))
}

// size is /context size and /context auto.
func (a *Commands) size(ctx context.Context, cmd string, args []string) error {
	var (
		cs  adminapi.ContextSize
		raw []byte
		err error
	)
	switch {
	case cmd == "auto":
		cs, raw, err = a.Client.SetContextSize(ctx, 0)
	case len(args) == 0:
		cs, raw, err = a.Client.ContextSize(ctx)
	default:
		n, perr := strconv.Atoi(strings.ReplaceAll(args[0], ",", ""))
		if perr != nil || n <= 0 {
			return usagef("size takes a number of tokens, not %q", args[0])
		}
		cs, raw, err = a.Client.SetContextSize(ctx, n)
	}
	if err != nil || a.JSON {
		return a.printJSON(raw, err)
	}
	return a.say("%s", report.ContextSize(cs))
}

// export is /export: the conversation in the admin API's export format
// (docs/admin-api.md, GET /ctxproxy/sessions/{id}/export).
func (a *Commands) export(ctx context.Context, args []string) error {
	data, err := a.Client.Export(ctx, a.Session)
	if err != nil {
		return err
	}
	if len(args) == 0 || args[0] == "-" {
		return a.printJSON(data, nil)
	}
	if err := os.WriteFile(args[0], append(data, '\n'), 0o600); err != nil {
		return err
	}
	if a.JSON {
		return nil
	}
	var e struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(data, &e)
	return a.say("Exported %s to %s.", report.Plural(len(e.Messages), "message"), report.Clean(args[0]))
}

// importFile is /import: ctxproxy checks the file and replaces
// nothing when it is malformed.
func (a *Commands) importFile(ctx context.Context, file string) error {
	var (
		data []byte
		err  error
	)
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(a.Stdin, client.MaxAnswer))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	r, raw, err := a.Client.Import(ctx, a.Session, data)
	if err != nil || a.JSON {
		return a.printJSON(raw, err)
	}
	if err := a.say("Imported %s into session %s.", report.Plural(r.Imported, "message"), report.Clean(a.Session)); err != nil {
		return err
	}
	return a.undoHint(r.Undo)
}

// Compact compresses the session now, with instructions ("" none)
// appended to the summary prompt: /compact INSTRUCTIONS, and "compress".
func (a *Commands) Compact(ctx context.Context, instructions string) error {
	if !a.JSON {
		// Ask first: a compress with nothing to do would report
		// "81 → 81 tokens", and take a snapshot for nothing.
		dr, _, err := a.Client.CompactDryRun(ctx, a.Session, instructions)
		if err == nil && dr.Dropped == 0 && dr.Summarized == 0 {
			return a.say("%s", a.Printer.Notice(dr.Notice))
		}
	}
	r, raw, err := a.Client.Compact(ctx, a.Session, instructions)
	if err != nil || a.JSON {
		return a.printJSON(raw, err)
	}
	// The notice follows on a line of its own, styled as a notice.
	counts := r
	counts.Notice = ""
	if err := a.say("%s", report.Compressed(counts)); err != nil {
		return err
	}
	if r.Notice != "" {
		return a.say("%s", a.Printer.Notice(r.Notice))
	}
	return nil
}
