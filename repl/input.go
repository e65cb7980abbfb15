package repl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/term"
)

// How the REPL reads lines: plain (piped) input, or a terminal with
// history and Esc to cancel a reply.

// plainInput reads lines from a pipe or a file.
type plainInput struct{ br *bufio.Reader }

func (p *plainInput) readLine() (string, error) {
	line, err := p.br.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func (p *plainInput) during(ctx context.Context, fn func(context.Context)) { fn(ctx) }

// DefaultHistory is the line history file under the user's cache
// directory.
func DefaultHistory() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "ctxproxy", "chat_history")
}

// terminalInput edits lines with golang.org/x/term's Terminal (arrows,
// Home/End, Ctrl-A/E/K/U/W, history on up and down) with the terminal in
// raw mode.
type terminalInput struct {
	t     *term.Terminal
	keys  *keyReader
	outFd int
	// emptyInterrupt is whether the last key at the prompt was Ctrl-C on
	// an empty line: a second one leaves.
	emptyInterrupt bool
}

// newTerminalInput puts in into raw mode; restore puts it back.
func newTerminalInput(in, out *os.File, historyFile string) (*terminalInput, func(), error) {
	state, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return nil, nil, err
	}
	keys := newKeyReader(in)
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{keys, out}, "> ")
	h := loadHistory(historyFile, 1000)
	h.skip = func() bool { return keys.interrupted }
	t.History = h
	// A pasted block arrives marked, so that it is sent as one message.
	t.SetBracketedPasteMode(true)
	return &terminalInput{t: t, keys: keys, outFd: int(out.Fd())},
		func() {
			t.SetBracketedPasteMode(false)
			_ = term.Restore(int(in.Fd()), state)
		}, nil
}

// readLine returns the next message: a line typed, or a block pasted
// (its lines joined, sent when Enter follows the paste). Ctrl-C clears
// the line, or the paste, and asks again; on an empty line it says how
// to leave, and a second one leaves. Ctrl-D on an empty line leaves.
func (t *terminalInput) readLine() (string, error) {
	if w, h, err := term.GetSize(t.outFd); err == nil {
		_ = t.t.SetSize(w, h)
	}
	var pasted []string
	for {
		line, err := t.t.ReadLine()
		if t.keys.interrupted {
			t.keys.interrupted = false
			if line != "" || len(pasted) > 0 {
				pasted, t.emptyInterrupt = nil, false
				continue
			}
			if t.emptyInterrupt {
				return "", io.EOF
			}
			t.emptyInterrupt = true
			_, _ = io.WriteString(t.t, "(Ctrl-C again, Ctrl-D or /quit leaves)\n")
			continue
		}
		t.emptyInterrupt = false
		if errors.Is(err, term.ErrPasteIndicator) {
			pasted = append(pasted, line)
			continue
		}
		if len(pasted) > 0 && err == nil {
			if line != "" {
				pasted = append(pasted, line)
			}
			return strings.Join(pasted, "\n"), nil
		}
		if errors.Is(err, io.EOF) {
			// Ctrl-D: leave the shell's prompt a line of its own.
			_, _ = io.WriteString(t.t, "\n")
		}
		return line, err
	}
}

// during runs fn while watching the keyboard: in raw mode Ctrl-C is a
// key, not a signal, so it can end the reply instead of the chat.
func (t *terminalInput) during(ctx context.Context, fn func(context.Context)) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	t.keys.watch(done, cancel)
}

// keyReader reads the terminal in its own goroutine, so that keys can be
// watched for Ctrl-C while a reply streams and kept for the next prompt.
type keyReader struct {
	ch      chan keys
	pending []byte
	err     error
	// interrupted is set when a Ctrl-C typed at the prompt was handed
	// to the Terminal as Enter (which would otherwise end the chat):
	// readLine then discards the line.
	interrupted bool
}

type keys struct {
	b   []byte
	err error
}

func newKeyReader(r io.Reader) *keyReader {
	k := &keyReader{ch: make(chan keys)}
	go func() {
		for {
			buf := make([]byte, 256)
			n, err := r.Read(buf)
			k.ch <- keys{b: buf[:n], err: err}
			if err != nil {
				return
			}
		}
	}()
	return k
}

// Read gives term.Terminal the keys typed, those typed ahead first. A
// Ctrl-C ends the line as Enter would, and is noted: term.Terminal would
// end the chat on it (ReadLine's io.EOF), as on Ctrl-D.
func (k *keyReader) Read(p []byte) (int, error) {
	for len(k.pending) == 0 {
		if k.err != nil {
			return 0, k.err
		}
		k.take(<-k.ch)
	}
	if i := bytes.IndexByte(k.pending, ctrlC); i >= 0 {
		if i == 0 {
			k.pending = k.pending[1:]
			k.interrupted = true
			p[0] = '\r'
			return 1, nil
		}
		n := copy(p, k.pending[:i]) // the keys before it first
		k.pending = k.pending[n:]
		return n, nil
	}
	n := copy(p, k.pending)
	k.pending = k.pending[n:]
	return n, nil
}

func (k *keyReader) take(in keys) {
	k.pending = append(k.pending, in.b...)
	k.err = in.err
}

// ctrlC is the byte Ctrl-C sends in raw mode.
const ctrlC = 3

// watch waits for done; a Ctrl-C typed meanwhile calls interrupt, and
// other keys wait for the next prompt.
func (k *keyReader) watch(done <-chan struct{}, interrupt func()) {
	for {
		ch := k.ch
		if k.err != nil {
			ch = nil // the reader has stopped
		}
		select {
		case <-done:
			return
		case in := <-ch:
			if i := strings.IndexByte(string(in.b), ctrlC); i >= 0 {
				interrupt()
				in.b = append(in.b[:i:i], in.b[i+1:]...)
			}
			k.take(in)
		}
	}
}

// history is the line history, kept in a file across chats.
type history struct {
	mu    sync.Mutex
	lines []string // oldest first
	max   int
	path  string
	// skip, when it reports true, keeps the line being added out: a
	// line cleared with Ctrl-C.
	skip func() bool
}

// loadHistory reads the last max lines of path; a missing or unreadable
// file starts an empty history.
func loadHistory(path string, max int) *history {
	h := &history{max: max, path: path}
	if path == "" {
		return h
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return h
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if line != "" {
			h.lines = append(h.lines, line)
		}
	}
	if len(h.lines) > max {
		h.lines = h.lines[len(h.lines)-max:]
	}
	return h
}

// Add implements term.History; it skips empty lines and repeats, and
// appends to the file (best effort: a chat works without history).
func (h *history) Add(line string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if (h.skip != nil && h.skip()) || strings.TrimSpace(line) == "" || strings.ContainsAny(line, "\n\r") ||
		(len(h.lines) > 0 && h.lines[len(h.lines)-1] == line) {
		return
	}
	h.lines = append(h.lines, line)
	if len(h.lines) > h.max {
		h.lines = h.lines[len(h.lines)-h.max:]
	}
	if h.path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(h.path), 0o700); err != nil {
		return
	}
	f, err := os.OpenFile(h.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line + "\n")
}

// Len implements term.History.
func (h *history) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lines)
}

// At implements term.History: 0 is the newest line.
func (h *history) At(i int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lines[len(h.lines)-1-i]
}
