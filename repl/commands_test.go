package repl

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/report"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/proxytest"
)

// contextFixture is a proxy with two sessions: s1 (6 messages, the
// snapshot snap-1 of its first 2, metadata) and "team/a b", whose id must
// be path-escaped, with 4 messages over the strategy's target of 60%.
func contextFixture(t *testing.T, o proxytest.Options) *proxytest.Proxy {
	t.Helper()
	p := start(t, o)
	converse(t, p, "s1", 1, 40)
	s := p.Session(t, "s1")
	p.SeedSnapshot(t, snapshots.Snapshot{ID: "snap-1", SessionID: "s1", Model: s.Model, Tokens: s.Stats.Tokens,
		Usage: s.Stats.Usage, Messages: s.Messages})
	converse(t, p, "s1", 1, 40)
	converse(t, p, "s1", 1, 40)
	c := newClient(t, p, o.AdminToken)
	if _, _, err := c.PutSession(context.Background(), "s1", map[string]any{"project": "ctxproxy", "priority": 2}, ""); err != nil {
		t.Fatal(err)
	}
	converse(t, p, "team/a b", 5, 540)
	return p
}

// cmdRun is one context command.
type cmdRun struct {
	cmd     string
	args    []string
	session string
	json    bool
	stdin   string
	opts    Options
	token   string
}

// runCommand runs a context command against p as "ctxproxy context"
// does.
func runCommand(t *testing.T, p *proxytest.Proxy, r cmdRun) (string, error) {
	t.Helper()
	if r.opts.Role == "" {
		r.opts.Role = "user"
	}
	if r.opts.Reason == "" {
		r.opts.Reason = "manual"
	}
	var out bytes.Buffer
	a := &Commands{Client: newClient(t, p, r.token), Printer: report.Printer{Loc: time.UTC}, Out: &out,
		Stdin: strings.NewReader(r.stdin), Session: r.session, JSON: r.json, Options: r.opts}
	err := a.Run(context.Background(), r.cmd, r.args)
	p.Flush(t)
	return out.String(), err
}

const exportJSON = `{"session_id":"elsewhere","messages":[` +
	`{"role":"system","content":"TTA Architecture Context: ...","timestamp":"2026-02-01T09:00:00Z","importance":1},` +
	`{"role":"user","content":"Implement feature X","timestamp":"2026-02-01T09:00:05Z","importance":0.9}],"metadata":{}}`

// TestContextCommands runs every context command as a table and as JSON,
// against golden files.
func TestContextCommands(t *testing.T) {
	dir := t.TempDir()
	importFile := filepath.Join(dir, "import.json")
	if err := os.WriteFile(importFile, []byte(exportJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	imp := 0.9
	tests := []struct {
		name string
		run  cmdRun
	}{
		{"status-proxy", cmdRun{cmd: "status"}},
		{"status-proxy-json", cmdRun{cmd: "status", json: true}},
		{"status", cmdRun{cmd: "status", session: "s1"}},
		{"status-json", cmdRun{cmd: "status", session: "s1", json: true}},
		{"show", cmdRun{cmd: "show", session: "s1"}},
		{"show-escaped-id", cmdRun{cmd: "show", session: "team/a b"}},
		{"show-json", cmdRun{cmd: "show", session: "s1", json: true}},
		{"stats", cmdRun{cmd: "stats", session: "s1"}},
		{"stats-json", cmdRun{cmd: "stats", session: "s1", json: true}},
		{"list-sessions", cmdRun{cmd: "list"}},
		{"list-sessions-json", cmdRun{cmd: "list", json: true}},
		{"list-snapshots", cmdRun{cmd: "list", session: "s1"}},
		{"list-snapshots-json", cmdRun{cmd: "list", session: "s1", json: true}},
		{"new", cmdRun{cmd: "new", session: "s3", opts: Options{Metadata: map[string]any{"project": "x", "owner": "me"}, Model: "llama3.1"}}},
		{"new-json", cmdRun{cmd: "new", session: "s3", json: true}},
		{"add", cmdRun{cmd: "add", session: "s1", args: []string{"Implement feature X"}, opts: Options{Importance: &imp}}},
		{"add-json", cmdRun{cmd: "add", session: "s1", json: true, args: []string{"Looks", "good"}}},
		{"add-stdin", cmdRun{cmd: "add", session: "s1", args: []string{"-"}, stdin: "Be brief.\n", opts: Options{Role: "system"}}},
		{"snapshot", cmdRun{cmd: "snapshot", session: "s1"}},
		{"snapshot-json", cmdRun{cmd: "snapshot", session: "s1", json: true}},
		{"restore", cmdRun{cmd: "restore", session: "s1", args: []string{"snap-1"}}},
		{"restore-json", cmdRun{cmd: "restore", session: "s1", json: true, args: []string{"snap-1"}}},
		{"clear", cmdRun{cmd: "clear", session: "s1"}},
		{"clear-json", cmdRun{cmd: "clear", session: "s1", json: true}},
		{"clear-purge", cmdRun{cmd: "clear", session: "team/a b", opts: Options{Purge: true}}},
		{"compress", cmdRun{cmd: "compress", session: "team/a b"}},
		{"compress-json", cmdRun{cmd: "compress", session: "team/a b", json: true}},
		{"size", cmdRun{cmd: "size"}},
		{"size-set", cmdRun{cmd: "size", args: []string{"4,096"}}},
		{"size-set-json", cmdRun{cmd: "size", args: []string{"4096"}, json: true}},
		{"auto", cmdRun{cmd: "auto"}},
		{"auto-json", cmdRun{cmd: "auto", json: true}},
		{"export", cmdRun{cmd: "export", session: "s1"}},
		{"export-file", cmdRun{cmd: "export", session: "s1", args: []string{filepath.Join(dir, "out.json")}}},
		{"import", cmdRun{cmd: "import", session: "s1", args: []string{importFile}}},
		{"import-stdin-json", cmdRun{cmd: "import", session: "new", json: true, args: []string{"-"}, stdin: exportJSON}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := contextFixture(t, proxytest.Options{})
			out, err := runCommand(t, p, tt.run)
			if err != nil {
				t.Fatalf("%v\nstdout: %s", err, out)
			}
			golden(t, "context/"+tt.name+".golden", stable(out, nil, dir, "$DIR", p.BackendURL, "$BACKEND"))
		})
	}
}

// TestContextAddPinsWithImportance: `ctxproxy context add --session S
// --importance 0.9 "Implement feature X"` pins the message with its
// importance and metadata.
func TestContextAddPinsWithImportance(t *testing.T) {
	p := start(t, proxytest.Options{})
	if _, err := runCommand(t, p, cmdRun{cmd: "new", session: "tta-feature-xyz"}); err != nil {
		t.Fatalf("new: %v", err)
	}
	imp := 0.9
	out, err := runCommand(t, p, cmdRun{cmd: "add", session: "tta-feature-xyz", args: []string{"Implement feature X"},
		opts: Options{Importance: &imp, Metadata: map[string]any{"type": "task_request"}}})
	if err != nil {
		t.Fatalf("add: %v", err)
	}
	if out != "Added 1 message to session tta-feature-xyz (1 message in all).\n" {
		t.Errorf("add printed %q", out)
	}
	got := p.Session(t, "tta-feature-xyz").Messages
	want := []snapshots.Message{{Role: "user", Content: "Implement feature X", Importance: &imp,
		Metadata: map[string]any{"type": "task_request"}}}
	if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool {
		s := p.Last().String()
		return s == ".Timestamp" || s == ".Raw"
	}, cmp.Ignore())); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
}

// TestCommandErrors: commands that do not make sense and the admin API's
// refusals come back as errors saying what is wrong, with nothing
// printed.
func TestCommandErrors(t *testing.T) {
	tests := []struct {
		name  string
		run   cmdRun
		token string // the proxy's admin token
		want  string
	}{
		{"unknown command", cmdRun{cmd: "frobnicate"}, "", `usage: unknown command "frobnicate"`},
		{"restore without id", cmdRun{cmd: "restore", session: "s1"}, "", "usage: restore takes one argument"},
		{"extra argument", cmdRun{cmd: "clear", session: "s1", args: []string{"now"}}, "", "usage: clear takes no arguments"},
		{"no session", cmdRun{cmd: "show"}, "", "usage: show needs a session: pass --session ID"},
		{"bad size", cmdRun{cmd: "size", args: []string{"lots"}}, "", `usage: size takes a number of tokens, not "lots"`},
		{"size out of range", cmdRun{cmd: "size", args: []string{"100"}}, "", "outside context.min_size"},
		{"empty add", cmdRun{cmd: "add", session: "s1", args: []string{" "}}, "", "usage: add needs the message's text"},
		{"unknown session", cmdRun{cmd: "show", session: "nope"}, "", `(HTTP 404)`},
		{"unknown snapshot", cmdRun{cmd: "restore", session: "s1", args: []string{"snap-9"}}, "", `(HTTP 404)`},
		{"malformed import", cmdRun{cmd: "import", session: "s1", args: []string{"-"}, stdin: "not json"}, "", "(HTTP 400)"},
		{"import without role", cmdRun{cmd: "import", session: "s1", args: []string{"-"}, stdin: `{"messages": [{"content": "no role"}]}`},
			"", `malformed import: messages[0]: "role" missing or not a string (HTTP 400)`},
		{"missing import file", cmdRun{cmd: "import", session: "s1", args: []string{"/nonexistent/file.json"}}, "",
			"open /nonexistent/file.json: no such file or directory"},
		{"token needed", cmdRun{cmd: "list"}, "secret", "(HTTP 401)"},
		{"wrong token", cmdRun{cmd: "list", token: "guess"}, "secret", "wrong admin token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, proxytest.Options{AdminToken: tt.token})
			converse(t, p, "s1", 1, 40)
			out, err := runCommand(t, p, tt.run)
			if err == nil {
				t.Fatalf("no error; stdout %q", out)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want %q", err, tt.want)
			}
			if out != "" {
				t.Errorf("stdout on error: %q", out)
			}
		})
	}
}

// TestCommandsWithToken: the admin token opens the admin API.
func TestCommandsWithToken(t *testing.T) {
	p := contextFixture(t, proxytest.Options{AdminToken: "secret"})
	out, err := runCommand(t, p, cmdRun{cmd: "list", token: "secret"})
	if err != nil || !strings.Contains(out, "team/a b") {
		t.Errorf("list with the token: %v\n%s", err, out)
	}
}
