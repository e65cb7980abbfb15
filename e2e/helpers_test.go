//go:build e2e

package e2e

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/ollama/ollama/api"
)

// The helpers' own tests need no Ollama: a scenario that passes because
// its checker is blind proves nothing.

func TestOrphans(t *testing.T) {
	call := api.Message{Role: "assistant", ToolCalls: []api.ToolCall{toolCall(0, "get_weather", "Oslo"), toolCall(1, "get_time", "Oslo")}}
	result := func(name string) api.Message { return api.Message{Role: "tool", ToolName: name, Content: "x"} }
	user := api.Message{Role: "user", Content: "q"}
	sys := api.Message{Role: "system", Content: "s"}
	tests := []struct {
		name string
		msgs []api.Message
		want int
	}{
		{"whole units", []api.Message{sys, user, call, result("get_weather"), result("get_time"), user}, 0},
		{"conversation ending with results", []api.Message{sys, user, call, result("get_weather"), result("get_time")}, 0},
		{"result without its call", []api.Message{sys, result("get_time"), user}, 1},
		{"marker between call and results", []api.Message{call, sys, result("get_weather"), result("get_time")}, 3},
		{"call missing a result", []api.Message{user, call, result("get_weather"), user}, 1},
		{"call with no results at the end", []api.Message{user, call}, 1},
		{"generated conversations", toolConversation(1, 4, true), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := orphans(tt.msgs); len(got) != tt.want {
				t.Errorf("orphans = %q, want %d problem(s)", got, tt.want)
			}
		})
	}
}

func TestTruncationFlag(t *testing.T) {
	tests := []struct {
		name, json string
		want       bool
	}{
		{"bool", `{"id":"a","truncated":true}`, true},
		{"count", `{"stats":{"backend_truncations":2}}`, true},
		{"zero count", `{"backend_truncations":0,"truncated":false}`, false},
		{"in a list", `{"requests":[{"truncation":"prompt_eval_count 2021 < 3300"}]}`, true},
		{"absent", `{"id":"a","messages":4}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(tt.json), &v); err != nil {
				t.Fatal(err)
			}
			if got := truncationFlag(v, ""); (got != "") != tt.want {
				t.Errorf("truncationFlag(%s) = %q, want found %v", tt.json, got, tt.want)
			}
		})
	}
}

func TestMetricSum(t *testing.T) {
	const text = `# HELP ctxproxy_backend_truncations_total Silent truncations detected.
# TYPE ctxproxy_backend_truncations_total counter
ctxproxy_backend_truncations_total{model="tiny"} 2
ctxproxy_backend_truncations_total{model="tiny-tools"} 1
ctxproxy_backend_truncations_totally 7
ctxproxy_requests_total 9
`
	sum, found := metricSum(text, "ctxproxy_backend_truncations_total")
	if sum != 3 || !found {
		t.Errorf("metricSum = %v, %v; want 3, true", sum, found)
	}
	if sum, found := metricSum(text, "ctxproxy_requests_total"); sum != 9 || !found {
		t.Errorf("unlabelled: metricSum = %v, %v; want 9, true", sum, found)
	}
	if _, found := metricSum(text, "ctxproxy_missing_total"); found {
		t.Error("found a metric that is not there")
	}
}

// Lines as Ollama v0.17.4 writes them with OLLAMA_DEBUG=1.
func TestOllamaLogLines(t *testing.T) {
	lines := []string{
		`time=2026-11-21T06:42:46.398Z level=DEBUG source=prompt.go:73 msg="truncating input messages which exceed context length" truncated=5`,
		`time=2026-11-21T06:42:46.684Z level=DEBUG source=sched.go:189 msg=reloading runner.name=registry.ollama.ai/library/tiny:latest runner.num_ctx=1024`,
		`time=2026-11-21T06:42:46.700Z level=WARN source=runner.go:153 msg="truncating input prompt" limit=512 prompt=1475 keep=4 new=512`,
		`[GIN] 2026/11/21 - 06:41:24 | 200 |  401.866362ms |       127.0.0.1 | POST     "/api/chat"`,
		`[GIN] 2026/11/21 - 06:41:24 | 200 |      20.1µs |       127.0.0.1 | GET      "/api/version"`,
		`[GIN-debug] POST   /v1/chat/completions      --> github.com/ollama/ollama/server.(*Server).ChatHandler-fm (6 handlers)`,
		`time=2026-11-21T06:42:47.000Z level=DEBUG source=sched.go:258 msg="loading first model"`,
	}
	if got := len(grep(lines, truncationLine)); got != 2 {
		t.Errorf("truncation lines: %d, want 2", got)
	}
	if got := len(grep(lines, reloadLine)); got != 1 {
		t.Errorf("reload lines: %d, want 1", got)
	}
	if diff := cmp.Diff([]string{"POST /api/chat", "GET /api/version"}, routesIn(lines)); diff != "" {
		t.Errorf("routesIn (-want +got):\n%s", diff)
	}
}
