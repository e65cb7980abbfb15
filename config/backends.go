package config

import (
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"time"
)

// Server is one entry of backends:, a server behind ctxproxy. Its zero
// fields take backend:'s values (kind, timeouts); Memory is "local" by
// default.
type Server struct {
	// Name names it in X-Ctxproxy-Backend, metrics, the status page and
	// a session's record (default: the URL's host:port).
	Name string `mapstructure:"name"`
	URL  string `mapstructure:"url"`
	Kind string `mapstructure:"kind"`
	// Weight is its share of new sessions (default 1).
	Weight int `mapstructure:"weight"`
	// Models, when set, are the only models sent to it (patterns:
	// "qwen3*").
	Models []string `mapstructure:"models"`
	// MaxInFlight is how many requests it takes at once before a
	// session moves off it (0: no cap).
	MaxInFlight int `mapstructure:"max_inflight"`
	// Memory is where its free memory is read for num_ctx: local (this
	// machine's probes), none (the server's default window), or the URL
	// of a ctxproxy on its machine (its /ctxproxy/status).
	Memory string `mapstructure:"memory"`
	// MemoryToken is the admin.token of the ctxproxy memory names, sent
	// as a bearer token when its status is read; "" sends none (that
	// ctxproxy listens on loopback only, or has no token). Not in the
	// URL, where logs and the status page would show it.
	MemoryToken           string        `mapstructure:"memory_token"`
	ResponseHeaderTimeout time.Duration `mapstructure:"response_header_timeout"`
	DialTimeout           time.Duration `mapstructure:"dial_timeout"`
}

// Memory sources of a server.
const (
	MemoryLocal = "local"
	MemoryNone  = "none"
)

// Servers returns the servers ctxproxy forwards to: backends:, each
// entry completed from backend:, or else the one backend.url.
func (c Config) Servers() []Server {
	b := c.Backend
	if len(c.Backends) == 0 {
		return []Server{{Name: hostOf(b.URL), URL: b.URL, Kind: b.Kind, Memory: MemoryLocal,
			ResponseHeaderTimeout: b.ResponseHeaderTimeout, DialTimeout: b.DialTimeout}}
	}
	out := make([]Server, len(c.Backends))
	for i, s := range c.Backends {
		s.URL = serverRoot(s.URL)
		if s.Name == "" {
			s.Name = hostOf(s.URL)
		}
		if s.Kind == "" {
			s.Kind = b.Kind
		}
		if s.Weight == 0 {
			s.Weight = 1
		}
		if s.Memory == "" {
			s.Memory = MemoryLocal
		}
		if s.ResponseHeaderTimeout == 0 {
			s.ResponseHeaderTimeout = b.ResponseHeaderTimeout
		}
		if s.DialTimeout == 0 {
			s.DialTimeout = b.DialTimeout
		}
		out[i] = s
	}
	return out
}

// hostOf is raw's host:port, or raw when it does not parse.
func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return raw
}

// serverRoot is raw without a trailing /v1, as normalize does for
// backend.url.
func serverRoot(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if p := strings.TrimRight(u.Path, "/"); strings.HasSuffix(p, "/v1") {
		u.Path = strings.TrimSuffix(p, "/v1")
		return u.String()
	}
	return raw
}

// serversProblems returns what is wrong with backends:.
func (c Config) serversProblems() []string {
	var p []string
	oneOf(&p, "backend.routing", c.Backend.Routing, "sessions", "round_robin")
	if c.Backend.ProbeInterval < 0 {
		p = append(p, "backend.probe_interval: must not be negative (0 probes no server between requests)")
	}
	if len(c.Backends) == 0 {
		return p
	}
	names := map[string]bool{}
	for i, s := range c.Servers() {
		key := fmt.Sprintf("backends[%d]", i)
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p = append(p, fmt.Sprintf("%s.url: %q is not an http(s) URL", key, RedactURL(s.URL)))
		}
		if names[s.Name] {
			p = append(p, fmt.Sprintf("%s.name: %q names another server too", key, s.Name))
		}
		names[s.Name] = true
		oneOf(&p, key+".kind", s.Kind, "auto", "ollama", "openai")
		if s.Weight < 0 || s.MaxInFlight < 0 {
			p = append(p, key+".weight and max_inflight: must not be negative")
		}
		if s.ResponseHeaderTimeout < 0 || s.DialTimeout < 0 {
			p = append(p, key+": timeouts must not be negative")
		}
		p = append(p, memoryProblems(key, s)...)
	}
	return p
}

// serversHook reads backends: written as one string, as an environment
// variable carries it: "http://a:11434,gpu2=http://b:11434" (a name
// before "=" is optional).
func serversHook(from reflect.Type, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[[]Server]() || from.Kind() != reflect.String {
		return data, nil
	}
	var out []map[string]any
	for entry := range strings.SplitSeq(data.(string), ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		s := map[string]any{"url": entry}
		if name, u, ok := strings.Cut(entry, "="); ok && !strings.Contains(name, "/") {
			s = map[string]any{"name": name, "url": u}
		}
		out = append(out, s)
	}
	return out, nil
}

// memoryProblems returns what is wrong with a server's memory and
// memory_token.
func memoryProblems(key string, s Server) []string {
	if s.Memory == MemoryLocal || s.Memory == MemoryNone {
		if s.MemoryToken != "" {
			return []string{fmt.Sprintf("%s.memory_token: set, but memory is %s, not the URL of a ctxproxy", key, s.Memory)}
		}
		return nil
	}
	u, err := url.Parse(s.Memory)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return []string{fmt.Sprintf("%s.memory: %q is neither local, none nor the http(s) URL of a ctxproxy", key, RedactURL(s.Memory))}
	case u.User != nil:
		return []string{fmt.Sprintf("%s.memory: %q carries credentials; put the other ctxproxy's admin token in memory_token", key, RedactURL(s.Memory))}
	}
	return nil
}
