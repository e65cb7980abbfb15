package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/testkit/proxytest"
)

// The context commands themselves are tested in package repl; these
// tests cover what "ctxproxy context" adds: flags wherever they stand,
// environment variables, usage errors and exit codes.

// runContext runs "ctxproxy context ARGS" with env.
func runContext(env map[string]string, stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errw bytes.Buffer
	if env == nil {
		env = map[string]string{}
	}
	env["TZ"] = "UTC"
	err = run(context.Background(), append([]string{"context"}, args...), envOf(env), strings.NewReader(stdin), &out, &errw)
	return out.String(), errw.String(), err
}

// TestContextFlags: the flags reach the command: "add" with --role,
// --importance and --meta stores the message with them, "new" with
// --model and --meta sets the session's.
func TestContextFlags(t *testing.T) {
	p := proxytest.Start(t, proxytest.Options{})
	env := map[string]string{"CTXPROXY_PROXY": p.URL}
	if out, errOut, err := runContext(env, "", "new", "--session", "tta-feature-xyz", "--model", "llama3.1", "--meta", "agent=test"); err != nil ||
		out != "Session tta-feature-xyz is ready (agent=test).\n" {
		t.Fatalf("new: %v %q %s", err, out, errOut)
	}
	out, errOut, err := runContext(env, "", "add", "--session", "tta-feature-xyz", "--importance", "0.9",
		"--meta", "type=task_request", "Implement feature X", "--role", "system")
	if err != nil || out != "Added 1 message to session tta-feature-xyz (1 message in all).\n" {
		t.Fatalf("add: %v %q %s", err, out, errOut)
	}
	s := p.Session(t, "tta-feature-xyz")
	if s.Model != "llama3.1" || s.Metadata["agent"] != "test" || len(s.Messages) != 1 {
		t.Fatalf("session %+v", s)
	}
	m := s.Messages[0]
	if m.Role != "system" || m.Content != "Implement feature X" || m.Importance == nil || *m.Importance != 0.9 ||
		m.Metadata["type"] != "task_request" {
		t.Errorf("stored %+v", m)
	}
	out, _, err = runContext(env, "", "--json", "show", "--session", "tta-feature-xyz")
	if err != nil || !strings.HasPrefix(out, `{"session_id":"tta-feature-xyz"`) {
		t.Errorf("--json before the command: %v %s", err, out)
	}
}

// TestContextErrors: usage mistakes and API errors exit non-zero with a
// message saying what is wrong, and print nothing to stdout.
func TestContextErrors(t *testing.T) {
	p := proxytest.Start(t, proxytest.Options{AdminToken: "secret"})
	down := "http://" + freeAddr(t)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "usage: context needs a command"},
		{"unknown command", nil, []string{"frobnicate"}, `usage: unknown command "frobnicate"`},
		{"no session", nil, []string{"show"}, "usage: show needs a session: pass --session ID"},
		{"bad importance", nil, []string{"add", "--importance", "2", "x"}, `invalid value "2" for flag -importance: want a number from 0 to 1`},
		{"bad meta", nil, []string{"new", "--meta", "novalue"}, `invalid value "novalue" for flag -meta: want key=value`},
		{"missing import file", nil, []string{"import", "/nonexistent/file.json", "--session", "s1"}, "open /nonexistent/file.json: no such file or directory"},
		{"token needed", map[string]string{"CTXPROXY_ADMIN_TOKEN": ""}, []string{"list"}, "(HTTP 401): set --token or CTXPROXY_ADMIN_TOKEN"},
		{"wrong token", map[string]string{"CTXPROXY_ADMIN_TOKEN": "guess"}, []string{"list"}, "wrong admin token"},
		{"unknown session", map[string]string{"CTXPROXY_ADMIN_TOKEN": "secret"}, []string{"show", "--session", "nope"}, "(HTTP 404)"},
		{"proxy down", map[string]string{"CTXPROXY_PROXY": down}, []string{"list"}, "cannot reach ctxproxy at " + down + ": connection refused"},
		{"bad proxy URL", map[string]string{"CTXPROXY_PROXY": "ftp://x"}, []string{"list"}, `proxy URL "ftp://x": want http://host:port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"CTXPROXY_PROXY": p.URL}
			for k, v := range tt.env {
				env[k] = v
			}
			out, _, err := runContext(env, "not json", tt.args...)
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

// TestContextTokenAuthorizes: the token from the flag or the environment
// opens the admin API.
func TestContextTokenAuthorizes(t *testing.T) {
	p := proxytest.Start(t, proxytest.Options{AdminToken: "secret"})
	if _, errOut, err := runContext(nil, "", "list", "--proxy", p.URL, "--token", "secret"); err != nil {
		t.Errorf("--token: %v %s", err, errOut)
	}
	if _, errOut, err := runContext(map[string]string{"CTXPROXY_ADMIN_TOKEN": "secret"}, "", "list", "--proxy", p.URL); err != nil {
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
