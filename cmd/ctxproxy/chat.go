package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/ctxproxy/ctxproxy/client"
	"github.com/ctxproxy/ctxproxy/repl"
	"github.com/ctxproxy/ctxproxy/report"
)

// "ctxproxy chat": a terminal chat through a running ctxproxy in
// accumulate mode, with the context commands as slash commands.

const chatUsage = `Usage: ctxproxy chat [flags]

Chat with a model through a running ctxproxy. Only each new turn is sent:
ctxproxy keeps the conversation (accumulate mode) and fits it to the
model's context window. Type /help in the chat for its commands. With
stdin not a terminal, lines are read plainly, so a chat can be scripted;
replies go to stdout, warnings, notices, the status line and errors to
stderr.

Flags:
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
	history := fs.String("history", repl.DefaultHistory(), "line history `file` (\"\" keeps none)")
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
	outColor, err := report.UseColor(*color, noColor, isTerminal(e.stdout))
	if err != nil {
		return err
	}
	errColor, _ := report.UseColor(*color, noColor, isTerminal(e.stderr))

	r := &repl.Chat{
		Client: c, Model: *model, Session: *session, Dialect: *dialect, System: *system, StatusBar: *bar,
		Out: e.stdout, Err: e.stderr, OutPalette: report.Palette{On: outColor}, ErrPalette: report.Palette{On: errColor},
		Loc: location(e), Stdin: e.stdin,
	}
	return r.Run(ctx, *history)
}
