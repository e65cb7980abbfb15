package budget

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// claude-3-opus: a 200000-token window, 4096 out.
func TestRegistryWindowOfAKnownModel(t *testing.T) {
	l := NewRegistry(Config{}, nil).Window("claude-3-opus", 0)
	if l.MaxTokens != 200000 || l.MaxOutputTokens != 4096 {
		t.Errorf("claude-3-opus: %+v, want 200000/4096", l)
	}
}

// An unknown model gets the defaults and a warning, once
// per model rather than once per request.
func TestRegistryWarnsOnceForAnUnknownModel(t *testing.T) {
	log, logs := captureLog()
	r := NewRegistry(Config{}, log)
	for range 3 {
		l := r.Window("custom-model", 0)
		if want := (Window{MaxTokens: DefaultMaxTokens, MaxOutputTokens: DefaultOutputTokens}); l != want {
			t.Errorf("custom-model: %+v, want %+v", l, want)
		}
	}
	if got := strings.Count(logs.String(), "unknown model"); got != 1 {
		t.Errorf("logged %d warnings, want 1:\n%s", got, logs)
	}
	if !strings.Contains(logs.String(), "model=custom-model") {
		t.Errorf("warning does not name the model:\n%s", logs)
	}
	r.Window("other-model", 0)
	if got := strings.Count(logs.String(), "unknown model"); got != 2 {
		t.Errorf("logged %d warnings after a second model, want 2", got)
	}
}

// The effective limit is the window less the reply reserve and Reserved.
func TestWindowEffective(t *testing.T) {
	l := Window{MaxTokens: 100000, MaxOutputTokens: 4096, Reserved: 1000}
	if got, want := l.Effective(), 94904; got != want {
		t.Errorf("Effective() = %d, want %d", got, want)
	}
}

func TestWindowEffectiveNeverNegative(t *testing.T) {
	if got := (Window{MaxTokens: 1000, MaxOutputTokens: 4096}).Effective(); got != 0 {
		t.Errorf("Effective() = %d, want 0", got)
	}
}

func TestWindowWithOutputAndCap(t *testing.T) {
	l := Window{MaxTokens: 131072, MaxOutputTokens: 1024, Reserved: 100}
	tests := []struct {
		name string
		got  Window
		want Window
	}{
		{"request max_tokens replaces reserve", l.WithOutput(500), Window{131072, 500, 100}},
		{"num_predict -1 keeps reserve", l.WithOutput(-1), l},
		{"absent keeps reserve", l.WithOutput(0), l},
		{"num_ctx narrows", l.Cap(8192), Window{8192, 1024, 100}},
		{"larger num_ctx does not widen", l.Cap(1 << 20), l},
		{"zero cap", l.Cap(0), l},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, tt.got, tt.want)
		}
	}
}

func TestKnownModels(t *testing.T) {
	type lim struct{ Max, Out int }
	models := []string{
		"claude-3-opus-20240229", "claude-3-5-sonnet-20241022", "claude-3.5-haiku", "claude-3-7-sonnet-latest",
		"claude-sonnet-4-20250514", "claude-opus-4-1", "anthropic/claude-3-haiku",
		"gpt-4", "gpt-4-0613", "gpt-4-32k", "gpt-4-turbo-2024-04-09", "gpt-4-1106-preview",
		"gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-3.5-turbo",
		"o1", "o1-mini", "o3", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "GPT-5-Chat-Latest",
		"llama3", "llama3:8b", "llama3.1:8b-instruct-q4_K_M", "library/llama3.1", "registry.ollama.ai/library/llama3.2:3b",
		"llama3.3:70b", "qwen2.5:7b", "qwen2.5-coder:32b", "qwen3:8b", "hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M",
		"hf.co/unsloth/Llama-3.1-8B-Instruct-GGUF", "Meta-Llama-3.1-8B-Instruct",
		"mistral:7b", "mistral-nemo", "mixtral:8x7b", "gemma2:9b", "gemma3:27b", "phi3", "phi3.5", "phi4:14b",
		"deepseek-r1:14b", "command-r", "command-r-plus", "gpt-oss:20b",
	}
	got := map[string]lim{}
	for _, m := range models {
		l, ok := Known(m)
		if !ok {
			t.Errorf("Known(%q) = unknown", m)
		}
		got[m] = lim{l.MaxTokens, l.MaxOutputTokens}
	}
	want := map[string]lim{
		"claude-3-opus-20240229": {200000, 4096}, "claude-3-5-sonnet-20241022": {200000, 8192},
		"claude-3.5-haiku": {200000, 8192}, "claude-3-7-sonnet-latest": {200000, 64000},
		"claude-sonnet-4-20250514": {200000, 64000}, "claude-opus-4-1": {200000, 32000},
		"anthropic/claude-3-haiku": {200000, 4096},
		"gpt-4":                    {8192, 4096}, "gpt-4-0613": {8192, 4096}, "gpt-4-32k": {32768, 4096},
		"gpt-4-turbo-2024-04-09": {128000, 4096}, "gpt-4-1106-preview": {128000, 4096},
		"gpt-4o": {128000, 16384}, "gpt-4o-2024-08-06": {128000, 16384}, "gpt-4o-mini": {128000, 16384},
		"gpt-4.1": {1047576, 32768}, "gpt-4.1-mini": {1047576, 32768}, "gpt-3.5-turbo": {16385, 4096},
		"o1": {200000, 100000}, "o1-mini": {128000, 65536}, "o3": {200000, 100000}, "o3-mini": {200000, 100000},
		"o4-mini": {200000, 100000}, "gpt-5": {400000, 128000}, "gpt-5-mini": {400000, 128000},
		"GPT-5-Chat-Latest": {128000, 16384},
		"llama3":            {8192, 0}, "llama3:8b": {8192, 0}, "llama3.1:8b-instruct-q4_K_M": {131072, 0},
		"library/llama3.1": {131072, 0}, "registry.ollama.ai/library/llama3.2:3b": {131072, 0},
		"llama3.3:70b": {131072, 0}, "qwen2.5:7b": {32768, 0}, "qwen2.5-coder:32b": {32768, 0},
		"qwen3:8b": {40960, 0}, "hf.co/bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M": {32768, 0},
		"hf.co/unsloth/Llama-3.1-8B-Instruct-GGUF": {131072, 0}, "Meta-Llama-3.1-8B-Instruct": {131072, 0},
		"mistral:7b": {32768, 0}, "mistral-nemo": {131072, 0}, "mixtral:8x7b": {32768, 0},
		"gemma2:9b": {8192, 0}, "gemma3:27b": {131072, 0}, "phi3": {4096, 0}, "phi3.5": {131072, 0},
		"phi4:14b": {16384, 0}, "deepseek-r1:14b": {131072, 0}, "command-r": {131072, 0},
		"command-r-plus": {131072, 0}, "gpt-oss:20b": {131072, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Known (-want +got):\n%s", diff)
	}
	for _, m := range []string{"", "custom-model", "my-finetune:latest", "o", "x/y:z"} {
		if l, ok := Known(m); ok {
			t.Errorf("Known(%q) = %+v, want unknown", m, l)
		}
	}
}

func TestRegistryWindow(t *testing.T) {
	cfg := Config{
		Reserved:      100,
		ReserveOutput: 2048,
		Models: map[string]Model{
			"llama3.1":    {MaxTokens: 65536},
			"my-finetune": {MaxTokens: 16384, MaxOutputTokens: 512},
			"gpt-4o":      {MaxOutputTokens: 4096},
		},
	}
	tests := []struct {
		name, model string
		trained     int
		want        Window
	}{
		{"override window, default reserve", "llama3.1:8b", 0, Window{65536, 2048, 100}},
		{"override beats trained", "llama3.1:8b", 131072, Window{65536, 2048, 100}},
		{"override of an unknown model", "my-finetune:q8", 0, Window{16384, 512, 100}},
		{"override output only", "gpt-4o-mini", 0, Window{128000, 4096, 100}},
		{"trained length of an unknown local model", "custom-model:7b", 32768, Window{32768, 2048, 100}},
		{"trained length is the local model's own fact", "phi3:3.8b-mini-128k-instruct", 131072, Window{131072, 2048, 100}},
		{"trained length narrows a local family", "gemma3:1b", 32768, Window{32768, 2048, 100}},
		{"trained length caps a hosted model", "claude-3-opus", 100000, Window{100000, 4096, 100}},
		{"trained length does not widen a hosted model", "gpt-4", 32768, Window{8192, 4096, 100}},
		{"table", "qwen2.5:14b", 0, Window{32768, 2048, 100}},
		{"unknown", "custom-model", 0, Window{DefaultMaxTokens, 2048, 100}},
	}
	r := NewRegistry(cfg, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Window(tt.model, tt.trained); got != tt.want {
				t.Errorf("Window(%q, %d) = %+v, want %+v", tt.model, tt.trained, got, tt.want)
			}
		})
	}
}

func TestFamily(t *testing.T) {
	tests := map[string]string{
		"llama3.1:8b-instruct-q4_K_M":            "llama3.1",
		"library/llama3.1":                       "llama3.1",
		"registry.ollama.ai/library/llama3:8b":   "llama3",
		"localhost:5000/team/model:v2":           "model",
		"hf.co/org/Qwen2.5-7B:Q4":                "qwen2.5-7b",
		"  GPT-4o  ":                             "gpt-4o",
		"":                                       "",
		"anthropic/claude-3-5-sonnet-20241022":   "claude-3-5-sonnet-20241022",
		"hf.co/unsloth/Llama-3.1-8B-Instruct:Q8": "llama-3.1-8b-instruct",
	}
	for in, want := range tests {
		if got := family(in); got != want {
			t.Errorf("family(%q) = %q, want %q", in, got, want)
		}
	}
}
