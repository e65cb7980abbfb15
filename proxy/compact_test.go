package proxy

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/google/go-cmp/cmp"
)

// TestAdminCompactInstructions: POST .../compress with {"instructions":
// ...} (what /compact sends) summarizes with the instructions appended to
// the summary prompt; a second compress with other instructions writes
// new summaries rather than reusing the first ones.
func TestAdminCompactInstructions(t *testing.T) {
	var mu sync.Mutex
	var systems, models []string
	e := newAdminEnv(t, "", func(_ *Config, d *Deps) {
		c := rewrite.NewCompactor(rewrite.SummarizeConfig{KeepRecent: 2, MinMessages: 2, Wait: time.Minute},
			summarizeFunc(func(_ context.Context, req rewrite.SummaryRequest) (string, error) {
				sys, _ := req.Prompt()
				mu.Lock()
				systems = append(systems, sys)
				models = append(models, req.Model)
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
	res := e.json("POST", p+"/compress", adminapi.CompressRequest{Instructions: "Keep every number."}, 200)
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
	for i, sys := range systems {
		if !strings.HasPrefix(sys, rewrite.SummaryPrompt) || !strings.HasSuffix(sys, "Instructions for this summary: Keep every number.") {
			t.Errorf("summary prompt without the instructions: %q", sys)
		}
		// Without summarize.model, the session's model writes them.
		if models[i] != tinyModel {
			t.Errorf("summary asked of model %q, want the session's %q", models[i], tinyModel)
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

// TestAdminCompressDryRun: POST .../compress?dry_run=1 answers what the
// compress then does — exactly for a trimming strategy, and for summarize
// within the estimate's documented error (each summary not written yet
// counted at min(max_tokens, 80) tokens: off by how much the real one
// differs) — and changes nothing: the session, its snapshots, and no
// summarizer call.
func TestAdminCompressDryRun(t *testing.T) {
	const maxTokens = 20 // the expected length of a summary: min(max_tokens, 80)
	for _, mode := range []string{"smart", "summarize"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			calls, summary, off := 0, "", 0
			e := newAdminEnv(t, "", func(_ *Config, d *Deps) {
				if mode != "summarize" {
					return
				}
				// A summary about as long as expected, and how far off it is.
				cnt := d.Tokens.MessageCounter(tinyModel)
				for summary = "Numbers."; cnt.CountText(summary) < maxTokens; summary += " More numbers." {
				}
				off = cnt.CountText(summary) - maxTokens
				c := rewrite.NewCompactor(rewrite.SummarizeConfig{KeepRecent: 2, MinMessages: 2, MaxTokens: maxTokens, Wait: time.Minute},
					summarizeFunc(func(context.Context, rewrite.SummaryRequest) (string, error) {
						mu.Lock()
						calls++
						mu.Unlock()
						return summary, nil
					}), rewrite.CompactorOptions{})
				t.Cleanup(func() { c.Close() })
				tr, err := rewrite.NewTrimmer(rewrite.Config{Mode: "summarize"}, nil, c.Summarize(), c.Hybrid())
				if err != nil {
					t.Fatal(err)
				}
				d.Trimmer = tr
			})
			p := sessionPath("dry")
			e.fill("dry", 30, 200)
			state := func() (session, messages, snaps map[string]any) {
				return e.json("GET", p, nil, 200), e.json("GET", p+"/messages", nil, 200), e.json("GET", p+"/snapshots", nil, 200)
			}
			s0, m0, n0 := state()

			dry := e.json("POST", p+"/compress?dry_run=1", nil, 200)
			if dry["dry_run"] != true || dry["undo"] != nil || dry["dropped"].(float64)+dry["summarized"].(float64) == 0 {
				t.Fatalf("dry run: %v", dry)
			}
			s1, m1, n1 := state()
			for _, d := range []string{cmp.Diff(s0, s1), cmp.Diff(m0, m1), cmp.Diff(n0, n1)} {
				if d != "" {
					t.Errorf("the dry run changed the session (-before +after):\n%s", d)
				}
			}
			mu.Lock()
			if calls != 0 {
				t.Errorf("the dry run called the summarizer %d times", calls)
			}
			mu.Unlock()
			// A value it does not understand is refused, and compresses nothing.
			if status, data := e.do("POST", p+"/compress?dry_run=yes", nil); status != 400 || !strings.Contains(errorOf(t, data), "dry_run") {
				t.Errorf("dry_run=yes: %d %s", status, data)
			}

			done := e.json("POST", p+"/compress", nil, 200)
			if _, ok := done["dry_run"]; ok || done["undo"] == nil {
				t.Fatalf("compress: %v", done)
			}
			for _, k := range []string{"before", "dropped", "summarized", "notice"} {
				if dry[k] != done[k] {
					t.Errorf("%s: dry run %v, compress %v", k, dry[k], done[k])
				}
			}
			// Exact for trimming; for summaries, off by what each real one
			// differs from the expected length, and a token or two where
			// it meets the text around it.
			summaries := int(done["summarized"].(float64)) / 2
			if d := int(dry["after"].(float64) - done["after"].(float64)); d < -summaries*(abs(off)+2) || d > summaries*(abs(off)+2) {
				t.Errorf("after: dry run %v, compress %v (%d summaries, each %d tokens off)", dry["after"], done["after"], summaries, off)
			}
			if mode == "summarize" && summaries == 0 {
				t.Errorf("compress summarized nothing: %v", done)
			}
		})
	}
}

func abs(n int) int { return max(n, -n) }
