package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// contextFixture is a fake proxy with two sessions: s1 (6 messages, a
// snapshot, metadata) and "team/a b", whose id must be path-escaped.
func contextFixture(t *testing.T) *fakeProxy {
	t.Helper()
	f := newFakeProxy(t)
	f.seed("s1", 2, 40)
	f.snapshotNow("s1")
	f.seed("s1", 4, 40)
	f.seed("team/a b", 2, 400)
	f.mu.Lock()
	f.sessions["s1"].metadata["project"] = "ctxproxy"
	f.sessions["s1"].metadata["priority"] = 2.0
	f.mu.Unlock()
	return f
}

// runContext runs "ctxproxy context" against f.
func runContext(f *fakeProxy, env map[string]string, stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errw bytes.Buffer
	if env == nil {
		env = map[string]string{}
	}
	env["TZ"] = "UTC"
	err = run(context.Background(), append([]string{"context", "--proxy", f.URL}, args...), envOf(env),
		strings.NewReader(stdin), &out, &errw)
	return out.String(), errw.String(), err
}

const exportJSON = `{"session_id":"elsewhere","messages":[` +
	`{"role":"system","content":"TTA Architecture Context: ...","timestamp":"2026-02-01T09:00:00Z","importance":1},` +
	`{"role":"user","content":"Implement feature X","timestamp":"2026-02-01T09:00:05Z","importance":0.9}],"metadata":{}}`

// TestContextCommands runs every "ctxproxy context" command (seed 004
// R7's, seed 003's new and add) as a table and as --json, against golden
// files.
func TestContextCommands(t *testing.T) {
	dir := t.TempDir()
	importFile := filepath.Join(dir, "import.json")
	if err := os.WriteFile(importFile, []byte(exportJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		args  []string
		stdin string
	}{
		{"status-proxy", []string{"status"}, ""},
		{"status-proxy-json", []string{"status", "--json"}, ""},
		{"status", []string{"status", "--session", "s1"}, ""},
		{"status-json", []string{"--session", "s1", "--json", "status"}, ""},
		{"show", []string{"show", "--session", "s1"}, ""},
		{"show-escaped-id", []string{"show", "--session", "team/a b"}, ""},
		{"show-json", []string{"show", "--session", "s1", "--json"}, ""},
		{"stats", []string{"stats", "--session", "s1"}, ""},
		{"stats-json", []string{"stats", "--session", "s1", "--json"}, ""},
		{"list-sessions", []string{"list"}, ""},
		{"list-sessions-json", []string{"list", "--json"}, ""},
		{"list-snapshots", []string{"list", "--session", "s1"}, ""},
		{"list-snapshots-json", []string{"list", "--session", "s1", "--json"}, ""},
		{"new", []string{"new", "--session", "s3", "--meta", "project=x", "--meta", "owner=me", "--model", "llama3.1"}, ""},
		{"new-json", []string{"new", "--session", "s3", "--json"}, ""},
		{"add", []string{"add", "--session", "s1", "--importance", "0.9", "Implement feature X"}, ""},
		{"add-json", []string{"add", "--session", "s1", "--json", "Looks", "good"}, ""},
		{"add-stdin", []string{"add", "-", "--session", "s1", "--role", "system"}, "Be brief.\n"},
		{"snapshot", []string{"snapshot", "--session", "s1"}, ""},
		{"snapshot-json", []string{"snapshot", "--session", "s1", "--json", "--reason", "manual"}, ""},
		{"restore", []string{"restore", "snap-1", "--session", "s1"}, ""},
		{"restore-json", []string{"restore", "--session", "s1", "--json", "snap-1"}, ""},
		{"clear", []string{"clear", "--session", "s1"}, ""},
		{"clear-json", []string{"clear", "--session", "s1", "--json"}, ""},
		{"clear-purge", []string{"clear", "--session", "team/a b", "--purge"}, ""},
		{"compress", []string{"compress", "--session", "s1"}, ""},
		{"compress-json", []string{"compress", "--session", "s1", "--json"}, ""},
		{"size", []string{"size"}, ""},
		{"size-set", []string{"size", "4,096"}, ""},
		{"size-set-json", []string{"size", "4096", "--json"}, ""},
		{"auto", []string{"auto"}, ""},
		{"auto-json", []string{"auto", "--json"}, ""},
		{"export", []string{"export", "--session", "s1"}, ""},
		{"export-file", []string{"export", filepath.Join(dir, "out.json"), "--session", "s1"}, ""},
		{"import", []string{"import", importFile, "--session", "s1"}, ""},
		{"import-stdin-json", []string{"import", "-", "--session", "new", "--json"}, exportJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := contextFixture(t)
			out, errOut, err := runContext(f, nil, tt.stdin, tt.args...)
			if err != nil {
				t.Fatalf("%v\nstderr: %s", err, errOut)
			}
			golden(t, "context/"+tt.name+".golden", normalize(out, dir, "$DIR"))
		})
	}
}

// TestSeed003_AddPinnedMessage: `ctxproxy context add --session S
// --importance 0.9 "Implement feature X"` pins the message with its
// importance and metadata, as seed 003's add_message does.
func TestSeed003_AddPinnedMessage(t *testing.T) {
	f := newFakeProxy(t)
	if _, errOut, err := runContext(f, nil, "", "new", "--session", "tta-feature-xyz"); err != nil {
		t.Fatalf("new: %v %s", err, errOut)
	}
	out, errOut, err := runContext(f, nil, "", "add", "--session", "tta-feature-xyz", "--importance", "0.9",
		"--meta", "type=task_request", "Implement feature X")
	if err != nil {
		t.Fatalf("add: %v %s", err, errOut)
	}
	if out != "Added 1 message to session tta-feature-xyz (1 message in all).\n" {
		t.Errorf("add printed %q", out)
	}
	got := f.stored("tta-feature-xyz")
	imp := 0.9
	want := []fakeMessage{{Role: "user", Content: "Implement feature X", Importance: &imp,
		Metadata: map[string]any{"type": "task_request"}}}
	if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == ".Timestamp"
	}, cmp.Ignore())); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
}

// TestContextErrors: usage mistakes and API errors exit non-zero with a
// message saying what is wrong.
func TestContextErrors(t *testing.T) {
	down := "http://" + freeAddr(t)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "usage: context needs a command"},
		{"unknown command", nil, []string{"frobnicate"}, `usage: unknown command "frobnicate"`},
		{"restore without id", nil, []string{"restore", "--session", "s1"}, "usage: restore takes one argument"},
		{"extra argument", nil, []string{"clear", "now", "--session", "s1"}, "usage: clear takes no arguments"},
		{"no session", nil, []string{"show"}, "usage: show needs a session: pass --session ID"},
		{"bad size", nil, []string{"size", "lots"}, `usage: size takes a number of tokens, not "lots"`},
		{"empty add", nil, []string{"add", " ", "--session", "s1"}, "usage: add needs the message's text"},
		{"bad importance", nil, []string{"add", "--importance", "2", "x"}, `invalid value "2" for flag -importance: want a number from 0 to 1`},
		{"bad meta", nil, []string{"new", "--meta", "novalue"}, `invalid value "novalue" for flag -meta: want key=value`},
		{"unknown session", nil, []string{"show", "--session", "nope"}, `session "nope" not found (HTTP 404)`},
		{"unknown snapshot", nil, []string{"restore", "snap-9", "--session", "s1"}, `snapshot "snap-9" not found (HTTP 404)`},
		{"malformed import", nil, []string{"import", "-", "--session", "s1"}, "import: want an export, an array of messages or a chat request (HTTP 400)"},
		{"missing import file", nil, []string{"import", "/nonexistent/file.json", "--session", "s1"}, "open /nonexistent/file.json: no such file or directory"},
		{"token needed", map[string]string{"token": "secret"}, []string{"list"}, "admin token required (HTTP 401): set --token or CTXPROXY_ADMIN_TOKEN"},
		{"wrong token", map[string]string{"token": "secret", "CTXPROXY_ADMIN_TOKEN": "guess"}, []string{"list"}, "admin token required (HTTP 401)"},
		{"proxy down", map[string]string{"CTXPROXY_PROXY": down}, []string{"list"}, "cannot reach ctxproxy at " + down + ": connection refused"},
		{"bad proxy URL", map[string]string{"CTXPROXY_PROXY": "ftp://x"}, []string{"list"}, `proxy URL "ftp://x": want http://host:port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := contextFixture(t)
			f.token = tt.env["token"]
			env := map[string]string{"TZ": "UTC"}
			for k, v := range tt.env {
				env[k] = v
			}
			args := []string{"context"}
			if env["CTXPROXY_PROXY"] == "" {
				args = append(args, "--proxy", f.URL)
			}
			var out, errw bytes.Buffer
			err := run(context.Background(), append(args, tt.args...), envOf(env), strings.NewReader("not json"), &out, &errw)
			if err == nil {
				t.Fatalf("no error; stdout %q", out.String())
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want %q", err, tt.want)
			}
			if out.Len() > 0 {
				t.Errorf("stdout on error: %q", out.String())
			}
		})
	}
}

// TestContextTokenAuthorizes: the token from the flag or the environment
// opens the admin API.
func TestContextTokenAuthorizes(t *testing.T) {
	f := contextFixture(t)
	f.token = "secret"
	for _, args := range [][]string{{"list", "--token", "secret"}} {
		if _, errOut, err := runContext(f, nil, "", args...); err != nil {
			t.Errorf("%v: %v %s", args, err, errOut)
		}
	}
	if _, errOut, err := runContext(f, map[string]string{"CTXPROXY_ADMIN_TOKEN": "secret"}, "", "list"); err != nil {
		t.Errorf("token from the environment: %v %s", err, errOut)
	}
}

// TestParseArgs: flags may stand before, between and after arguments;
// after "--" everything is an argument.
func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		pos     []string
		session string
		json    bool
	}{
		{"flags first", []string{"--session", "s", "restore", "id"}, []string{"restore", "id"}, "s", false},
		{"flags last", []string{"restore", "id", "--session", "s", "--json"}, []string{"restore", "id"}, "s", true},
		{"flags between", []string{"add", "--session=s", "hello", "--json", "world"}, []string{"add", "hello", "world"}, "s", true},
		{"after --", []string{"add", "--session", "s", "--", "--json", "-x"}, []string{"add", "--json", "-x"}, "s", false},
		{"stdin dash", []string{"import", "-", "--session", "s"}, []string{"import", "-"}, "s", false},
		{"none", nil, nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			session := fs.String("session", "", "")
			asJSON := fs.Bool("json", false, "")
			pos, err := parseArgs(fs, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.pos, pos); diff != "" {
				t.Errorf("arguments (-want +got):\n%s", diff)
			}
			if *session != tt.session || *asJSON != tt.json {
				t.Errorf("session %q json %v, want %q %v", *session, *asJSON, tt.session, tt.json)
			}
		})
	}
}
