package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// "ctxproxy help CMD" shows CMD's synopsis, what it does and only the
// flags it takes; an unknown command is an error.
func TestHelpShowsEachCommandsOwnFlags(t *testing.T) {
	for _, tc := range []struct {
		cmd       string
		has, lack []string
	}{
		{"serve", []string{"-listen", "-backend", "-log-level", "-log-format", "-config", "-pprof"}, nil},
		{"check-config", []string{"-listen", "-backend", "-log-level", "-config"}, nil},
		{"health", []string{"-listen", "-config"}, []string{"-backend", "-log-level", "-log-format"}},
		{"count", []string{"-model", "-json", "-proxy", "-local", "-config"}, []string{"-listen", "-backend", "-log-level"}},
		{"gpu", []string{"-model", "-backend", "-config", "-local"}, []string{"-listen", "-log-level"}},
		{"version", nil, []string{"Flags:"}},
		{"chat", []string{"-model", "-session"}, nil},
		{"context", []string{"-session", "Commands:"}, nil},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"help", tc.cmd}, envOf(nil), strings.NewReader(""), &stdout, &stderr)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("help %s: %v", tc.cmd, err)
		}
		out := stderr.String()
		if !strings.HasPrefix(out, "Usage: ctxproxy ") || strings.Contains(out, "Usage of ") {
			t.Errorf("help %s begins %q", tc.cmd, out[:min(len(out), 60)])
		}
		for _, f := range tc.has {
			if !strings.Contains(out, f) {
				t.Errorf("help %s lacks %s:\n%s", tc.cmd, f, out)
			}
		}
		for _, f := range tc.lack {
			if strings.Contains(out, f+" ") || strings.Contains(out, f+"\n") {
				t.Errorf("help %s lists %s, which it does not take:\n%s", tc.cmd, f, out)
			}
		}
		if tc.cmd == "version" && stdout.Len() > 0 {
			t.Errorf("help version ran version: %q", stdout.String())
		}
	}
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"help", "frobnicate"}, envOf(nil), nil, io.Discard, &stderr); err == nil ||
		!strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: %v", err)
	}
}

// count on empty input says so and fails, instead of counting an empty
// message; context's hint comes after its error, in the error.
func TestCLIEmptyInputAndHints(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"count", "--local"}, envOf(nil), strings.NewReader(" \n"), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "nothing to count: the input is empty") {
		t.Errorf("count of nothing: %v", err)
	}
	stderr.Reset()
	err = run(context.Background(), []string{"context", "frobnicate"}, envOf(nil), nil, io.Discard, &stderr)
	if err == nil || !strings.HasSuffix(err.Error(), "unknown command \"frobnicate\"\nRun \"ctxproxy context -h\" for the commands and flags") ||
		strings.Contains(stderr.String(), "Run \"ctxproxy context -h\"") {
		t.Errorf("context frobnicate: err %q, stderr %q", err, stderr.String())
	}
	if err := run(context.Background(), []string{"version", "extra"}, envOf(nil), nil, io.Discard, io.Discard); err == nil {
		t.Errorf("version took an argument")
	}
}
