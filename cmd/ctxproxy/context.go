package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/client"
	"github.com/ctxproxy/ctxproxy/repl"
	"github.com/ctxproxy/ctxproxy/report"
	"golang.org/x/term"
)

// "ctxproxy context": the context commands as a one-shot command
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
	var o repl.Options
	fs.StringVar(&o.Role, "role", "user", "add: the message's `role`")
	fs.Func("importance", "add: the message's importance, 0 to 1 (above 0.8 it is kept when trimming)", func(s string) error {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f > 1 {
			return errors.New("want a number from 0 to 1")
		}
		o.Importance = &f
		return nil
	})
	fs.Func("meta", "new, add: metadata `key=value` (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return errors.New("want key=value")
		}
		if o.Metadata == nil {
			o.Metadata = map[string]any{}
		}
		o.Metadata[k] = v
		return nil
	})
	fs.StringVar(&o.Model, "model", "", "new: the session's `model`")
	fs.StringVar(&o.Reason, "reason", "manual", "snapshot: why it is taken")
	fs.BoolVar(&o.Purge, "purge", false, "clear: remove the session and its snapshots entirely")

	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: context needs a command", repl.ErrUsage)
	}
	if *token == "" {
		*token = lookupEnv(e, "CTXPROXY_ADMIN_TOKEN")
	}
	c, err := client.New(*proxyURL, *token)
	if err != nil {
		return err
	}
	colors, err := report.UseColor(*color, lookupEnv(e, "NO_COLOR"), isTerminal(e.stdout))
	if err != nil {
		return err
	}
	a := &repl.Commands{Client: c, Printer: report.Printer{Palette: report.Palette{On: colors}, Loc: location(e)}, Out: e.stdout,
		Stdin: e.stdin, Session: *session, JSON: *asJSON, Options: o}
	err = a.Run(ctx, pos[0], pos[1:])
	if errors.Is(err, repl.ErrUsage) {
		// After the error, where the eye goes next.
		return fmt.Errorf("%w\nRun \"ctxproxy context -h\" for the commands and flags", err)
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
