package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repo is the ctxproxy repository root.
const repo = "../.."

func TestRepositoryStackIsValid(t *testing.T) {
	for _, p := range check(context.Background(), repo) {
		t.Error(p)
	}
}

// copyStack copies the Docker files of the repository into a new
// directory, with edit applied to the file named.
func copyStack(t *testing.T, file, old, new string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{composeFile, cpuOverride, replicasFile, backendsFile, nginxConf, dockerfile, "deploy/ctxproxy.yaml", "deploy/prometheus.yml"} {
		data, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == file {
			if !strings.Contains(string(data), old) {
				t.Fatalf("%s does not contain %q", f, old)
			}
			data = []byte(strings.Replace(string(data), old, new, 1))
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Each broken stack is caught, with a message that says what is wrong.
func TestBrokenStacksAreRejected(t *testing.T) {
	tests := []struct {
		name           string
		file, old, new string
		want           string
	}{
		{"schema: misspelt key", composeFile, "    healthcheck:\n      test: [\"CMD\", \"ollama\", \"list\"]",
			"    healtcheck:\n      test: [\"CMD\", \"ollama\", \"list\"]", "healtcheck"},
		{"schema: wrong type", composeFile, "retries: 5\n      start_period", "retries: often\n      start_period", "retries"},
		{"unset variable syntax", composeFile, "${CTXPROXY_PORT:-127.0.0.1:11435}", "${CTXPROXY_PORT:?set it}", "CTXPROXY_PORT"},
		{"no health check", composeFile, "      test: [\"CMD\", \"redis-cli\", \"ping\"]", "      disable: true", "service redis: no health check"},
		{"ollama without GPU", composeFile, "              capabilities: [gpu]\n    restart", "              capabilities: [compute]\n    restart",
			"service ollama: no NVIDIA GPU reservation"},
		{"backend is not the ollama service", composeFile, "http://ollama:11434", "http://localhost:11434", "CTXPROXY_BACKEND_URL"},
		{"replicas on the file store", replicasFile, "CTXPROXY_SNAPSHOTS_STORE: redis", "CTXPROXY_SNAPSHOTS_STORE: file", "must use the redis store"},
		{"one replica", replicasFile, "replicas: 3", "replicas: 1", "deploy.replicas must be 2 or more"},
		{"replicas publish their port", replicasFile, "ports: !reset []", "ports: [\"11436:11435\"]", "replicas publish no port"},
		{"buffered streams", nginxConf, "proxy_buffering off;", "proxy_buffering on;", "proxy_buffering off"},
		{"ctxproxy starts before ollama is healthy", composeFile, "        condition: service_healthy\n      redis",
			"        condition: service_started\n      redis", "must depend on ollama being healthy"},
		{"models not on a volume", composeFile, "ollama-models:/root/.ollama", "/srv/models:/root/.ollama", "no named volume at /root/.ollama"},
		{"redis without its profile", composeFile, "    profiles: [redis]\n", "", "service redis: profiles"},
		{"config file mounted alone", composeFile, "./deploy:/etc/ctxproxy:ro", "./deploy/ctxproxy.yaml:/etc/ctxproxy/ctxproxy.yaml:ro",
			"not in a bind-mounted directory"},
		{"prometheus scrapes elsewhere", "deploy/prometheus.yml", "names: [ctxproxy]", "names: [ollama]", "no scrape config for ctxproxy"},
		{"cpu override keeps the GPU", cpuOverride, "  ollama:\n    deploy: !reset {}\n", "", "service ollama still reserves a GPU"},
		{"backends: one server", backendsFile, "a=http://ollama-a:11434,b=http://ollama-b:11434", "a=http://ollama-a:11434",
			"must name two servers or more"},
		{"backends: not a service", backendsFile, "b=http://ollama-b:11434", "b=http://ollama-c:11434", `backend host "ollama-c" is not a service`},
		{"backends: one models volume", backendsFile, "ollama-b-models:/root/.ollama", "ollama-a-models:/root/.ollama", "share the models volume"},
		{"backends: ctxproxy does not wait", backendsFile, "      ollama-b:\n        condition: service_healthy\n", "",
			"must depend on ollama-b being healthy"},
		{"runs as root", dockerfile, "USER 65532:65532", "USER root", "runs as root"},
		{"no cgo", dockerfile, "CGO_ENABLED=1", "CGO_ENABLED=0", "CGO_ENABLED=1"},
		{"single stage", dockerfile, "FROM gcr.io/distroless/base-debian12:nonroot", "", "not multi-stage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyStack(t, tt.file, tt.old, tt.new)
			problems := check(context.Background(), dir)
			var all []string
			for _, p := range problems {
				all = append(all, p.Error())
			}
			if !strings.Contains(strings.Join(all, "\n"), tt.want) {
				t.Errorf("problems %q do not mention %q", all, tt.want)
			}
		})
	}
}
