// Command composecheck validates ctxproxy's Docker files where Docker
// cannot run: it loads docker-compose.yml with compose-go, the loader that
// `docker compose config` itself uses (the compose-spec JSON schema,
// interpolation, profiles, merging of override files), and then checks the
// structure ctxproxy's stack relies on: health checks, the GPU
// reservations, the volumes for models and snapshots, the profiles, the
// Prometheus scrape target, and a multi-stage, cgo, non-root Dockerfile.
//
//	go run . -dir ../..          # every problem, one a line; exit 1 if any
//	go run . -dir ../.. -print   # and the resolved stack, as `docker compose config` prints it
//
// It lives in its own module so that compose-go stays out of ctxproxy's
// dependencies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

// The stack as ctxproxy documents it.
const (
	composeFile  = "docker-compose.yml"
	cpuOverride  = "docker-compose.cpu.yml"
	replicasFile = "docker-compose.replicas.yml"
	nginxConf    = "deploy/nginx.conf"
	dockerfile   = "Dockerfile"
	proxyPort    = "11435"
	ollamaURL    = "http://ollama:11434"
	modelsTarget = "/root/.ollama"
	dataTarget   = "/data"
)

func main() {
	dir := flag.String("dir", ".", "repository root (where docker-compose.yml is)")
	print := flag.Bool("print", false, "print the resolved stack with every profile, as `docker compose config` does")
	flag.Parse()
	problems := check(context.Background(), *dir)
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "composecheck:", p)
	}
	if *print && len(problems) == 0 {
		p, err := load(context.Background(), *dir, []string{"*"}, composeFile)
		if err == nil {
			var b []byte
			if b, err = p.MarshalYAML(); err == nil {
				_, err = os.Stdout.Write(b)
			}
		}
		if err != nil {
			problems = append(problems, err)
		}
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "composecheck: %s, %s, %s, %s and %s are valid\n", composeFile, cpuOverride, replicasFile, backendsFile, dockerfile)
}

// env is the environment the stack is resolved with: none of the
// optional variables set, as on a fresh checkout.
var env = []string{}

// load resolves the compose files in dir with profiles, as `docker compose
// -f file… --profile p… config` would.
func load(ctx context.Context, dir string, profiles []string, files ...string) (*types.Project, error) {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(dir, f)
	}
	opts, err := cli.NewProjectOptions(paths, cli.WithWorkingDirectory(dir), cli.WithEnv(env),
		cli.WithProfiles(profiles), cli.WithResolvedPaths(true))
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(ctx)
}

// check returns every problem with the Docker files in dir.
func check(ctx context.Context, dir string) []error {
	var problems []error
	add := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }

	all, err := load(ctx, dir, []string{"*"}, composeFile)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", composeFile, err)}
	}
	for _, name := range []string{"ollama", "ctxproxy", "redis", "prometheus"} {
		if _, ok := all.Services[name]; !ok {
			add("%s: no %s service", composeFile, name)
		}
	}
	for name, s := range all.Services {
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			add("service %s: no health check", name)
		}
		if s.Restart == "" {
			add("service %s: no restart policy", name)
		}
	}
	if len(problems) > 0 {
		return problems
	}
	ollama, proxy := all.Services["ollama"], all.Services["ctxproxy"]

	// ollama: the models on a volume, the GPU reserved.
	if !hasVolume(all, ollama, modelsTarget) {
		add("service ollama: no named volume at %s for the models", modelsTarget)
	}
	if !reserves(ollama, "gpu") {
		add("service ollama: no NVIDIA GPU reservation (driver nvidia, capabilities [gpu])")
	}

	// ctxproxy: waits for a healthy ollama, forwards to it, keeps its
	// data on a volume, and may read the GPU through NVML.
	if d, ok := proxy.DependsOn["ollama"]; !ok || d.Condition != types.ServiceConditionHealthy {
		add("service ctxproxy: must depend on ollama being healthy")
	}
	if d, ok := proxy.DependsOn["redis"]; !ok || d.Required {
		add("service ctxproxy: must wait for redis when its profile is on (depends_on redis, required: false)")
	}
	envOf := func(k string) string {
		if v := proxy.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	if got := envOf("CTXPROXY_BACKEND_URL"); got != ollamaURL {
		add("service ctxproxy: CTXPROXY_BACKEND_URL is %q, want %q", got, ollamaURL)
	} else if u, _ := url.Parse(got); all.Services[u.Hostname()].Name == "" {
		add("service ctxproxy: backend host %q is not a service", u.Hostname())
	}
	if got := envOf("CTXPROXY_LISTEN"); !strings.HasSuffix(got, ":"+proxyPort) || strings.HasPrefix(got, "127.") {
		add("service ctxproxy: CTXPROXY_LISTEN %q must listen beyond loopback on port %s", got, proxyPort)
	}
	if envOf("CTXPROXY_SNAPSHOTS_DIR") != dataTarget || !hasVolume(all, proxy, dataTarget) {
		add("service ctxproxy: snapshots must live on a named volume at %s (CTXPROXY_SNAPSHOTS_DIR)", dataTarget)
	}
	if got := envOf("CTXPROXY_SNAPSHOTS_STORE"); got != "file" {
		add("service ctxproxy: the default store must be file, got %q", got)
	}
	if host := strings.Split(envOf("CTXPROXY_SNAPSHOTS_REDIS_ADDR"), ":")[0]; all.Services[host].Name == "" {
		add("service ctxproxy: CTXPROXY_SNAPSHOTS_REDIS_ADDR host %q is not a service", host)
	}
	if !slices.ContainsFunc(proxy.HealthCheck.Test, func(s string) bool { return strings.Contains(s, "ctxproxy") }) ||
		!slices.Contains(proxy.HealthCheck.Test, "health") {
		add("service ctxproxy: the health check must run `ctxproxy health`, got %q", proxy.HealthCheck.Test)
	}
	if !reserves(proxy, "utility") {
		add("service ctxproxy: no NVIDIA reservation with the utility capability (NVML)")
	}
	if !publishes(proxy, proxyPort) {
		add("service ctxproxy: port %s is not published", proxyPort)
	}
	problems = append(problems, checkConfigMount(proxy, envOf("CTXPROXY_CONFIG"))...)

	// The optional services sit behind their profiles.
	for name, profile := range map[string]string{"redis": "redis", "prometheus": "metrics"} {
		if s := all.Services[name]; !slices.Equal(s.Profiles, []string{profile}) {
			add("service %s: profiles %q, want [%s]", name, s.Profiles, profile)
		}
	}
	problems = append(problems, checkPrometheus(all.Services["prometheus"])...)

	// Without profiles only Ollama and ctxproxy start.
	plain, err := load(ctx, dir, nil, composeFile)
	if err != nil {
		add("%s without profiles: %w", composeFile, err)
	} else if names := plain.ServiceNames(); !slices.Equal(names, []string{"ctxproxy", "ollama"}) {
		add("%s without profiles starts %q, want [ctxproxy ollama]", composeFile, names)
	}

	// The CPU override removes every GPU reservation.
	cpu, err := load(ctx, dir, []string{"*"}, composeFile, cpuOverride)
	if err != nil {
		add("%s + %s: %w", composeFile, cpuOverride, err)
	} else {
		for name, s := range cpu.Services {
			if reserves(s, "gpu") || reserves(s, "utility") {
				add("%s: service %s still reserves a GPU", cpuOverride, name)
			}
		}
	}

	problems = append(problems, checkReplicas(ctx, dir)...)
	problems = append(problems, checkBackends(ctx, dir)...)
	return append(problems, checkDockerfile(filepath.Join(dir, dockerfile))...)
}

// checkReplicas checks the replicas stack: several ctxproxy replicas on
// the Redis store, without a port of their own, behind a load balancer
// that publishes ctxproxy's port and streams.
func checkReplicas(ctx context.Context, dir string) []error {
	var problems []error
	add := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	p, err := load(ctx, dir, nil, composeFile, replicasFile)
	if err != nil {
		return []error{fmt.Errorf("%s + %s: %w", composeFile, replicasFile, err)}
	}
	proxy, redis, lb := p.Services["ctxproxy"], p.Services["redis"], p.Services["lb"]
	if redis.Name == "" || lb.Name == "" {
		return []error{fmt.Errorf("%s: without profiles it must start redis and lb, got %q", replicasFile, p.ServiceNames())}
	}
	if proxy.Deploy == nil || proxy.Deploy.Replicas == nil || *proxy.Deploy.Replicas < 2 {
		add("%s: service ctxproxy: deploy.replicas must be 2 or more", replicasFile)
	}
	if len(proxy.Ports) > 0 {
		add("%s: service ctxproxy: replicas publish no port (the load balancer does)", replicasFile)
	}
	if v := proxy.Environment["CTXPROXY_SNAPSHOTS_STORE"]; v == nil || *v != "redis" {
		add("%s: service ctxproxy: replicas must use the redis store", replicasFile)
	}
	if d, ok := proxy.DependsOn["redis"]; !ok || !d.Required || d.Condition != types.ServiceConditionHealthy {
		add("%s: service ctxproxy: replicas must wait for a healthy redis", replicasFile)
	}
	if d, ok := lb.DependsOn["ctxproxy"]; !ok || d.Condition != types.ServiceConditionHealthy {
		add("%s: service lb: must wait for healthy replicas", replicasFile)
	}
	if !publishes(lb, proxyPort) {
		add("%s: service lb: port %s is not published", replicasFile, proxyPort)
	}
	if lb.HealthCheck == nil || len(lb.HealthCheck.Test) == 0 || lb.Restart == "" {
		add("%s: service lb: needs a health check and a restart policy", replicasFile)
	}
	conf, err := os.ReadFile(filepath.Join(dir, nginxConf))
	if err != nil {
		return append(problems, err)
	}
	want, err := filepath.Abs(filepath.Join(dir, nginxConf))
	if err != nil {
		return append(problems, err)
	}
	mounted := slices.ContainsFunc(lb.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Source == want && v.Target == "/etc/nginx/nginx.conf"
	})
	if !mounted {
		add("%s: service lb: %s is not mounted at /etc/nginx/nginx.conf", replicasFile, nginxConf)
	}
	for _, want := range []string{"server ctxproxy:" + proxyPort, "listen " + proxyPort, "proxy_buffering off", "proxy_pass http://ctxproxy"} {
		if !strings.Contains(string(conf), want) {
			add("%s: no %q", nginxConf, want)
		}
	}
	return problems
}

func hasVolume(p *types.Project, s types.ServiceConfig, target string) bool {
	for _, v := range s.Volumes {
		if v.Target == target && v.Type == types.VolumeTypeVolume {
			_, declared := p.Volumes[v.Source]
			return declared
		}
	}
	return false
}

// reserves reports whether s reserves an NVIDIA device with capability c.
func reserves(s types.ServiceConfig, c string) bool {
	if s.Deploy == nil || s.Deploy.Resources.Reservations == nil {
		return false
	}
	for _, d := range s.Deploy.Resources.Reservations.Devices {
		if d.Driver == "nvidia" && slices.Contains(d.Capabilities, c) && (d.Count != 0 || len(d.IDs) > 0) {
			return true
		}
	}
	return false
}

func publishes(s types.ServiceConfig, port string) bool {
	for _, p := range s.Ports {
		if fmt.Sprint(p.Target) == port {
			return true
		}
	}
	return false
}

// checkConfigMount checks that the file CTXPROXY_CONFIG names is in a
// bind-mounted directory that exists here, mounted read-only, as a
// directory: a single-file bind mount would miss an editor's save by
// rename, and reload would never see it.
func checkConfigMount(s types.ServiceConfig, config string) []error {
	if config == "" {
		return []error{errors.New("service ctxproxy: CTXPROXY_CONFIG is not set: config reload needs a file")}
	}
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind || filepath.Dir(config) != v.Target {
			continue
		}
		var problems []error
		if st, err := os.Stat(v.Source); err != nil || !st.IsDir() {
			problems = append(problems, fmt.Errorf("service ctxproxy: config mount %s is not a directory", v.Source))
		}
		if _, err := os.Stat(filepath.Join(v.Source, filepath.Base(config))); err != nil {
			problems = append(problems, fmt.Errorf("service ctxproxy: %v", err))
		}
		if !v.ReadOnly {
			problems = append(problems, errors.New("service ctxproxy: mount the config directory read-only"))
		}
		return problems
	}
	return []error{fmt.Errorf("service ctxproxy: CTXPROXY_CONFIG %s is not in a bind-mounted directory", config)}
}

// checkPrometheus reads the Prometheus config the service mounts and
// checks it scrapes ctxproxy's /metrics.
func checkPrometheus(s types.ServiceConfig) []error {
	for _, v := range s.Volumes {
		if v.Target != "/etc/prometheus/prometheus.yml" {
			continue
		}
		data, err := os.ReadFile(v.Source)
		if err != nil {
			return []error{fmt.Errorf("service prometheus: %w", err)}
		}
		var cfg struct {
			ScrapeConfigs []struct {
				MetricsPath   string `yaml:"metrics_path"`
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
				DNSSD []struct {
					Names []string `yaml:"names"`
					Port  int      `yaml:"port"`
				} `yaml:"dns_sd_configs"`
			} `yaml:"scrape_configs"`
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		if err := dec.Decode(&cfg); err != nil {
			return []error{fmt.Errorf("%s: %w", v.Source, err)}
		}
		for _, sc := range cfg.ScrapeConfigs {
			if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
				continue
			}
			for _, d := range sc.DNSSD {
				if slices.Contains(d.Names, "ctxproxy") && fmt.Sprint(d.Port) == proxyPort {
					return nil
				}
			}
			for _, st := range sc.StaticConfigs {
				if slices.Contains(st.Targets, "ctxproxy:"+proxyPort) {
					return nil
				}
			}
		}
		return []error{fmt.Errorf("%s: no scrape config for ctxproxy:%s/metrics", v.Source, proxyPort)}
	}
	return []error{errors.New("service prometheus: no config mounted at /etc/prometheus/prometheus.yml")}
}

var (
	fromLine = regexp.MustCompile(`(?im)^FROM\s+(\S+)(\s+AS\s+(\S+))?`)
	userLine = regexp.MustCompile(`(?im)^USER\s+(\S+)`)
)

// checkDockerfile checks the Dockerfile's shape: a build stage with cgo,
// a separate final stage that runs as a non-root user with a health check.
func checkDockerfile(path string) []error {
	data, err := os.ReadFile(path)
	if err != nil {
		return []error{err}
	}
	var problems []error
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("Dockerfile: "+format, args...))
	}
	text := string(data)
	froms := fromLine.FindAllStringSubmatch(text, -1)
	if len(froms) < 2 {
		add("not multi-stage (%d FROM lines)", len(froms))
		return problems
	}
	final := text[strings.LastIndex(text, froms[len(froms)-1][0]):]
	if !strings.Contains(text, "CGO_ENABLED=1") {
		add("the build must set CGO_ENABLED=1 (NVML)")
	}
	if !strings.Contains(final, "COPY --from=") {
		add("the final stage copies nothing from the build stage")
	}
	if strings.Contains(final, "golang:") {
		add("the final stage is a Go toolchain image, not a small one")
	}
	users := userLine.FindAllStringSubmatch(final, -1)
	if len(users) == 0 {
		add("the final stage has no USER (runs as root)")
	} else if u := users[len(users)-1][1]; u == "root" || u == "0" || strings.HasPrefix(u, "0:") {
		add("the final stage runs as root (USER %s)", u)
	}
	if !strings.Contains(final, "HEALTHCHECK") || !strings.Contains(final, "health") {
		add("the final stage has no HEALTHCHECK running `ctxproxy health`")
	}
	return problems
}
