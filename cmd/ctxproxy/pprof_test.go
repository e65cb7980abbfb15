package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

func TestRedactArgs(t *testing.T) {
	in := []string{"ctxproxy", "serve", "--backend", "http://user:s3cret@host:11434", "--backend=http://u:s3cret@h/v1",
		"-backend=https://:s3cret@h", "--listen", "127.0.0.1:11435", "http://host/a@b", "--note=x@y", "https://u:s3cret%zz@h"}
	want := []string{"ctxproxy", "serve", "--backend", "http://user:xxxxx@host:11434", "--backend=http://u:xxxxx@h/v1",
		"-backend=https://:xxxxx@h", "--listen", "127.0.0.1:11435", "http://host/a@b", "--note=x@y", "xxxxx@h"}
	if got := redactArgs(in); !slices.Equal(got, want) {
		t.Errorf("redactArgs:\n got  %q\n want %q", got, want)
	}
}

// TestPprofCmdlineRedacted: serve --pprof's /debug/pprof/cmdline shows
// the command line with the backend's password hidden, in both flag
// forms.
func TestPprofCmdlineRedacted(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	u := strings.Replace(be.URL, "http://", "http://user:s3cret-pass@", 1)
	saved := os.Args
	os.Args = []string{"ctxproxy", "serve", "--backend", u, "--backend=" + u, "--pprof", "127.0.0.1:0"}
	t.Cleanup(func() { os.Args = saved })

	_, logs, stop := startServe(t, []string{"--backend", u, "--pprof", "127.0.0.1:0"}, nil)
	defer stop()
	var addr string
	for line := range strings.Lines(logs.String()) {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "pprof listening" {
			addr = rec.Addr
		}
	}
	if addr == "" {
		t.Fatalf("no pprof address in the log:\n%s", logs)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	if strings.Contains(text, "s3cret-pass") {
		t.Errorf("cmdline shows the password: %q", text)
	}
	if strings.Count(text, "user:xxxxx@") != 2 {
		t.Errorf("cmdline does not show both backend flags redacted: %q", text)
	}
}
