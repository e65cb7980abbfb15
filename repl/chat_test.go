package repl

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/client"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/term"
)

// TestChatTerminal drives the line editor as a terminal would: typed keys,
// history on the up arrow, and Ctrl-C ending a reply but not the chat.
func TestChatTerminal(t *testing.T) {
	hold := make(chan struct{})
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Reply: "a slow reply", Chunks: 3, Hold: hold})
	srv, err := proxy.New(proxy.Config{Backend: be.URL}, proxy.Deps{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	keysR, keysW := io.Pipe()
	var screen syncBuffer
	keys := newKeyReader(keysR)
	histFile := filepath.Join(t.TempDir(), "history")
	tt := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{keys, &screen}, "> ")
	tt.History = loadHistory(histFile, 10)
	c, _ := client.New(ts.URL, "")
	r := &Chat{Client: c, Session: "s1", Model: "llama3.1", Dialect: client.DialectOllama, Out: tt, Err: tt, Loc: time.UTC}
	done := make(chan error, 1)
	go func() { done <- r.loop(context.Background(), &terminalInput{t: tt, keys: keys, outFd: -1}) }()

	type_ := func(s string) {
		if _, err := keysW.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(screen.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("screen never showed %q:\n%q", what, screen.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	type_("hello\r")
	waitFor("a sl") // the first chunk; the backend holds the rest
	type_("\x03")   // Ctrl-C
	waitFor("(reply interrupted)")
	close(hold)
	be.SetOptions(fakebackend.Options{ReplyFunc: func(body []byte) string {
		var req struct{ Messages []struct{ Content string } }
		_ = json.Unmarshal(body, &req)
		return "echo: " + req.Messages[len(req.Messages)-1].Content
	}})
	type_("\x1b[A\r") // up arrow: "hello" again
	waitFor("echo: hello")
	type_("/quit\r")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the chat did not end on /quit")
	}
	if !strings.Contains(screen.String(), "\r\n") {
		t.Errorf("the terminal output has no CRLF: %q", screen.String())
	}
	data, _ := os.ReadFile(histFile)
	if string(data) != "hello\n/quit\n" {
		t.Errorf("history file = %q", data)
	}
}

// TestHistory: the line history skips blanks and repeats, keeps the last
// max lines and reads back what was written.
func TestHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "history")
	h := loadHistory(path, 3)
	for _, l := range []string{"one", "", "two", "two", "three", "four"} {
		h.Add(l)
	}
	got := []string{}
	for i := range h.Len() {
		got = append(got, h.At(i))
	}
	if diff := cmp.Diff([]string{"four", "three", "two"}, got); diff != "" {
		t.Errorf("history, newest first (-want +got):\n%s", diff)
	}
	again := loadHistory(path, 2)
	if again.Len() != 2 || again.At(0) != "four" || again.At(1) != "three" {
		t.Errorf("reloaded history: %v", again.lines)
	}
	if h := loadHistory("", 3); h.Len() != 0 {
		t.Error("a history without a file is not empty")
	}
}

// syncBuffer is a bytes.Buffer safe for the server goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{"chat-1a2b": "chat-1a2b", "team/a b": "'team/a b'", "it's": `'it'\''s'`, "": "''"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}
