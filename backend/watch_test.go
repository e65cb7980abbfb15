package backend

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFindModels: OLLAMA_MODELS when set, else the user's ~/.ollama/models,
// and only a directory that holds manifests.
func TestFindModels(t *testing.T) {
	home, custom := t.TempDir(), t.TempDir()
	env := map[string]string{"HOME": home}
	getenv := func(k string) string { return env[k] }
	if got := FindModels(getenv); got != "" {
		t.Errorf("no models anywhere: found %q", got)
	}
	own := filepath.Join(home, ".ollama", "models")
	mustMkdir(t, filepath.Join(own, "manifests"))
	if got := FindModels(getenv); got != own {
		t.Errorf("found %q, want %q", got, own)
	}
	env["OLLAMA_MODELS"] = custom
	if got := FindModels(getenv); got != "" {
		t.Errorf("OLLAMA_MODELS without manifests: found %q", got)
	}
	mustMkdir(t, filepath.Join(custom, "manifests"))
	if got := FindModels(getenv); got != custom {
		t.Errorf("found %q, want OLLAMA_MODELS %q", got, custom)
	}
}

// TestWatchModels: a model created (its host, namespace and model
// directories new), another tag of it, and a model removed are each told
// once they have been written; a file that is not a manifest's is not
// watched below the manifests' depth.
func TestWatchModels(t *testing.T) {
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	mustMkdir(t, filepath.Join(manifests, "registry.ollama.ai", "library", "old"))
	changed := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := WatchModels(ctx, dir, slog.New(slog.DiscardHandler), func() { changed <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	told := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not told", what)
		}
		for len(changed) > 0 { // one change may be told once or more
			<-changed
		}
	}
	// As Ollama writes one: MkdirAll of its directories, then the file.
	model := filepath.Join(manifests, "example.com", "team", "new")
	mustMkdir(t, model)
	mustWrite(t, filepath.Join(model, "latest"), `{"schemaVersion":2}`)
	told("a model created under a new host")
	mustWrite(t, filepath.Join(manifests, "registry.ollama.ai", "library", "old", "q4"), `{}`)
	told("a tag written in a directory there at start")
	mustWrite(t, filepath.Join(model, "small"), `{}`)
	told("a tag written in a directory made after start")
	if err := os.Remove(filepath.Join(model, "latest")); err != nil {
		t.Fatal(err)
	}
	told("a model removed")

	if err := WatchModels(ctx, t.TempDir(), slog.New(slog.DiscardHandler), func() {}); err == nil {
		t.Error("a directory without manifests is watched")
	}
}

// TestPollerPoke: a Poke lists the server's models at once, without
// waiting for the interval, and prepares the one created since.
func TestPollerPoke(t *testing.T) {
	o := newOllamaModels("a:latest")
	b := preparingBackend(t, o, Preparation{Mode: PrepareAll, Interval: time.Hour})
	pl := NewPoller(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); pl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the first listing's model prepared", func() bool { return len(o.shown()) == 1 })
	o.set("new:latest", "sha256:new")
	pl.Poke()
	waitFor(t, "the new model prepared", func() bool { return len(o.shown()) == 2 })
	wantShown(t, o, "a:latest", "new:latest")
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
