//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/types/model"
)

// The vision tests' shared parts: which image cases run, the Tokenizer
// made as ctxproxy makes it, and the check that ctxproxy held every
// report against its count.

// sizedImage is an image case: a w×h PNG and what it costs by the
// family's model code (Ollama's engine), worked out by hand; server is
// what it costs on llama-server (0.30 and later), by llama.cpp's clip and
// mtmd, 0 where ctxproxy has no rule for the family there.
type sizedImage struct {
	name   string
	w, h   int
	cost   int
	server int
}

// want is what the image costs on the suite's server.
func (s sizedImage) want() int {
	if llamaServer() {
		return s.server
	}
	return s.cost
}

// visionCases returns the image cases a vision test runs: all of them
// with CTXPROXY_E2E_VISION=all (scripts/vision.sh), else the
// representative ones at the indexes ci, so that CI checks each family's
// rule on the real server without running every size through a vision
// tower on the CPU.
func visionCases[T any](all []T, ci ...int) []T {
	if os.Getenv("CTXPROXY_E2E_VISION") == "all" {
		return all
	}
	out := make([]T, 0, len(ci))
	for _, i := range ci {
		out = append(out, all[i])
	}
	return out
}

// visionTokenizer builds the Tokenizer ctxproxy builds for model name
// (exact.New over the real server's verbose /api/show, as the backend
// package does), after checking that the model shows the vision
// capability.
func visionTokenizer(t *testing.T, base, name string) *exact.Tokenizer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": name, "verbose": true})
	resp, err := http.Post(base+"/api/show", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var show exact.Show
	if err := json.NewDecoder(resp.Body).Decode(&show); err != nil {
		t.Fatalf("/api/show %s: %v", name, err)
	}
	if !slices.Contains(show.Capabilities, string(model.CapabilityVision)) {
		t.Fatalf("%s: capabilities %v, no vision", name, show.Capabilities)
	}
	show.Name, show.Version = name, suite.version // counted as this server counts
	tok, err := exact.New(show)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !tok.Vision() {
		t.Fatalf("%s: the Tokenizer has no vision", name)
	}
	return tok
}

// visionChecked waits until ctxproxy at p has held requests of model
// name's reports against its count (none skipped as an estimate), and
// fails on any miss.
func visionChecked(t *testing.T, p *ctxproxy, name string, requests int) {
	t.Helper()
	var counting struct {
		Checked int64 `json:"checked"`
		Misses  []any `json:"misses"`
	}
	if !eventually(5*time.Second, func() bool {
		_, data := p.get(t, "/ctxproxy/status")
		var st struct {
			Models []struct {
				Name     string          `json:"name"`
				Counting json.RawMessage `json:"counting"`
			} `json:"models"`
		}
		_ = json.Unmarshal(data, &st)
		for _, m := range st.Models {
			if m.Name == name || strings.TrimSuffix(m.Name, ":latest") == name {
				_ = json.Unmarshal(m.Counting, &counting)
			}
		}
		return counting.Checked >= int64(requests)
	}) {
		t.Errorf("%s: ctxproxy checked %d of %d reports with images against its count", name, counting.Checked, requests)
	}
	if len(counting.Misses) > 0 {
		t.Errorf("%s: misses: %v", name, counting.Misses)
	}
}

// visionRoutes are the routes the vision tests send images through
// ctxproxy on: the four chat routes, /api/chat whole and streamed.
var visionRoutes = []string{"/api/chat", "/api/chat stream", "/v1/chat/completions", "/v1/responses", "/v1/messages"}

// visionSent posts msgs, images attached, to ctxproxy at base on route
// ("/api/chat stream" streams /api/chat; /v1/chat/completions,
// /v1/responses and /v1/messages in their own shapes), and
// returns X-Ctxproxy-Tokens and the backend's prompt_eval_count.
func visionSent(base, route, name string, msgs []api.Message) (sent, eval int, err error) {
	var body []byte
	switch route {
	case "/v1/chat/completions":
		body = openaiImageBody(name, msgs)
	case "/v1/responses", "/v1/messages":
		body = dialectBody(route, name, msgs)
	default:
		body, _ = json.Marshal(chatRequest{Model: name, Messages: msgs, Stream: route != "/api/chat"})
	}
	return countedAndEvaluatedBody(base, route, body)
}
