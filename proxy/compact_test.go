package proxy

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// TestAdminCompactInstructions: POST .../compress with {"instructions":
// ...} (what /compact sends) summarizes with the instructions appended to
// the summary prompt; a second compress with other instructions writes
// new summaries rather than reusing the first ones.
func TestAdminCompactInstructions(t *testing.T) {
	var mu sync.Mutex
	var systems []string
	e := newAdminEnv(t, "", func(_ *Config, d *Deps) {
		c := rewrite.NewCompactor(rewrite.SummarizeConfig{KeepRecent: 2, MinMessages: 2, Wait: time.Minute},
			summarizeFunc(func(_ context.Context, req rewrite.SummaryRequest) (string, error) {
				sys, _ := req.Prompt()
				mu.Lock()
				systems = append(systems, sys)
				mu.Unlock()
				return "The user and the assistant talked about numbers.", nil
			}), rewrite.CompactorOptions{})
		tr, err := rewrite.NewTrimmer(rewrite.Config{Mode: "summarize"}, nil, c.Summarize(), c.Hybrid())
		if err != nil {
			t.Fatal(err)
		}
		d.Trimmer = tr
	})
	p := sessionPath("compact")
	e.fill("compact", 30, 200)
	res := e.json("POST", p+"/compress", api.CompressRequest{Instructions: "Keep every number."}, 200)
	if res["summarized"].(float64) == 0 {
		t.Fatalf("compact summarized nothing: %v", res)
	}
	if strings.Contains(res["notice"].(string), "not used") {
		t.Errorf("notice says the instructions were not used: %v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(systems) == 0 {
		t.Fatal("no summarizer call")
	}
	for _, sys := range systems {
		if !strings.HasPrefix(sys, rewrite.SummaryPrompt) || !strings.HasSuffix(sys, "Instructions for this summary: Keep every number.") {
			t.Errorf("summary prompt without the instructions: %q", sys)
		}
	}
	// A malformed body is refused.
	if status, data := e.do("POST", p+"/compress", "{not json"); status != 400 {
		t.Errorf("malformed body: %d %s", status, data)
	}
}

// TestAdminCompactWithoutSummaries: with a strategy that does not
// summarize, /compact compresses as /context compress does and says the
// instructions were not used.
func TestAdminCompactWithoutSummaries(t *testing.T) {
	e := newAdminEnv(t, "")
	p := sessionPath("plain")
	e.fill("plain", 30, 200)
	res := e.json("POST", p+"/compress", map[string]string{"instructions": "Keep every number."}, 200)
	if res["dropped"].(float64) == 0 {
		t.Fatalf("compact dropped nothing: %v", res)
	}
	if n := res["notice"].(string); !strings.Contains(n, "The instructions were not used") || !strings.Contains(n, "strategy.mode smart") {
		t.Errorf("notice %q", n)
	}
}
