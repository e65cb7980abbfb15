package rewrite

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// loadConversation reads a testdata conversation as TestGolden does.
func loadConversation(t *testing.T, file string) ([]Message, int) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Limit    int           `json:"limit"`
		Messages []fileMessage `json:"messages"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		t.Fatal(err)
	}
	msgs := make([]Message, len(in.Messages))
	for i, fm := range in.Messages {
		m := Message{Role: fm.Role, Content: fm.Content, ToolCallID: fm.ToolCallID, Preserve: fm.Preserve, Raw: raw(i)}
		for _, c := range fm.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		if fm.Importance != nil {
			m.Importance, m.HasImportance = *fm.Importance, true
		}
		msgs[i] = m
	}
	return msgs, in.Limit
}

type summarizeRun struct {
	goldenRun
	Summarized int    `json:"summarized"`
	Block      string `json:"block,omitempty"`
}

// TestSummarizeGolden runs modes summarize and hybrid, with the test's
// fake summarizer, over each conversation of testdata/*.json at its limit,
// and compares the result — each message as in TestGolden, and the block
// of summaries the system prompt gets — with testdata/*.summarize.golden.
// Run with -update after a deliberate change.
func TestSummarizeGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			msgs, limit := loadConversation(t, file)
			got := map[string]summarizeRun{}
			for _, mode := range []string{"summarize", "hybrid"} {
				c := NewCompactor(SummarizeConfig{}, &fakeSummarizer{}, CompactorOptions{
					After: func(time.Duration) <-chan time.Time { return nil }})
				tr := summarizingTrimmer(t, Config{}, c)
				res, err := tr.Trim(t.Context(), Request{Session: "golden", Model: "llama3.1", Mode: mode}, msgs, limit, counter)
				c.Close()
				run := summarizeRun{goldenRun: goldenRun{TokensBefore: Total(msgs, counter), Dropped: res.Dropped, Notice: res.Notice}}
				if err != nil {
					run.Error = err.Error()
				}
				run.TokensAfter = Total(res.Messages, counter)
				run.Summarized = res.Summarized
				for _, m := range res.Messages {
					run.Messages = append(run.Messages, summary(m))
				}
				run.Block = blockOf(res.Messages)
				got[mode] = run
			}
			out, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(file, ".json") + ".summarize.golden"
			if *update {
				if err := os.WriteFile(golden, append(out, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(out)+"\n"); diff != "" {
				t.Errorf("%s (-want +got):\n%s", golden, diff)
			}
		})
	}
}
