package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxproxy/ctxproxy/config"
	"github.com/ctxproxy/ctxproxy/fleet"
)

// backends[].memory: local reads this machine's monitor, none nothing,
// a URL the ctxproxy there, with memory_token.
func TestSetMemory(t *testing.T) {
	c := config.Default()
	c.Backends = []config.Server{
		{Name: "here", URL: "http://127.0.0.1:1"},
		{Name: "off", URL: "http://127.0.0.1:2", Memory: config.MemoryNone},
		{Name: "there", URL: "http://127.0.0.1:3", Memory: "http://gpu2:11435", MemoryToken: "t0ken"},
	}
	servers, err := newServers(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	setMemory(c, servers, nil)
	if m, ok := servers[0].Memory.(fleet.Local); !ok || m.Where() != "local" {
		t.Errorf("here: memory %#v", servers[0].Memory)
	}
	if servers[1].Memory != nil {
		t.Errorf("off: memory %#v", servers[1].Memory)
	}
	r, ok := servers[2].Memory.(*fleet.Remote)
	if !ok {
		t.Fatalf("there: memory %#v", servers[2].Memory)
	}
	if r.Token != "t0ken" || r.Where() != "ctxproxy at http://gpu2:11435" || r.Loaded == nil || r.Client == nil {
		t.Errorf("there: %+v", r)
	}
}

// tokens.models_dir: auto finds Ollama's directory only for a server on
// loopback; a path is taken as given; none watches nothing.
func TestModelsDir(t *testing.T) {
	models := t.TempDir()
	if err := os.Mkdir(filepath.Join(models, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "OLLAMA_MODELS" {
			return models
		}
		return ""
	}
	c := config.Default()
	for _, tc := range []struct{ url, dir, want string }{
		{"http://127.0.0.1:11434", "auto", models},
		{"http://localhost:11434", "auto", models},
		{"http://[::1]:11434", "auto", models},
		{"http://gpu1:11434", "auto", ""},
		{"http://gpu1:11434", "/srv/ollama/models", "/srv/ollama/models"},
		{"http://127.0.0.1:11434", "none", ""},
	} {
		c.Backend.URL, c.Tokens.ModelsDir = tc.url, tc.dir
		if got := modelsDir(c, getenv); got != tc.want {
			t.Errorf("%s with %q: %q, want %q", tc.url, tc.dir, got, tc.want)
		}
	}
}
