package main

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
)

// backendsFile is the stack of two Ollama servers behind one ctxproxy.
const backendsFile = "docker-compose.backends.yml"

// checkBackends checks the stack of several servers: each Ollama its own
// models volume, ctxproxy waiting for every one of them healthy and
// naming each in CTXPROXY_BACKENDS (name=url entries whose hosts are the
// stack's Ollama services), its data on a volume and its port published.
func checkBackends(ctx context.Context, dir string) []error {
	var problems []error
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf(backendsFile+": "+format, args...))
	}
	p, err := load(ctx, dir, nil, backendsFile)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", backendsFile, err)}
	}
	proxy, ok := p.Services["ctxproxy"]
	if !ok {
		return []error{fmt.Errorf("%s: no ctxproxy service", backendsFile)}
	}
	for name, s := range p.Services {
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 || s.Restart == "" {
			add("service %s: needs a health check and a restart policy", name)
		}
	}
	var env string
	if v := proxy.Environment["CTXPROXY_BACKENDS"]; v != nil {
		env = *v
	}
	entries := strings.Split(env, ",")
	if env == "" || len(entries) < 2 {
		add("service ctxproxy: CTXPROXY_BACKENDS must name two servers or more, got %q", env)
	}
	sources := map[string]string{} // models volume → its service
	for _, e := range entries {
		name, raw, ok := strings.Cut(e, "=")
		u, err := url.Parse(raw)
		if !ok || name == "" || err != nil || u.Scheme != "http" {
			add("service ctxproxy: CTXPROXY_BACKENDS entry %q is not name=http://host:port", e)
			continue
		}
		host := u.Hostname()
		s, ok := p.Services[host]
		if !ok {
			add("service ctxproxy: backend host %q is not a service", host)
			continue
		}
		if !strings.HasPrefix(s.Image, "ollama/ollama") {
			add("service %s: image %q, want ollama/ollama", host, s.Image)
		}
		if d, ok := proxy.DependsOn[host]; !ok || d.Condition != types.ServiceConditionHealthy {
			add("service ctxproxy: must depend on %s being healthy", host)
		}
		i := slices.IndexFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == modelsTarget })
		if i < 0 || !hasVolume(p, s, modelsTarget) {
			add("service %s: no named volume at %s for the models", host, modelsTarget)
			continue
		}
		if other, ok := sources[s.Volumes[i].Source]; ok {
			add("services %s and %s share the models volume %s: each server needs its own", other, host, s.Volumes[i].Source)
		}
		sources[s.Volumes[i].Source] = host
	}
	if v := proxy.Environment["CTXPROXY_BACKEND_URL"]; v != nil {
		add("service ctxproxy: CTXPROXY_BACKEND_URL is set beside CTXPROXY_BACKENDS, which replaces it")
	}
	if v := proxy.Environment["CTXPROXY_SNAPSHOTS_DIR"]; v == nil || *v != dataTarget || !hasVolume(p, proxy, dataTarget) {
		add("service ctxproxy: sessions must live on a named volume at %s (CTXPROXY_SNAPSHOTS_DIR): they remember their server", dataTarget)
	}
	if !publishes(proxy, proxyPort) {
		add("service ctxproxy: port %s is not published", proxyPort)
	}
	var config string
	if v := proxy.Environment["CTXPROXY_CONFIG"]; v != nil {
		config = *v
	}
	for _, err := range checkConfigMount(proxy, config) {
		problems = append(problems, fmt.Errorf("%s: %w", backendsFile, err))
	}
	return problems
}
