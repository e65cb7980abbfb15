package backend

// A model created or pulled straight on Ollama is prepared the moment its
// manifest is written, when ctxproxy can see Ollama's model directory:
// a listing every Preparation.Interval finds it up to that long after,
// and a person who picks the new model in a chat UI sooner would wait for
// its tokenizer.

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// manifestDepth is how deep Ollama keeps a model's manifest below
// manifests/: host, namespace, model, then the tag's file
// (registry.ollama.ai/library/qwen3/latest).
const manifestDepth = 3

// quietFor is how long the manifests stay unchanged before a change is
// told: Ollama writes a manifest in place (create, then write), and a
// pull or create of several tags writes several.
const quietFor = 100 * time.Millisecond

// modelDirs are where Ollama keeps its models when OLLAMA_MODELS does not
// say: a user's own server, then the Linux service's.
var modelDirs = []string{"~/.ollama/models", "/usr/share/ollama/.ollama/models"}

// FindModels returns the first of OLLAMA_MODELS (from getenv) and
// modelDirs that holds a manifests directory; "" when none does.
func FindModels(getenv func(string) string) string {
	dirs := modelDirs
	if d := getenv("OLLAMA_MODELS"); d != "" {
		dirs = []string{d}
	}
	for _, d := range dirs {
		if rest, ok := strings.CutPrefix(d, "~/"); ok {
			home := getenv("HOME")
			if home == "" {
				continue
			}
			d = filepath.Join(home, rest)
		}
		if fi, err := os.Stat(filepath.Join(d, "manifests")); err == nil && fi.IsDir() {
			return d
		}
	}
	return ""
}

// WatchModels calls changed once the manifests under Ollama's model
// directory dir (OLLAMA_MODELS) have been created, written or removed,
// and have then stayed as they are for a moment, until ctx ends. It
// returns an error at once when dir has no manifests directory it can
// watch. What changed is not told: the listing that follows asks the
// server, which alone says what it serves.
func WatchModels(ctx context.Context, dir string, log *slog.Logger, changed func()) error {
	root := filepath.Join(dir, "manifests")
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := addTree(w, root, 0); err != nil {
		w.Close()
		return err
	}
	go func() {
		defer w.Close()
		timer := time.NewTimer(quietFor)
		timer.Stop()
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Create) {
					// A new host, namespace or model: watch it and
					// what was made in it before the watch.
					if depth := depthOf(root, ev.Name); depth > 0 && depth <= manifestDepth {
						_ = addTree(w, ev.Name, depth)
					}
				}
				if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
					continue
				}
				timer.Reset(quietFor)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Debug("watching Ollama's models", "dir", dir, "err", err)
			case <-timer.C:
				changed()
			}
		}
	}()
	return nil
}

// addTree watches dir, found depth levels below the manifests directory,
// and the directories below it down to manifestDepth. A directory gone
// meanwhile is not an error.
func addTree(w *fsnotify.Watcher, dir string, depth int) error {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		if depth > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("not a directory")
		}
		return err
	}
	if err := w.Add(dir); err != nil {
		return err
	}
	if depth == manifestDepth {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := addTree(w, filepath.Join(dir, e.Name()), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// depthOf returns how many levels below root path is; 0 when it is not
// below it.
func depthOf(root, path string) int {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return 0
	}
	return strings.Count(rel, string(filepath.Separator)) + 1
}
