//go:build e2e

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
	"golang.org/x/mod/semver"
)

// ollamaServer is the real Ollama that start.sh started.
type ollamaServer struct {
	url     string
	pgid    int
	logPath string
	// models is the server's OLLAMA_MODELS; "" when start.sh did not say.
	models string
}

// version is the server's version as its /api/version says ("0.17.4").
func (o *ollamaServer) version() string {
	resp, err := http.Get(o.url + "/api/version")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Version string `json:"version"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return v.Version
}

// llamaServer reports whether the suite's Ollama is of the llama-server
// era (0.30 and later): every model runs in llama.cpp's llama-server,
// none on Ollama's own engine.
func llamaServer() bool { return serverAtLeast("0.30.0") }

// serverAtLeast reports whether the suite's Ollama is version want
// ("0.32.0") or later.
func serverAtLeast(want string) bool {
	v := "v" + suite.version
	return semver.IsValid(v) && semver.Compare(v, "v"+want) >= 0
}

// stop stops serve and its runners (the whole process group).
func (o *ollamaServer) stop() {
	stopGroup(o.pgid, 10*time.Second)
	suite.watchdog.remove(o.pgid)
}

// logMark is a position in Ollama's log; logSince returns what was written
// after it, so a test reads only the lines its own requests caused.
func (o *ollamaServer) logMark(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(o.logPath)
	if err != nil {
		t.Fatalf("ollama log: %v", err)
	}
	return fi.Size()
}

// logSince returns the log lines written after mark.
func (o *ollamaServer) logSince(t *testing.T, mark int64) []string {
	t.Helper()
	f, err := os.Open(o.logPath)
	if err != nil {
		t.Fatalf("ollama log: %v", err)
	}
	defer f.Close()
	if _, err := f.Seek(mark, io.SeekStart); err != nil {
		t.Fatalf("ollama log: %v", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("ollama log: %v", err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// Lines of Ollama's log (v0.17.4) that the scenarios look for.
var (
	// truncationLine is Ollama dropping old messages to fit num_ctx
	// (server/prompt.go, debug level: "truncating input messages which
	// exceed context length") or its runner cutting one long prompt
	// (runner, warn level: "truncating input prompt").
	truncationLine = regexp.MustCompile(`truncating input`)
	// reloadLine is the scheduler reloading a model whose options, such
	// as num_ctx, changed (server/sched.go, debug level).
	reloadLine = regexp.MustCompile(`msg=reloading\b`)
	// ginLine is the access log line of one request.
	ginLine = regexp.MustCompile(`\[GIN\].*\|\s*(GET|POST|PUT|DELETE|HEAD)\s+"([^"]+)"`)
)

// grep returns the lines that match re.
func grep(lines []string, re *regexp.Regexp) []string {
	var out []string
	for _, l := range lines {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// routesIn returns "METHOD /path" for each access log line.
func routesIn(lines []string) []string {
	var out []string
	for _, l := range lines {
		if m := ginLine.FindStringSubmatch(l); m != nil {
			out = append(out, m[1]+" "+m[2])
		}
	}
	return out
}

// loaded returns the models Ollama has loaded (/api/ps), whose
// context_length is the num_ctx each runs with.
func (o *ollamaServer) loaded(t *testing.T) []api.ProcessModelResponse {
	t.Helper()
	resp, err := http.Get(o.url + "/api/ps")
	if err != nil {
		t.Fatalf("GET /api/ps: %v", err)
	}
	defer resp.Body.Close()
	var ps api.ProcessResponse
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil {
		t.Fatalf("GET /api/ps: %v", err)
	}
	return ps.Models
}

// contextLength is the num_ctx Ollama runs model with; 0 when not loaded.
func (o *ollamaServer) contextLength(t *testing.T, model string) int {
	t.Helper()
	for _, m := range o.loaded(t) {
		if m.Name == model || m.Model == model || strings.TrimSuffix(m.Name, ":latest") == model {
			return m.ContextLength
		}
	}
	return 0
}
