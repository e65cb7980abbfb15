package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/client"
	"golang.org/x/term"
)

// "ctxproxy context": seed 004 R7's context commands as a one-shot command
// over the admin API, sharing its commands with chat's /context.

// defaultProxy is where "ctxproxy serve" listens by default.
const defaultProxy = "http://127.0.0.1:11435"

const contextUsage = `Usage: ctxproxy context COMMAND [ARG] [flags]

Manage the sessions and context of a running ctxproxy over its admin API.

Commands:
  status          the session's context status (without --session: the proxy's)
  show            the session: messages, running token total, metadata
  stats           memory statistics: model memory, KV cache, compression
  list            the session's snapshots (without --session: all sessions)
  new             create the session, or merge --meta and --model into it
  add TEXT        pin a message to the session (--role, --importance, --meta);
                  TEXT "-" reads it from stdin
  snapshot        save a snapshot of the session now
  restore ID      restore a snapshot (the context it replaces is saved first)
  clear           clear the conversation and keep the metadata
                  (--purge removes the session and its snapshots)
  compress        trim or summarize the stored conversation now
  size [N]        show the context size, or fix it at N tokens
  auto            size the context from free VRAM again
  export [FILE]   write the conversation as JSON to FILE (default: stdout)
  import FILE     load an export, a message array or a chat request body
                  into the session ("-" reads stdin)

Example:
  ctxproxy context add --session S --importance 0.9 "Implement feature X"

Flags:
`

// contextOptions are the flags a context command may use.
type contextOptions struct {
	role       string
	importance *float64
	metadata   map[string]any
	model      string
	reason     string
	purge      bool
}

// admin runs the context commands for one session; chat's slash commands
// and "ctxproxy context" share it.
type admin struct {
	c   *client.Client
	v   view
	out io.Writer
	// stdin is read by add and import given "-".
	stdin   io.Reader
	session string
	// model is the model chat talks to ("" on the command line: the
	// session's own).
	model string
	json  bool
	opts  contextOptions
	// repl words hints as slash commands rather than command lines.
	repl bool
}

// errUsage marks a command line that does not make sense.
var errUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// run runs one context command.
func (a *admin) run(ctx context.Context, cmd string, args []string) error {
	want, known := commandArgs[cmd]
	switch {
	case !known:
		return usagef("unknown command %q", cmd)
	case len(args) < want[0] || len(args) > want[1]:
		return usagef("%s takes %s", cmd, argsText(want))
	case a.session == "" && !sessionless[cmd]:
		return usagef("%s needs a session: pass --session ID", cmd)
	}
	switch cmd {
	case "status":
		return a.status(ctx)
	case "show":
		s, raw, err := a.c.Session(ctx, a.session)
		if err != nil || a.json {
			return a.printJSON(raw, err)
		}
		return writeSessionStats(a.out, a.v, s)
	case "stats":
		return a.stats(ctx)
	case "list":
		return a.list(ctx)
	case "new":
		return a.create(ctx)
	case "add":
		return a.add(ctx, args)
	case "snapshot":
		s, raw, err := a.c.Snapshot(ctx, a.session, a.opts.reason)
		if err != nil || a.json {
			return a.printJSON(raw, err)
		}
		return a.say("Saved snapshot %s (%s, %s tokens).", clean(s.ID), plural(s.Messages, "message"), grouped(s.Tokens))
	case "restore":
		r, raw, err := a.c.Restore(ctx, a.session, args[0])
		if err != nil || a.json {
			return a.printJSON(raw, err)
		}
		if err := a.say("Restored snapshot %s: %s.", clean(args[0]), plural(r.Messages, "message")); err != nil {
			return err
		}
		return a.undoHint(r.Undo)
	case "clear":
		raw, err := a.c.Clear(ctx, a.session, a.opts.purge)
		if err != nil || a.json {
			return a.printJSON(raw, err)
		}
		if a.opts.purge {
			return a.say("Session %s removed.", clean(a.session))
		}
		// Seed 000's /clear.
		return a.say("Context cleared.")
	case "compress":
		r, raw, err := a.c.Compress(ctx, a.session)
		if err != nil || a.json {
			return a.printJSON(raw, err)
		}
		if err := a.say("Compressed: %s → %s tokens (%s dropped, %s summarized).", grouped(r.Before),
			grouped(r.After), plural(r.Dropped, "message"), grouped(r.Summarized)); err != nil {
			return err
		}
		if r.Notice != "" {
			return a.say("%s", a.v.p.notice(r.Notice))
		}
		return nil
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
func (a *admin) say(format string, args ...any) error {
	_, err := fmt.Fprintf(a.out, format+"\n", args...)
	return err
}

// printJSON prints an admin answer as it came, for scripts; with err it
// returns err and prints nothing.
func (a *admin) printJSON(raw []byte, err error) error {
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.out, "%s\n", strings.TrimSpace(string(raw)))
	return err
}

// undoHint says how to go back after import or restore replaced the
// context (ctxproxy saved it first).
func (a *admin) undoHint(undo *api.SnapshotInfo) error {
	if undo == nil || undo.ID == "" {
		return nil
	}
	if a.repl {
		return a.say("The context it replaced is snapshot %s: /context restore %s undoes this.", clean(undo.ID), clean(undo.ID))
	}
	return a.say("The context it replaced is snapshot %s: ctxproxy context restore %s --session %s undoes this.",
		clean(undo.ID), shellQuote(undo.ID), shellQuote(a.session))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@+=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(clean(s), "'", `'\''`) + "'"
}

// gather fetches the proxy status and the session at once.
func (a *admin) gather(ctx context.Context) (api.Status, []byte, api.SessionDetail, []byte, error) {
	var (
		wg               sync.WaitGroup
		st               api.Status
		s                api.SessionDetail
		rawSt, rawS      []byte
		errStatus, errSs error
	)
	wg.Go(func() { st, rawSt, errStatus = a.c.Status(ctx) })
	wg.Go(func() { s, rawS, errSs = a.c.Session(ctx, a.session) })
	wg.Wait()
	if errSs != nil {
		return st, rawSt, s, rawS, errSs
	}
	return st, rawSt, s, rawS, errStatus
}

// status is seed 004 R7.1's /context: the session's context status (all
// of R9's fields), or the proxy's status without a session.
func (a *admin) status(ctx context.Context) error {
	if a.session == "" {
		st, raw, err := a.c.Status(ctx)
		if err != nil || a.json {
			return a.printJSON(raw, err)
		}
		return writeProxyStatus(a.out, st)
	}
	st, rawSt, s, rawS, err := a.gather(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(jsonObject(map[string][]byte{"proxy": rawSt, "session": rawS}))
	}
	return writeContextStatus(a.out, a.v, facts{model: a.model, status: &st, session: &s})
}

// stats is seed 004 R7.9's /context stats.
func (a *admin) stats(ctx context.Context) error {
	st, rawSt, s, rawS, err := a.gather(ctx)
	if err != nil {
		return err
	}
	// Only Ollama says how much memory a loaded model takes (GET
	// /api/ps, passed through); elsewhere the line says it is unknown.
	var running []client.RunningModel
	var rawPS []byte
	if st.Backend.Kind == client.DialectOllama {
		if m, raw, err := a.c.RunningModels(ctx); err == nil {
			running, rawPS = m, raw
		}
	}
	if a.json {
		return a.printJSON(jsonObject(map[string][]byte{"proxy": rawSt, "session": rawS, "ps": rawPS}))
	}
	return writeMemoryStats(a.out, facts{model: a.model, status: &st, session: &s}, running)
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

// list is seed 004 R7.6's /context list: the session's snapshots, or
// every session without one.
func (a *admin) list(ctx context.Context) error {
	if a.session == "" {
		ss, raw, err := a.c.Sessions(ctx)
		if err != nil || a.json {
			return a.printJSON(raw, err)
		}
		return writeSessions(a.out, a.v, ss)
	}
	snaps, raw, err := a.c.Snapshots(ctx, a.session)
	if err != nil || a.json {
		return a.printJSON(raw, err)
	}
	return writeSnapshots(a.out, a.v, snaps)
}

// create is "new": seed 003's CLI creates a session before adding to it.
func (a *admin) create(ctx context.Context) error {
	meta := a.opts.metadata
	if meta == nil {
		meta = map[string]any{}
	}
	s, raw, err := a.c.PutSession(ctx, a.session, meta, a.opts.model)
	if err != nil || a.json {
		return a.printJSON(raw, err)
	}
	line := "Session " + clean(s.SessionID) + " is ready"
	if s.SessionID == "" {
		line = "Session " + clean(a.session) + " is ready"
	}
	if len(s.Metadata) > 0 {
		line += " (" + metadataLine(s.Metadata) + ")"
	}
	return a.say("%s.", line)
}

// add pins a message to the session, as seed 003's
// `cli.py add SESSION "Implement feature X" --importance 0.9` does.
func (a *admin) add(ctx context.Context, args []string) error {
	text := strings.Join(args, " ")
	if text == "-" {
		data, err := io.ReadAll(io.LimitReader(a.stdin, client.MaxAnswer))
		if err != nil {
			return fmt.Errorf("reading the message from stdin: %w", err)
		}
		text = strings.TrimRight(string(data), "\r\n")
	}
	if strings.TrimSpace(text) == "" {
		return usagef("add needs the message's text")
	}
	role := a.opts.role
	if role == "" {
		role = "user"
	}
	r, raw, err := a.c.AddMessages(ctx, a.session, []api.NewMessage{{
		Role: role, Content: &text, Importance: a.opts.importance, Metadata: a.opts.metadata,
	}})
	if err != nil || a.json {
		return a.printJSON(raw, err)
	}
	return a.say("Added %s to session %s (%s in all).", plural(r.Appended, "message"), clean(a.session),
		plural(r.Messages, "message"))
}

// size is /context size and /context auto (seed 004 R7.2, R7.3).
func (a *admin) size(ctx context.Context, cmd string, args []string) error {
	var (
		cs  api.ContextSize
		raw []byte
		err error
	)
	switch {
	case cmd == "auto":
		cs, raw, err = a.c.SetContextSize(ctx, 0)
	case len(args) == 0:
		cs, raw, err = a.c.ContextSize(ctx)
	default:
		n, perr := strconv.Atoi(strings.ReplaceAll(args[0], ",", ""))
		if perr != nil || n <= 0 {
			return usagef("size takes a number of tokens, not %q", args[0])
		}
		cs, raw, err = a.c.SetContextSize(ctx, n)
	}
	if err != nil || a.json {
		return a.printJSON(raw, err)
	}
	if cs.Auto {
		line := "Context size: auto, from free VRAM"
		if cs.Target > 0 {
			line += " (" + grouped(cs.Target) + " tokens now)"
		}
		return a.say("%s.", line)
	}
	return a.say("Context size: %s tokens (auto sizing off).", grouped(cs.Target))
}

// export is seed 000's /export: the conversation as seed 003's JSON.
func (a *admin) export(ctx context.Context, args []string) error {
	data, err := a.c.Export(ctx, a.session)
	if err != nil {
		return err
	}
	if len(args) == 0 || args[0] == "-" {
		return a.printJSON(data, nil)
	}
	if err := os.WriteFile(args[0], append(data, '\n'), 0o600); err != nil {
		return err
	}
	if a.json {
		return nil
	}
	var e struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(data, &e)
	return a.say("Exported %s to %s.", plural(len(e.Messages), "message"), clean(args[0]))
}

// importFile is seed 000's /import: ctxproxy checks the file and replaces
// nothing when it is malformed.
func (a *admin) importFile(ctx context.Context, file string) error {
	var (
		data []byte
		err  error
	)
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(a.stdin, client.MaxAnswer))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	r, raw, err := a.c.Import(ctx, a.session, data)
	if err != nil || a.json {
		return a.printJSON(raw, err)
	}
	if err := a.say("Imported %s into session %s.", plural(r.Imported, "message"), clean(a.session)); err != nil {
		return err
	}
	return a.undoHint(r.Undo)
}

// contextCmd is "ctxproxy context".
func contextCmd(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("context", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, contextUsage)
		fs.PrintDefaults()
	}
	session := fs.String("session", "", "the session `ID`")
	proxyURL := fs.String("proxy", envOr(e, "CTXPROXY_PROXY", defaultProxy), "ctxproxy's `URL` (env CTXPROXY_PROXY)")
	asJSON := fs.Bool("json", false, "print the admin API's JSON, for scripts")
	token := fs.String("token", "", "admin `token` (env CTXPROXY_ADMIN_TOKEN)")
	color := fs.String("color", "auto", "auto, always or never (auto follows NO_COLOR and the terminal)")
	var o contextOptions
	fs.StringVar(&o.role, "role", "user", "add: the message's `role`")
	fs.Func("importance", "add: the message's importance, 0 to 1 (above 0.8 it is kept when trimming)", func(s string) error {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f > 1 {
			return errors.New("want a number from 0 to 1")
		}
		o.importance = &f
		return nil
	})
	fs.Func("meta", "new, add: metadata `key=value` (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return errors.New("want key=value")
		}
		if o.metadata == nil {
			o.metadata = map[string]any{}
		}
		o.metadata[k] = v
		return nil
	})
	fs.StringVar(&o.model, "model", "", "new: the session's `model`")
	fs.StringVar(&o.reason, "reason", "manual", "snapshot: why it is taken")
	fs.BoolVar(&o.purge, "purge", false, "clear: remove the session and its snapshots entirely")

	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return usagef("context needs a command")
	}
	if *token == "" {
		*token = lookupEnv(e, "CTXPROXY_ADMIN_TOKEN")
	}
	c, err := client.New(*proxyURL, *token)
	if err != nil {
		return err
	}
	colors, err := useColor(*color, lookupEnv(e, "NO_COLOR"), isTerminal(e.stdout))
	if err != nil {
		return err
	}
	a := &admin{c: c, v: view{p: palette{on: colors}, loc: location(e)}, out: e.stdout, stdin: e.stdin,
		session: *session, json: *asJSON, opts: o}
	err = a.run(ctx, pos[0], pos[1:])
	if errors.Is(err, errUsage) {
		fmt.Fprintf(e.stderr, "Run \"ctxproxy context -h\" for the commands and flags.\n")
	}
	return err
}

// parseArgs parses flags wherever they stand among the arguments
// ("context restore ID --session S" as well as "context --session S
// restore ID") and returns the rest; after "--" all are arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// lookupEnv reads the environment run was given.
func lookupEnv(e env, key string) string {
	if e.getenv == nil {
		return ""
	}
	return e.getenv(key)
}

func envOr(e env, key, fallback string) string {
	if v := lookupEnv(e, key); v != "" {
		return v
	}
	return fallback
}

// location is where times are shown: $TZ when set, else the local zone.
func location(e env) *time.Location {
	if tz := strings.TrimPrefix(lookupEnv(e, "TZ"), ":"); tz != "" {
		if loc, err := time.LoadLocation(tz); err == nil {
			return loc
		}
	}
	return time.Local
}

// isTerminal says whether v is a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
