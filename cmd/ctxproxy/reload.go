package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ctxproxy/ctxproxy/config"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// reloadDebounce is how long the file must stay quiet before it is
// re-read: editors save in several steps (truncate, write, rename,
// chmod), and reading between two of them would see half a file.
const reloadDebounce = 250 * time.Millisecond

// reloader re-reads the configuration on SIGHUP and when the config file
// changes, checks the whole of it, and applies what can change at run
// time to the next request: the strategy and its thresholds, the models:
// overrides and the log level. An invalid file is rejected with every
// problem logged, and the running configuration stays.
//
// It watches the file with fsnotify rather than viper's WatchConfig:
// viper's watcher cannot be stopped, exits the process when inotify is out
// of watches, and stops for good when an editor deletes the file before
// writing it again. This one watches the directory, so atomic renames and
// Kubernetes ConfigMap symlink swaps are seen, and keeps watching.
type reloader struct {
	// load re-reads the configuration exactly as serve read it at
	// start: the same file, environment and flags.
	load func() (config.Config, string, []string)
	// trimmer builds the strategy for a configuration (the same
	// constructor serve uses at start).
	trimmer func(config.Config) (*rewrite.Trimmer, error)
	srv     *proxy.Server
	level   *slog.LevelVar
	log     *slog.Logger
	path    string // the file watched; "" when there is none
	// debounce overrides reloadDebounce (tests).
	debounce time.Duration

	mu sync.Mutex
	// running is the configuration in force: the one serve started with,
	// with the reloadable keys of each applied reload.
	running config.Config
	data    []byte // the file's contents as last loaded
}

// newReloader returns a reloader of the configuration serve loaded from
// path with cf, args and e, now running as c in srv.
func newReloader(cf configFlags, args []string, e env, c config.Config, path string, srv *proxy.Server,
	level *slog.LevelVar, log *slog.Logger) *reloader {
	rl := &reloader{
		load: func() (config.Config, string, []string) {
			c, p, problems, err := cf.load(args, e)
			if err != nil {
				problems = append(problems, err.Error())
			}
			return c, p, problems
		},
		trimmer: func(c config.Config) (*rewrite.Trimmer, error) {
			return rewrite.NewTrimmer(c.StrategyConfig(), log.With("component", "rewrite"))
		},
		srv: srv, level: level, log: log.With("component", "config"),
		path: path, running: c, debounce: reloadDebounce,
	}
	if path != "" {
		rl.data, _ = os.ReadFile(path)
	}
	return rl
}

// start listens for SIGHUP and watches the config file until ctx ends.
// SIGHUP is caught before start returns, so it never kills the process
// once serve is listening.
func (rl *reloader) start(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	changed := rl.watch(ctx)
	go func() {
		defer signal.Stop(hup)
		var timer <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				rl.log.Info("SIGHUP: reloading the configuration")
				rl.reload(true)
			case <-changed:
				timer = time.After(rl.debounce)
			case <-timer:
				timer = nil
				rl.reload(false)
			}
		}
	}()
}

// watch reports changes to the config file's directory entry on the
// returned channel until ctx ends. Without a file, or when the system
// refuses a watch, it returns a channel that never fires: SIGHUP still
// works.
func (rl *reloader) watch(ctx context.Context) <-chan struct{} {
	changed := make(chan struct{}, 1)
	if rl.path == "" {
		return changed
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(filepath.Dir(rl.path))
		if err != nil {
			w.Close()
		}
	}
	if err != nil {
		rl.log.Warn("not watching the config file; reload with SIGHUP", "path", rl.path, "err", err)
		return changed
	}
	file := filepath.Clean(rl.path)
	real, _ := filepath.EvalSymlinks(file)
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				// A ConfigMap update swaps a symlink of the directory:
				// the file's own name sees no event, its target moves.
				now, _ := filepath.EvalSymlinks(file)
				if filepath.Clean(ev.Name) != file && now == real {
					continue
				}
				real = now
				select {
				case changed <- struct{}{}:
				default:
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				rl.log.Warn("config file watch", "err", err)
			}
		}
	}()
	return changed
}

// reload re-reads and applies the configuration. Unless force is set, a
// file whose bytes have not changed is left alone (editors touch files
// without changing them).
func (rl *reloader) reload(force bool) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if !force && rl.path != "" {
		data, err := os.ReadFile(rl.path)
		if err == nil && bytes.Equal(data, rl.data) {
			return
		}
	}
	var data []byte
	if rl.path != "" {
		data, _ = os.ReadFile(rl.path)
	}
	next, path, problems := rl.load()
	var trimmer *rewrite.Trimmer
	if len(problems) == 0 {
		var err error
		if trimmer, err = rl.trimmer(next); err != nil {
			problems = append(problems, "strategy: "+err.Error())
		}
	}
	if len(problems) > 0 {
		rl.srv.ReloadRejected()
		rl.log.Error("configuration rejected; the running configuration stays in force",
			"path", path, "problems", len(problems))
		for _, p := range problems {
			rl.log.Error("config problem", "path", path, "problem", p)
		}
		rl.data = data
		return
	}
	applied, restart := config.Diff(rl.running, next)
	for _, k := range restart {
		rl.log.Warn("setting changed but needs a restart to apply; still running with the old value", "key", k)
	}
	models := next.BudgetConfig().Models
	rl.srv.Apply(proxy.Settings{Trimmer: trimmer, Models: models})
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(next.Log.Level)); err == nil && rl.level != nil {
		rl.level.Set(lvl)
	}
	reserved := rl.running.Strategy.Reserved // needs a restart
	rl.running.Strategy, rl.running.Models, rl.running.Log.Level = next.Strategy, next.Models, next.Log.Level
	rl.running.Strategy.Reserved = reserved
	rl.data = data
	rl.log.Info("configuration reloaded", "path", path, "changed", strings.Join(applied, ","),
		"strategy", next.Strategy.Mode, "threshold", next.Strategy.Threshold, "target", next.Strategy.Target,
		"log_level", next.Log.Level)
}
