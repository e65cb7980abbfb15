package main

import (
	"flag"
	"fmt"
	"strings"
)

// The help ctxproxy prints: the list of commands, and each command's
// synopsis, summary and flags.

const usage = `ctxproxy keeps every chat request inside the model's context window.

Usage:
  ctxproxy [serve] [flags]       run the proxy (the default)
  ctxproxy chat [flags]          chat with a model through a running ctxproxy
  ctxproxy context CMD [flags]   manage a running ctxproxy's sessions and context
  ctxproxy check-config [flags]  check the configuration and print every problem
  ctxproxy health [flags]        exit 0 when the proxy at --listen answers (for container health checks)
  ctxproxy count [--model M] [--json] [FILE|-]
                                 tokens of a chat request body (any dialect) or plain text
  ctxproxy gpu [--model M] [--json]
                                 detected memory, and the num_ctx ctxproxy would pick for a model
  ctxproxy version               print the version

Run "ctxproxy help COMMAND" (or "ctxproxy COMMAND -h") for a command's flags.
`

// commandHelp is each command's synopsis and what it does, for "ctxproxy
// help CMD" and "ctxproxy CMD -h" (chat and context have their own).
var commandHelp = map[string]struct{ synopsis, summary string }{
	"serve": {"ctxproxy [serve] [flags]",
		"Runs the proxy: clients talk to --listen as they would to the backend, and every chat request is made to fit the model's context window."},
	"check-config": {"ctxproxy check-config [flags]",
		"Loads the configuration as serve would (file, environment, flags) and prints every problem at once. Exits 1 when there is any."},
	"health": {"ctxproxy health [--listen ADDR] [--config FILE]",
		"Exits 0 when the ctxproxy at --listen answers its health check, 1 otherwise: a health check for containers without curl."},
	"count": {"ctxproxy count [flags] [FILE|-]",
		"Prints the tokens of a chat request body (Ollama, OpenAI, Responses or Messages) or of plain text, per message and in total, against the model's limit. Reads FILE, or standard input."},
	"gpu": {"ctxproxy gpu [flags]",
		"Prints the memory ctxproxy sees and, with --model, the num_ctx it would choose for the model and why."},
	"version": {"ctxproxy version", "Prints ctxproxy's version."},
}

// setUsage makes fs's usage the help of its command.
func setUsage(fs *flag.FlagSet, e env) {
	h := commandHelp[fs.Name()]
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: %s\n\n%s\n", h.synopsis, wrapText(h.summary, 72))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprint(e.stderr, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
}

// wrapText breaks s into lines of at most width characters, at spaces.
func wrapText(s string, width int) string {
	var b strings.Builder
	line := 0
	for i, w := range strings.Fields(s) {
		if i > 0 && line+1+len(w) > width {
			b.WriteByte('\n')
			line = 0
		} else if i > 0 {
			b.WriteByte(' ')
			line++
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}
