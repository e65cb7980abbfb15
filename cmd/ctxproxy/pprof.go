package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/config"
)

// servePprof serves Go's profiler (net/http/pprof) on addr, apart from
// the proxy's own listener, until ctx ends. It is off unless serve's
// --pprof names an address: profiles show request contents in memory,
// so keep addr on loopback. Its command line hides passwords in URLs.
func servePprof(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	log.Info("pprof listening", "addr", ln.Addr().String())
	go func() { _ = hs.Serve(ln) }()
	return nil
}

// cmdline is pprof.Cmdline with the passwords in URLs hidden: the
// arguments, NUL-separated.
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// redactArgs is a command line with the password of every URL in it
// hidden, as config.RedactURL does: arguments that are one
// (--backend URL) and flags' values (--backend=URL).
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		name, value, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(name, "-") {
			name, value = "", a
		} else {
			name += "="
		}
		if strings.Contains(value, "://") && strings.Contains(value, "@") {
			value = config.RedactURL(value)
		}
		out[i] = name + value
	}
	return out
}
