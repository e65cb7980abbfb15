package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/ctxproxy/ctxproxy/testkit/proxytest"
)

// termSession is ctxproxy chat running in a pseudo-terminal, as a person
// runs it.
type termSession struct {
	t    *testing.T
	pty  *os.File
	cmd  *exec.Cmd
	out  syncBuffer
	done chan error
}

func startTerminalChat(t *testing.T, args ...string) *termSession {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("no pseudo-terminals on Windows")
	}
	cmd := exec.Command(os.Args[0], append([]string{"chat"}, args...)...)
	cmd.Env = append(os.Environ(), "CTXPROXYTEST_MAIN=1", "NO_COLOR=1", "TERM=xterm")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	s := &termSession{t: t, pty: f, cmd: cmd, done: make(chan error, 1)}
	go func() { _, _ = io.Copy(&s.out, f) }()
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		f.Close()
	})
	return s
}

// waitFor polls the terminal's output until it holds want, as often as
// want occurs n times.
func (s *termSession) waitFor(want string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second) // a hang guard, not a timing assertion
	for strings.Count(s.out.String(), want) < n {
		if time.Now().After(deadline) {
			s.t.Fatalf("the terminal never showed %q (%d times):\n%s", want, n, s.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitAfter polls the terminal's output until want follows the last
// occurrence of anchor: the prompt after a reply, not the "> " that a
// pasted block's echo shows before each of its lines.
func (s *termSession) waitAfter(anchor, want string) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second) // a hang guard, not a timing assertion
	for {
		out := s.out.String()
		if i := strings.LastIndex(out, anchor); i >= 0 && strings.Contains(out[i+len(anchor):], want) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the terminal never showed %q after %q:\n%s", want, anchor, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *termSession) send(keys string) {
	s.t.Helper()
	if _, err := io.WriteString(s.pty, keys); err != nil {
		s.t.Fatal(err)
	}
}

// In a terminal: a pasted block is one message, sent by the Enter after
// it; Ctrl-C clears a half-typed line (nothing is sent) and on an empty
// line says how to leave; a second Ctrl-C leaves, with the command that
// continues the session.
func TestChatInATerminal(t *testing.T) {
	p := proxytest.Start(t, proxytest.Options{Backend: fakebackend.Options{Reply: "noted"}})
	s := startTerminalChat(t, "--proxy", p.URL, "--model", "llama3.1", "--session", "pty1", "--history", "", "--status=false")
	s.waitFor("> ", 1)

	// A paste of three lines, then Enter.
	s.send("\x1b[200~first line\rsecond line\rthird line\x1b[201~")
	s.send("\r")
	s.waitAfter("noted", "> ")
	chats := chatBodies(t, p)
	if len(chats) != 1 {
		t.Fatalf("%d chat requests for one pasted block:\n%s", len(chats), s.out.String())
	}
	if got := chats[0]; got != "first line\nsecond line\nthird line" {
		t.Errorf("the pasted block arrived as %q", got)
	}

	// Ctrl-C on a half-typed line clears it.
	s.send("never sent")
	s.send("\x03")
	s.waitAfter("never sent", "> ")
	// Ctrl-C on the empty line: a hint; a second one leaves.
	s.send("\x03")
	s.waitFor("(Ctrl-C again, Ctrl-D or /quit leaves)", 1)
	s.send("\x03")
	select {
	case err := <-s.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Errorf("chat exited %d:\n%s", ee.ExitCode(), s.out.String())
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // a hang guard
		t.Fatalf("the chat did not leave on a second Ctrl-C:\n%s", s.out.String())
	}
	if n := len(chatBodies(t, p)); n != 1 {
		t.Errorf("%d chat requests; the line cleared with Ctrl-C was sent", n)
	}
	// The process has exited, but the terminal's last output may still be
	// on its way to the reader.
	s.waitFor("Session pty1: ctxproxy chat --session pty1 continues it.", 1)
}

// chatBodies are the last message's content of each chat the backend got.
func chatBodies(t *testing.T, p *proxytest.Proxy) []string {
	t.Helper()
	var out []string
	for _, r := range p.Backend.Requests() {
		if r.Path != "/api/chat" {
			continue
		}
		var body struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Messages) == 0 {
			t.Fatalf("chat body %s: %v", r.Body, err)
		}
		out = append(out, body.Messages[len(body.Messages)-1].Content)
	}
	return out
}
