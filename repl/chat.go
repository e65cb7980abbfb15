package repl

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/client"
	"github.com/ctxproxy/ctxproxy/report"
	"golang.org/x/term"
)

const chatHelp = `Commands:
  /clear               clear the conversation (the session's metadata stays)
  /stats               the session: messages, running token total
  /save                save a snapshot now
  /export FILE         write the conversation to FILE as JSON
  /import FILE         load a conversation from FILE into this session
  /context             context status: model, tokens, VRAM, KV cache, snapshots
  /context size N      fix the context size at N tokens
  /context auto        size the context from free VRAM
  /context snapshot    save a snapshot now
  /context restore ID  restore a snapshot (the context it replaces is saved)
  /context list        this session's snapshots
  /context clear       clear the conversation (the system prompt is sent again)
  /context compress    trim or summarize the stored conversation now
  /compact [TEXT]      the same, TEXT added to the summary prompt
  /context stats       memory statistics: model memory, KV cache, compression
  /model [NAME]        show the model and those available, or switch to NAME
  /help                this help
  /quit                leave (or Ctrl-D)
Start a line with // to send a message that begins with /.
`

// Chat is "ctxproxy chat": a terminal chat through a running ctxproxy in
// accumulate mode (only each new turn is sent), with the context commands
// as slash commands (/clear, /stats, /save, /export, /import, /context …).
// Set the exported fields, then
// call Run.
type Chat struct {
	Client *client.Client
	// Session is the session to continue; "" starts a new one.
	Session string
	// Model is the model to talk to; "" takes the session's, or the only
	// one the backend has.
	Model string
	// Dialect is client.DialectOllama or client.DialectOpenAI.
	Dialect string
	// System is sent at the start of the conversation and after /clear.
	System string
	// StatusBar shows a status line after each reply.
	StatusBar bool
	Stdin     io.Reader
	// Out gets replies and command output; Err warnings, notices, the
	// status line and errors.
	Out, Err               io.Writer
	OutPalette, ErrPalette report.Palette
	// Loc is where times are shown.
	Loc *time.Location

	// needSystem is whether the next turn carries the system prompt: at
	// the start of a conversation and after /clear, which empties it.
	needSystem bool
	// last is what ctxproxy said about the last turn, for the status line
	// when the admin API does not answer.
	last *adminapi.Headers
	// turns counts the replies received: leaving after one says how to
	// come back to the session.
	turns int
	// failures counts the errors shown; a scripted chat with any ends
	// in an error, so that its caller sees the failure.
	failures int
	// toldNoProxy is whether the user was told that answers come without
	// ctxproxy's headers.
	toldNoProxy bool
	// stored is the id ctxproxy stores the session under, from
	// X-Ctxproxy-Session: the id sent, scoped to the caller's credential
	// when the proxy scopes sessions (session.scope_header).
	stored string
}

// storedID is the session's id for the admin API.
func (r *Chat) storedID() string {
	if r.stored != "" {
		return r.stored
	}
	return r.Session
}

// input is where lines come from: a plain reader, or a terminal with line
// editing.
type input interface {
	readLine() (string, error)
	// during runs fn, which a Ctrl-C typed meanwhile cancels.
	during(ctx context.Context, fn func(context.Context))
}

// loop reads and handles lines until /quit, end of input or ctx's end.
func (r *Chat) loop(ctx context.Context, in input) error {
	r.start(ctx)
	for ctx.Err() == nil {
		line, err := in.readLine()
		if err != nil && !(errors.Is(err, io.EOF) && line != "") {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		quit := false
		in.during(ctx, func(ctx context.Context) { quit = r.handle(ctx, line) })
		if quit || err != nil {
			return nil
		}
	}
	return nil
}

// start picks the session and model and says where the chat goes.
func (r *Chat) start(ctx context.Context) {
	r.needSystem = r.System != ""
	if r.Session == "" {
		r.Session = newSessionID()
	} else if s, _, err := r.Client.Session(ctx, r.Session); err == nil {
		// Continuing a conversation: its system prompt is there already.
		r.needSystem = r.needSystem && s.Messages == 0
		if r.Model == "" {
			r.Model = s.Model
		}
	}
	if r.Model == "" {
		// With one model there is nothing to choose.
		if names, err := r.Client.Models(ctx, r.Dialect); err == nil && len(names) == 1 {
			r.Model = names[0]
		}
	}
	model := r.Model
	if model == "" {
		model = "none yet (/model NAME)"
	}
	fmt.Fprintf(r.Err, "%s\n", r.ErrPalette.Paint(report.Dim, fmt.Sprintf("ctxproxy chat · session %s · model %s · %s · /help for commands",
		report.Clean(r.Session), report.Clean(model), r.Client.URL())))
}

// newSessionID is a fresh session id for a new conversation.
func newSessionID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "chat-" + hex.EncodeToString(b)
}

// handle acts on one line; it returns true to leave.
func (r *Chat) handle(ctx context.Context, line string) bool {
	text := strings.TrimSpace(line)
	switch {
	case text == "":
		return false
	case strings.HasPrefix(text, "//"):
		r.turn(ctx, text[1:])
		return false
	case strings.HasPrefix(text, "/"):
		return r.command(ctx, text)
	}
	r.turn(ctx, text)
	return false
}

// commands is the context command runner for this chat's session.
func (r *Chat) commands() *Commands {
	return &Commands{Client: r.Client, Printer: report.Printer{Palette: r.OutPalette, Loc: r.Loc}, Out: r.Out, Stdin: r.Stdin,
		Session: r.storedID(), Model: r.Model, slash: true, Options: Options{Reason: "manual"}}
}

// command runs a slash command; it returns true to leave.
func (r *Chat) command(ctx context.Context, text string) bool {
	name, rest, _ := strings.Cut(text, " ")
	rest = strings.TrimSpace(rest)
	var err error
	switch name {
	case "/quit", "/exit", "/bye":
		return true
	case "/help", "/?":
		_, err = io.WriteString(r.Out, chatHelp)
	case "/clear":
		if err = r.commands().Run(ctx, "clear", nil); err == nil {
			r.needSystem = r.System != ""
		}
	case "/stats":
		err = r.commands().SessionStats(ctx)
	case "/save":
		err = r.commands().Run(ctx, "snapshot", nil)
	case "/export", "/import":
		if rest == "" {
			r.fail(fmt.Errorf("%s needs a file: %s FILE", name, name))
			return false
		}
		err = r.commands().Run(ctx, name[1:], []string{expandHome(unquote(rest))})
		if err == nil && name == "/import" {
			r.needSystem = false
		}
	case "/context":
		err = r.context(ctx, rest)
	case "/compact":
		err = r.commands().Compact(ctx, rest)
	case "/model":
		err = r.switchModel(ctx, rest)
	default:
		r.fail(fmt.Errorf("unknown command %s: /help lists the commands", report.Clean(name)))
		return false
	}
	var ae *client.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && readOnly[strings.TrimSpace(name+" "+rest)] {
		// A new chat's session exists once something was sent.
		_, err = fmt.Fprintf(r.Out, "Session %s is empty: nothing was sent in it yet.\n", report.Clean(r.Session))
	}
	if err != nil {
		r.fail(err)
	}
	return false
}

// readOnly are the commands that only look at the session.
var readOnly = map[string]bool{"/stats": true, "/context": true, "/context status": true,
	"/context list": true, "/context stats": true}

// fail shows an error in one line; the chat goes on (a scripted chat
// exits non-zero at its end).
func (r *Chat) fail(err error) {
	r.failures++
	fmt.Fprintln(r.Err, r.ErrPalette.Error(strings.TrimPrefix(err.Error(), ErrUsage.Error()+": ")))
}

// contextCommands are the /context subcommands (with "status", what
// /context alone shows).
var contextCommands = map[string]bool{"status": true, "size": true, "auto": true, "snapshot": true,
	"restore": true, "list": true, "clear": true, "compress": true, "stats": true}

// context runs "/context SUB ARGS".
func (r *Chat) context(ctx context.Context, rest string) error {
	sub, args, _ := strings.Cut(rest, " ")
	if sub == "" {
		sub = "status"
	}
	if !contextCommands[sub] {
		return fmt.Errorf("unknown command /context %s: /help lists the commands", report.Clean(sub))
	}
	err := r.commands().Run(ctx, sub, strings.Fields(args))
	if err == nil {
		switch sub {
		case "clear":
			// clear keeps the system prompt: ctxproxy clears every
			// message, so the next turn sends it again.
			r.needSystem = r.System != ""
		case "restore":
			r.needSystem = false
		}
	}
	return err
}

// switchModel is /model: show the model and those the backend has, or
// switch.
func (r *Chat) switchModel(ctx context.Context, name string) error {
	if name != "" {
		// A model the backend lists, when it answers: a typo would
		// otherwise show only at the next message, as a 404.
		if names, err := r.Client.Models(ctx, r.Dialect); err == nil && len(names) > 0 {
			found, ok := modelIn(name, names)
			if !ok {
				for i := range names {
					names[i] = report.Clean(names[i])
				}
				return fmt.Errorf("the backend has no model %s; it has %s", report.Clean(name), strings.Join(names, ", "))
			}
			name = found
		}
		r.Model = name
		_, err := fmt.Fprintf(r.Out, "Model: %s.\n", report.Clean(name))
		return err
	}
	current := r.Model
	if current == "" {
		current = "none yet"
	}
	fmt.Fprintf(r.Out, "Model: %s.\n", report.Clean(current))
	if names, err := r.Client.Models(ctx, r.Dialect); err == nil && len(names) > 0 {
		for i := range names {
			names[i] = report.Clean(names[i])
		}
		fmt.Fprintf(r.Out, "Available: %s.\n", strings.Join(names, ", "))
	}
	return nil
}

// modelIn finds name among the backend's models, as Ollama resolves a
// name without a tag: "llama3.1" is "llama3.1:latest".
func modelIn(name string, names []string) (string, bool) {
	for _, n := range names {
		if adminapi.SameModel(n, name) {
			return n, true
		}
	}
	return "", false
}

// turn sends one user message and shows the reply as it streams, then
// ctxproxy's warnings and notices (after the reply, without blocking
// input) and the status line.
func (r *Chat) turn(ctx context.Context, text string) {
	if r.Model == "" {
		r.fail(errors.New("no model chosen: start with --model NAME or type /model NAME"))
		return
	}
	var msgs []client.Message
	if r.needSystem {
		msgs = append(msgs, client.Message{Role: "system", Content: r.System})
	}
	msgs = append(msgs, client.Message{Role: "user", Content: text})

	w := &replyWriter{w: r.Out, p: r.OutPalette}
	reply, err := r.Client.Send(ctx, client.Request{Dialect: r.Dialect, Model: r.Model, Session: r.Session, Messages: msgs}, w.show)
	w.end()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(r.Err, r.ErrPalette.Paint(report.Dim, "(reply interrupted)"))
			return
		}
		r.fail(err)
		return
	}
	r.turns++
	r.needSystem = false
	h := adminapi.ParseHeaders(reply.Header)
	r.last = &h
	if h.Session != "" {
		r.stored = h.Session
	}
	if !h.Seen && !r.toldNoProxy {
		r.toldNoProxy = true
		fmt.Fprintln(r.Err, r.ErrPalette.Warning("The answer came without ctxproxy's headers: is "+r.Client.URL()+
			" a ctxproxy? Without one, earlier turns are not sent along."))
	}
	for _, warning := range h.Warnings {
		fmt.Fprintln(r.Err, r.ErrPalette.Warning(warning))
	}
	for _, notice := range h.Notices {
		fmt.Fprintln(r.Err, r.ErrPalette.Notice(notice))
	}
	if r.StatusBar {
		if line := report.StatusBar(r.ErrPalette, r.facts(ctx)); line != "" {
			fmt.Fprintln(r.Err, line)
		}
	}
}

// facts fetches what the status line shows; what does not come in time
// is left out.
func (r *Chat) facts(ctx context.Context) report.Facts {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	f := report.Facts{Model: r.Model, Head: r.last}
	var wg sync.WaitGroup
	wg.Go(func() {
		if st, _, err := r.Client.Status(ctx); err == nil {
			f.Status = &st
		}
	})
	wg.Go(func() {
		if s, _, err := r.Client.Session(ctx, r.storedID()); err == nil {
			f.Session = &s
		}
	})
	wg.Wait()
	return f
}

// replyWriter writes a streamed reply, thinking dimmed (and left out
// without colors, so scripts get only the answer).
type replyWriter struct {
	w        io.Writer
	p        report.Palette
	lastByte byte
	thinking bool
}

func (w *replyWriter) show(text string, thinking bool) {
	if text == "" || (thinking && !w.p.On) {
		return
	}
	if w.thinking && !thinking {
		// A blank line parts the thoughts from the answer.
		w.end()
		io.WriteString(w.w, "\n")
	}
	w.thinking = thinking
	if thinking {
		io.WriteString(w.w, w.p.Paint(report.Dim, text))
	} else {
		io.WriteString(w.w, text)
	}
	w.lastByte = text[len(text)-1]
}

// end closes the reply's last line.
func (w *replyWriter) end() {
	if w.lastByte != 0 && w.lastByte != '\n' {
		io.WriteString(w.w, "\n")
		w.lastByte = '\n'
	}
}

// unquote strips one pair of matching quotes around a file name.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// expandHome turns a leading ~/ into the home directory.
func expandHome(path string) string {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return path
}

// Run chats until /quit, the end of input or ctx's end. With Stdin and
// Out a terminal, lines are edited in raw mode with a line history kept
// in historyFile ("" keeps none); otherwise they are read plainly, so a
// chat can be scripted.
func (r *Chat) Run(ctx context.Context, historyFile string) error {
	var in input = &plainInput{br: bufio.NewReader(r.Stdin)}
	scripted := true
	f, ok := r.Stdin.(*os.File)
	out, outOK := r.Out.(*os.File)
	if ok && outOK && term.IsTerminal(int(f.Fd())) && term.IsTerminal(int(out.Fd())) {
		t, restore, err := newTerminalInput(f, out, historyFile)
		if err == nil {
			defer restore()
			in, scripted = t, false
			// The terminal is raw now: everything goes through it, which
			// turns "\n" into "\r\n" and keeps the prompt in place.
			r.Out, r.Err, r.ErrPalette = t.t, t.t, r.OutPalette
		}
	}
	err := r.loop(ctx, in)
	if r.turns > 0 {
		fmt.Fprintf(r.Err, "%s\n", r.ErrPalette.Paint(report.Dim, fmt.Sprintf("Session %s: ctxproxy chat --session %s continues it.",
			report.Clean(r.Session), shellQuote(r.Session))))
	}
	if err != nil {
		return err
	}
	if scripted && r.failures > 0 {
		return fmt.Errorf("chat: %d error(s), shown above", r.failures)
	}
	return nil
}
