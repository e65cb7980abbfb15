package main

import (
	"path/filepath"
	"slices"

	"github.com/ctxproxy/ctxproxy/config"
	"github.com/ctxproxy/ctxproxy/modelinfo"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/snapshots"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"

	"github.com/ctxproxy/ctxproxy/proxy"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

// env is what a command gets from the process: tests call run with their
// own.
type env struct {
	environ []string // NAME=value pairs, as os.Environ gives them
	getenv  func(string) string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

// getenvOf looks variables up in environ; the last of a name wins, as
// os.Getenv's does.
func getenvOf(environ []string) func(string) string {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok {
			vars[name] = value
		}
	}
	return func(name string) string { return vars[name] }
}

// run is ctxproxy's whole program; main only wires it to the process.
func run(ctx context.Context, args []string, environ []string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := env{environ: environ, getenv: getenvOf(environ), stdin: stdin, stdout: stdout, stderr: stderr}
	cmd := "serve"
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
		// The commands first: serve's flags are one "ctxproxy serve -h" away.
		_, err := io.WriteString(stdout, usage)
		return err
	case len(args) > 1 && args[0] == "help":
		// "ctxproxy help CMD" is "ctxproxy CMD -h".
		if _, ok := commandHelp[args[1]]; !ok && args[1] != "chat" && args[1] != "context" {
			fmt.Fprint(stderr, usage)
			return fmt.Errorf("help: unknown command %q", args[1])
		}
		return run(ctx, []string{args[1], "-h"}, environ, stdin, stdout, stderr)
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, e)
	case "chat":
		return chatCmd(ctx, args, e)
	case "context":
		return contextCmd(ctx, args, e)
	case "check-config":
		return checkConfig(args, e)
	case "health":
		return health(ctx, args, e)
	case "count":
		return count(args, e)
	case "gpu":
		return gpuCmd(ctx, args, e)
	case "version":
		fs := flag.NewFlagSet("version", flag.ContinueOnError)
		fs.SetOutput(stderr)
		setUsage(fs, e)
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			fs.Usage()
			return fmt.Errorf("version takes no arguments, got %q", fs.Args())
		}
		_, err := fmt.Fprintf(stdout, "ctxproxy %s\n", versionString())
		return err
	case "help", "-h", "--help":
		_, err := io.WriteString(stdout, usage)
		return err
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func versionString() string {
	v := version
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}

// configFlags are the flags every config-reading command takes.
type configFlags struct {
	fs   *flag.FlagSet
	path *string
}

// configFlagDocs are the flags that set configuration keys, with their
// defaults and help; a command declares the ones it reads.
var configFlagDocs = []struct{ name, def, help string }{
	{"listen", "127.0.0.1:11435", "address to listen on"},
	{"backend", "http://127.0.0.1:11434", "URL of the Ollama or OpenAI-compatible server"},
	{"log-level", "info", "debug, info, warn or error"},
	{"log-format", "auto", "auto (colored text on a terminal, JSON otherwise), text or json"},
}

// allConfigFlags are the names of configFlagDocs, for serve and
// check-config.
var allConfigFlags = []string{"listen", "backend", "log-level", "log-format"}

// newConfigFlags declares --config and, of --listen, --backend,
// --log-level and --log-format, the ones named, on a new flag set whose
// usage is the command's help (commandHelp).
func newConfigFlags(name string, e env, flags ...string) configFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	setUsage(fs, e)
	cf := configFlags{fs: fs}
	cf.path = fs.String("config", "", "config file (default ./ctxproxy.yaml when it exists)")
	for _, f := range configFlagDocs {
		if slices.Contains(flags, f.name) {
			fs.String(f.name, f.def, f.help)
		}
	}
	return cf
}

// flagKeys maps flags to the config keys they set.
var flagKeys = map[string]string{
	"listen":     "listen",
	"backend":    "backend.url",
	"log-level":  "log.level",
	"log-format": "log.format",
}

// load parses args and loads the configuration. Only flags given on the
// command line override the file and the environment.
func (cf configFlags) load(args []string, e env) (config.Config, string, []string, error) {
	if err := cf.fs.Parse(args); err != nil {
		return config.Config{}, "", nil, err
	}
	set := map[string]string{}
	cf.fs.Visit(func(f *flag.Flag) {
		if key, ok := flagKeys[f.Name]; ok {
			set[key] = f.Value.String()
		}
	})
	path := *cf.path
	if path == "" && e.getenv != nil {
		path = e.getenv("CTXPROXY_CONFIG")
	}
	c, used, problems := config.Load(config.LoadOptions{Path: path, Getenv: e.getenv, Flags: set})
	return c, used, problems, nil
}

func checkConfig(args []string, e env) error {
	cf := newConfigFlags("check-config", e, allConfigFlags...)
	c, path, problems, err := cf.load(args, e)
	if err != nil {
		return err
	}
	if path == "" {
		path = "(no file: defaults, environment and flags)"
	}
	for _, w := range config.UnknownEnv(e.environ) {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
	if len(problems) > 0 {
		fmt.Fprintf(e.stderr, "%s: %d problem(s):\n", path, len(problems))
		for _, p := range problems {
			fmt.Fprintf(e.stderr, "  - %s\n", p)
		}
		return config.ErrInvalid
	}
	_, err = fmt.Fprintf(e.stdout, "%s: ok (listen %s, backend %s, strategy %s)\n", path, c.Listen, backendsText(c), c.Strategy.Mode)
	return err
}

// backendsText names the servers ctxproxy forwards to, for a line of
// text: the one URL, or each server's name and URL.
func backendsText(c config.Config) string {
	ss := c.Servers()
	if len(c.Backends) == 0 {
		return config.RedactURL(ss[0].URL)
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.Name + "=" + config.RedactURL(s.URL)
	}
	return strings.Join(parts, ", ")
}

// newLogger builds the process logger: tint for a terminal, JSON otherwise.
// It sets level to c.Level; a configuration reload changes it later.
func newLogger(c config.Log, w io.Writer, level *slog.LevelVar) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(c.Level))
	if level == nil {
		level = new(slog.LevelVar)
	}
	level.Set(l)
	format := c.Format
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			format = "text"
		}
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	noColor := true
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) && os.Getenv("NO_COLOR") == "" {
		noColor = false
	}
	return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: noColor}))
}

func serve(ctx context.Context, args []string, e env) error {
	cf := newConfigFlags("serve", e, allConfigFlags...)
	pprofAddr := cf.fs.String("pprof", "", "serve Go's profiler (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off when empty")
	c, path, problems, err := cf.load(args, e)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(e.stderr, "config: %s\n", p)
		}
		return config.ErrInvalid
	}
	level := new(slog.LevelVar)
	log := newLogger(c.Log, e.stderr, level)
	for _, w := range config.UnknownEnv(e.environ) {
		log.Warn(w)
	}

	var srv *proxy.Server
	sys, err := build(ctx, c, log, hooks{
		summaries: func(d time.Duration, err error) { srv.ObserveSummary(d, err) },
	})
	if err != nil {
		return err
	}
	defer sys.store.Close()
	srv, err = proxy.New(proxyConfig(c, versionString()), sys.deps, log)
	if err != nil {
		return err
	}
	if proxyConfig(c, versionString()).AdminOff {
		log.Warn("admin API off: ctxproxy listens beyond loopback and admin.token is not set; set admin.token to turn it on",
			"listen", c.Listen)
	}
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	go sys.monitor.Run(bg)
	for _, p := range sys.pollers {
		go p.Run(bg)
	}
	watchModels(bg, c, sys.pollers, log.With("component", "backend"))
	go sys.router.Watch(bg, c.Backend.ProbeInterval)
	if rs, ok := sys.store.(*snapshots.RedisStore); ok {
		// Replicas on one Redis learn the calibration of their counts
		// together, so that each counts a request alike.
		go sessions.ShareCalibration(bg, sys.deps.Tokens, snapshots.NewFeed(rs, "calibration"), log.With("component", "budget"))
	}
	if sys.deps.Store != nil {
		go retain(bg, sys.store, snapshots.Retention{TTL: c.Snapshots.TTL, MaxSessions: c.Snapshots.MaxSessions,
			MaxBytes: int64(c.Snapshots.MaxBytes)},
			srv.Registry(), log)
	}
	// SIGHUP and config file changes apply to the next request.
	watched := path
	if watched == "" {
		// No file yet: watch for ./ctxproxy.yaml, so one created after
		// start is picked up like a change.
		watched, _ = filepath.Abs(config.DefaultFile)
	}
	rl := newReloader(cf, args, e, c, watched, srv, level, log)
	rl.trimmer = sys.newTrimmer
	rl.start(bg)
	if *pprofAddr != "" {
		if err := servePprof(bg, *pprofAddr, log); err != nil {
			return fmt.Errorf("pprof: %w", err)
		}
	}

	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft limit tied to the body budget makes the garbage
		// collector work harder before the heap grows past what the
		// budget implies, so peak memory follows limits.body_memory
		// rather than the number of clients. GOMEMLIMIT overrides it.
		debug.SetMemoryLimit(memoryLimit(int64(c.Limits.BodyMemory)))
	}
	if os.Getenv("GOGC") == "" {
		// Every chat request allocates its body and the decoded list of
		// its messages, while the heap that stays (caches, the sessions
		// in use) is small: at Go's default the collector runs every few
		// dozen requests and takes a fifth of the CPU of a 100 KB chat.
		// Collecting at three times the live heap instead of twice
		// halves that for some tens of MB more; the soft limit above
		// still caps the heap. GOGC overrides it.
		debug.SetGCPercent(gcPercent)
	}
	conns := newConnCap(c.Limits.MaxConnections, srv.Registry())
	hs := &http.Server{
		Handler:           srv,
		ConnState:         conns.track,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No ReadTimeout or WriteTimeout: a streamed answer may take as
		// long as the model needs.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	log.Info("ctxproxy listening", "addr", ln.Addr().String(), "backend", backendsText(c),
		"config", path, "version", versionString())
	startupChecklist(ctx, c, sys, log)

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests", "grace", c.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("grace period over; closing remaining connections", "err", err)
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	stopBG()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	// Summaries being written finish (they are cheap to lose, but a
	// finished one saves a call after the restart), then the queue of
	// session writes is flushed.
	if err := sys.compactor.Idle(wctx); err != nil {
		log.Warn("summaries still being written were abandoned", "err", err)
	}
	sys.compactor.Close()
	if sys.writer != nil {
		if err := sys.writer.Close(wctx); err != nil {
			log.Warn("session writes not all flushed", "err", err)
		}
	}
	log.Info("stopped")
	return nil
}

// health asks a running ctxproxy's /ctxproxy/healthz; containers without
// curl use it as their health check.
func health(ctx context.Context, args []string, e env) error {
	cf := newConfigFlags("health", e, "listen")
	c, _, _, err := cf.load(args, e)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/ctxproxy/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s", resp.Status)
	}
	_, err = fmt.Fprintln(e.stdout, "ok")
	return err
}

// collectEvery is how often retention is applied.
const collectEvery = time.Minute

// retain applies snapshots.ttl, max_sessions and max_bytes in the
// background until ctx ends, counting deletions in
// ctxproxy_sessions_collected_total.
func retain(ctx context.Context, st snapshots.Store, r snapshots.Retention, reg *prometheus.Registry, log *slog.Logger) {
	if r.TTL <= 0 && r.MaxSessions <= 0 && r.MaxBytes <= 0 {
		return
	}
	collected := prometheus.NewCounter(prometheus.CounterOpts{Name: "ctxproxy_sessions_collected_total",
		Help: "Sessions deleted by retention (snapshots.ttl, snapshots.max_sessions, snapshots.max_bytes)."})
	reg.MustRegister(collected)
	t := time.NewTicker(collectEvery)
	defer t.Stop()
	for {
		n, err := snapshots.Collect(ctx, st, r, time.Now())
		collected.Add(float64(n))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("retention: collecting sessions failed", "err", err)
		case n > 0:
			log.Info("retention: sessions deleted", "count", n, "ttl", r.TTL, "max_sessions", r.MaxSessions, "max_bytes", r.MaxBytes)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// gcPercent is the garbage collector's target unless GOGC is set (Go's
// default is 100).
const gcPercent = 200

// memoryLimit is the Go runtime's soft memory limit for a body budget:
// the budget already charges a body for the copies made of it while it
// is served and stored (edge's bodyCost), plus room for the rest of the
// process (tokenizer vocabularies, caches). The heap that stays is far
// below the limit, so the collector does not run more for it; what it
// bounds is the garbage a burst of large bodies leaves (at GOGC=200 the
// heap would grow to three times what stays: 760 MiB after 16 bodies of
// 30 MB, against 660 MiB with the limit).
func memoryLimit(bodyMemory int64) int64 {
	return bodyMemory + 128<<20
}

// startupChecklist logs, one line each, what a newcomer needs to know
// works: the backend and its kind (or that it does not answer yet), where
// sessions are kept, and whether the admin API is on.
func startupChecklist(ctx context.Context, c config.Config, sys *system, log *slog.Logger) {
	for _, n := range c.Notes {
		log.Info(n)
	}
	kind := ""
	for i, srv := range sys.router.Servers() {
		kctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		k := srv.Backend.Kind(kctx)
		cancel()
		if i == 0 {
			kind = k
		}
		if k == "unknown" {
			log.Warn("backend does not answer yet; ctxproxy keeps trying, and forwards requests as they come",
				"backend", srv.URL.Redacted())
		} else {
			log.Info("backend answers", "backend", srv.URL.Redacted(), "kind", k)
		}
	}
	if line := knownModels(ctx, c, sys, kind); line != "" {
		log.Info("models and their windows: " + line)
	}
	switch c.Snapshots.Store {
	case config.StoreNone:
		log.Info("sessions: not stored (snapshots.store none)")
	case "redis":
		log.Info("sessions: stored in Redis", "addr", c.Snapshots.Redis.Addr, "prefix", c.Snapshots.Redis.Prefix)
	default:
		dir, err := filepath.Abs(c.Snapshots.Dir)
		if err != nil {
			dir = c.Snapshots.Dir
		}
		log.Info("sessions: stored in files", "dir", dir)
	}
	switch {
	case proxyConfig(c, versionString()).AdminOff:
		// Warned about above.
	case c.Admin.Token != "":
		log.Info("admin API on: /ctxproxy/ with Authorization: Bearer <admin.token>")
	default:
		log.Info("admin API on: /ctxproxy/ (loopback only, no token)")
	}
}

// maxListedModels bounds the start-up line of models.
const maxListedModels = 8

// knownModels lists the models ctxproxy knows at start and the window it
// will use for each: the backend's (Ollama's /api/tags, with each model's
// trained context) and the models: section, "" when there are none.
func knownModels(ctx context.Context, c config.Config, sys *system, kind string) string {
	windows := map[string]int{}
	var names []string
	add := func(name string, trained int) {
		if _, ok := windows[name]; ok || len(names) >= maxListedModels {
			return
		}
		names = append(names, name)
		windows[name] = sys.deps.Tokens.Window(name, trained).MaxTokens
	}
	for name := range c.Models {
		add(name, 0)
	}
	if kind == "ollama" {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var tags struct {
			Models []struct {
				Name string `json:"name"`
			} `json:"models"`
		}
		if _, err := sys.deps.Backend.JSON(tctx, http.MethodGet, "/api/tags", nil, &tags, 16<<20); err == nil {
			for _, m := range tags.Models {
				// A plain /api/show: the facts alone, not the vocabulary a
				// first request of the model loads.
				var show struct {
					ModelInfo map[string]any `json:"model_info"`
				}
				trained := 0
				if len(names) < maxListedModels {
					if _, err := sys.deps.Backend.JSON(tctx, http.MethodPost, "/api/show", map[string]string{"model": m.Name}, &show, 16<<20); err == nil {
						facts, _ := modelinfo.Parse(show.ModelInfo)
						trained = facts.ContextLength
					}
				}
				add(m.Name, trained)
			}
		}
	}
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, windows[n]))
	}
	return strings.Join(parts, ", ")
}
