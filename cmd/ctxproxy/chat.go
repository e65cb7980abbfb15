package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/client"
)

// "ctxproxy chat": a terminal chat through a running ctxproxy in
// accumulate mode, with seed 000's and seed 004's context commands.

const chatUsage = `Usage: ctxproxy chat [flags]

Chat with a model through a running ctxproxy. Only each new turn is sent:
ctxproxy keeps the conversation (accumulate mode) and fits it to the
model's context window. Type /help in the chat for its commands. With
stdin not a terminal, lines are read plainly, so a chat can be scripted;
replies go to stdout, warnings, notices, the status line and errors to
stderr.

Flags:
`

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
  /context stats       memory statistics: model memory, KV cache, compression
  /model [NAME]        show the model and those available, or switch to NAME
  /help                this help
  /quit                leave (or Ctrl-D)
Start a line with // to send a message that begins with /.
`

// chatCmd is "ctxproxy chat".
func chatCmd(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, chatUsage)
		fs.PrintDefaults()
	}
	proxyURL := fs.String("proxy", envOr(e, "CTXPROXY_PROXY", defaultProxy), "ctxproxy's `URL` (env CTXPROXY_PROXY)")
	model := fs.String("model", "", "the `model` to talk to (default: the session's, or the only one available)")
	session := fs.String("session", "", "the session `ID` to continue (default: a new one)")
	dialect := fs.String("dialect", client.DialectOllama, "ollama (POST /api/chat) or openai (POST /v1/chat/completions)")
	system := fs.String("system", "", "a system prompt, sent at the start of the conversation and after /clear")
	token := fs.String("token", "", "admin `token` for the context commands (env CTXPROXY_ADMIN_TOKEN)")
	apiKey := fs.String("api-key", "", "`key` the backend wants on chat requests (env CTXPROXY_API_KEY)")
	color := fs.String("color", "auto", "auto, always or never (auto follows NO_COLOR and the terminal)")
	bar := fs.Bool("status", true, "show a status line after each reply")
	history := fs.String("history", defaultHistory(), "line history `file` (\"\" keeps none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("chat takes no arguments, got %q", fs.Args())
	}
	if *dialect != client.DialectOllama && *dialect != client.DialectOpenAI {
		return fmt.Errorf("--dialect %q: want ollama or openai", *dialect)
	}
	if *token == "" {
		*token = lookupEnv(e, "CTXPROXY_ADMIN_TOKEN")
	}
	c, err := client.New(*proxyURL, *token)
	if err != nil {
		return err
	}
	c.APIKey = *apiKey
	if c.APIKey == "" {
		c.APIKey = lookupEnv(e, "CTXPROXY_API_KEY")
	}
	noColor := lookupEnv(e, "NO_COLOR")
	outColor, err := useColor(*color, noColor, isTerminal(e.stdout))
	if err != nil {
		return err
	}
	errColor, _ := useColor(*color, noColor, isTerminal(e.stderr))

	r := &repl{
		c: c, model: *model, session: *session, dialect: *dialect, system: *system, bar: *bar,
		out: e.stdout, errw: e.stderr, outP: palette{on: outColor}, errP: palette{on: errColor},
		loc: location(e), stdin: e.stdin,
	}
	var in input = &plainInput{br: bufio.NewReader(e.stdin)}
	if f, ok := e.stdin.(*os.File); ok && isTerminal(f) && isTerminal(e.stdout) {
		t, restore, err := newTerminalInput(f, e.stdout.(*os.File), *history)
		if err == nil {
			defer restore()
			in = t
			// The terminal is raw now: everything goes through it, which
			// turns "\n" into "\r\n" and keeps the prompt in place.
			r.out, r.errw, r.errP = t.t, t.t, r.outP
		}
	}
	return r.loop(ctx, in)
}

// repl is one chat: the session it talks in and how it shows things.
type repl struct {
	c       *client.Client
	session string
	model   string
	dialect string
	system  string
	// needSystem is whether the next turn carries the system prompt: at
	// the start of a conversation and after /clear, which empties it.
	needSystem bool
	bar        bool
	stdin      io.Reader
	// out gets replies and command output; errw warnings, notices, the
	// status line and errors.
	out, errw  io.Writer
	outP, errP palette
	loc        *time.Location
	// last is what ctxproxy said about the last turn, for the status line
	// when the admin API does not answer.
	last *client.Headers
	// toldNoProxy is whether the user was told that answers come without
	// ctxproxy's headers.
	toldNoProxy bool
}

// input is where lines come from: a plain reader, or a terminal with line
// editing.
type input interface {
	readLine() (string, error)
	// during runs fn, which a Ctrl-C typed meanwhile cancels.
	during(ctx context.Context, fn func(context.Context))
}

// loop reads and handles lines until /quit, end of input or ctx's end.
func (r *repl) loop(ctx context.Context, in input) error {
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
func (r *repl) start(ctx context.Context) {
	r.needSystem = r.system != ""
	if r.session == "" {
		r.session = newSessionID()
	} else if s, _, err := r.c.Session(ctx, r.session); err == nil {
		// Continuing a conversation: its system prompt is there already.
		r.needSystem = r.needSystem && s.Messages == 0
		if r.model == "" {
			r.model = s.Model
		}
	}
	if r.model == "" {
		// With one model there is nothing to choose.
		if names, err := r.c.Models(ctx, r.dialect); err == nil && len(names) == 1 {
			r.model = names[0]
		}
	}
	model := r.model
	if model == "" {
		model = "none yet (/model NAME)"
	}
	fmt.Fprintf(r.errw, "%s\n", r.errP.paint(colorDim, fmt.Sprintf("ctxproxy chat · session %s · model %s · %s · /help for commands",
		clean(r.session), clean(model), r.c.URL())))
}

// newSessionID is a fresh session id for a new conversation.
func newSessionID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "chat-" + hex.EncodeToString(b)
}

// handle acts on one line; it returns true to leave.
func (r *repl) handle(ctx context.Context, line string) bool {
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

// admin is the context command runner for this chat's session.
func (r *repl) admin() *admin {
	return &admin{c: r.c, v: view{p: r.outP, loc: r.loc}, out: r.out, stdin: r.stdin,
		session: r.session, model: r.model, repl: true, opts: contextOptions{reason: "manual"}}
}

// command runs a slash command; it returns true to leave.
func (r *repl) command(ctx context.Context, text string) bool {
	name, rest, _ := strings.Cut(text, " ")
	rest = strings.TrimSpace(rest)
	var err error
	switch name {
	case "/quit", "/exit", "/bye":
		return true
	case "/help", "/?":
		_, err = io.WriteString(r.out, chatHelp)
	case "/clear":
		if err = r.admin().run(ctx, "clear", nil); err == nil {
			r.needSystem = r.system != ""
		}
	case "/stats":
		err = r.admin().run(ctx, "show", nil)
	case "/save":
		err = r.admin().run(ctx, "snapshot", nil)
	case "/export", "/import":
		if rest == "" {
			r.fail(fmt.Errorf("%s needs a file: %s FILE", name, name))
			return false
		}
		err = r.admin().run(ctx, name[1:], []string{expandHome(unquote(rest))})
		if err == nil && name == "/import" {
			r.needSystem = false
		}
	case "/context":
		err = r.context(ctx, rest)
	case "/model":
		err = r.switchModel(ctx, rest)
	default:
		r.fail(fmt.Errorf("unknown command %s: /help lists the commands", clean(name)))
		return false
	}
	var ae *client.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && readOnly[strings.TrimSpace(name+" "+rest)] {
		// A new chat's session exists once something was sent.
		_, err = fmt.Fprintf(r.out, "Session %s is empty: nothing was sent in it yet.\n", clean(r.session))
	}
	if err != nil {
		r.fail(err)
	}
	return false
}

// readOnly are the commands that only look at the session.
var readOnly = map[string]bool{"/stats": true, "/context": true, "/context status": true,
	"/context list": true, "/context stats": true}

// fail shows an error in one line; the chat goes on.
func (r *repl) fail(err error) {
	fmt.Fprintln(r.errw, r.errP.error(strings.TrimPrefix(err.Error(), errUsage.Error()+": ")))
}

// contextCommands are seed 004 R7's /context subcommands (with
// "status", what /context alone shows).
var contextCommands = map[string]bool{"status": true, "size": true, "auto": true, "snapshot": true,
	"restore": true, "list": true, "clear": true, "compress": true, "stats": true}

// context runs "/context SUB ARGS".
func (r *repl) context(ctx context.Context, rest string) error {
	sub, args, _ := strings.Cut(rest, " ")
	if sub == "" {
		sub = "status"
	}
	if !contextCommands[sub] {
		return fmt.Errorf("unknown command /context %s: /help lists the commands", clean(sub))
	}
	err := r.admin().run(ctx, sub, strings.Fields(args))
	if err == nil {
		switch sub {
		case "clear":
			// Seed 004 R7.7: clear keeps the system prompt; ctxproxy
			// clears every message, so the next turn sends it again.
			r.needSystem = r.system != ""
		case "restore":
			r.needSystem = false
		}
	}
	return err
}

// switchModel is /model: show the model and those the backend has, or
// switch.
func (r *repl) switchModel(ctx context.Context, name string) error {
	if name != "" {
		r.model = name
		_, err := fmt.Fprintf(r.out, "Model: %s.\n", clean(name))
		return err
	}
	current := r.model
	if current == "" {
		current = "none yet"
	}
	fmt.Fprintf(r.out, "Model: %s.\n", clean(current))
	if names, err := r.c.Models(ctx, r.dialect); err == nil && len(names) > 0 {
		for i := range names {
			names[i] = clean(names[i])
		}
		fmt.Fprintf(r.out, "Available: %s.\n", strings.Join(names, ", "))
	}
	return nil
}

// turn sends one user message and shows the reply as it streams, then
// ctxproxy's warnings and notices (seed 000: after the reply, without
// blocking input) and the status line.
func (r *repl) turn(ctx context.Context, text string) {
	if r.model == "" {
		r.fail(errors.New("no model chosen: start with --model NAME or type /model NAME"))
		return
	}
	var msgs []client.Message
	if r.needSystem {
		msgs = append(msgs, client.Message{Role: "system", Content: r.system})
	}
	msgs = append(msgs, client.Message{Role: "user", Content: text})

	w := &replyWriter{w: r.out, p: r.outP}
	reply, err := r.c.Send(ctx, client.Request{Dialect: r.dialect, Model: r.model, Session: r.session, Messages: msgs}, w.show)
	w.end()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(r.errw, r.errP.paint(colorDim, "(reply interrupted)"))
			return
		}
		r.fail(err)
		return
	}
	r.needSystem = false
	h := client.ParseHeaders(reply.Header)
	r.last = &h
	if !h.Seen && !r.toldNoProxy {
		r.toldNoProxy = true
		fmt.Fprintln(r.errw, r.errP.warning("The answer came without ctxproxy's headers: is "+r.c.URL()+
			" a ctxproxy? Without one, earlier turns are not sent along."))
	}
	for _, warning := range h.Warnings {
		fmt.Fprintln(r.errw, r.errP.warning(warning))
	}
	for _, notice := range h.Notices {
		fmt.Fprintln(r.errw, r.errP.notice(notice))
	}
	if r.bar {
		if line := statusBar(r.errP, r.facts(ctx)); line != "" {
			fmt.Fprintln(r.errw, line)
		}
	}
}

// facts fetches what the status line shows; what does not come in time
// is left out.
func (r *repl) facts(ctx context.Context) facts {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	f := facts{model: r.model, head: r.last}
	var wg sync.WaitGroup
	wg.Go(func() {
		if st, _, err := r.c.Status(ctx); err == nil {
			f.status = &st
		}
	})
	wg.Go(func() {
		if s, _, err := r.c.Session(ctx, r.session); err == nil {
			f.session = &s
		}
	})
	wg.Wait()
	return f
}

// replyWriter writes a streamed reply, thinking dimmed (and left out
// without colors, so scripts get only the answer).
type replyWriter struct {
	w        io.Writer
	p        palette
	lastByte byte
	thinking bool
}

func (w *replyWriter) show(text string, thinking bool) {
	if text == "" || (thinking && !w.p.on) {
		return
	}
	if w.thinking && !thinking {
		// A blank line parts the thoughts from the answer.
		w.end()
		io.WriteString(w.w, "\n")
	}
	w.thinking = thinking
	if thinking {
		io.WriteString(w.w, w.p.paint(colorDim, text))
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
