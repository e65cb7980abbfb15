package rewrite

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fileMessage is a message of a testdata conversation.
type fileMessage struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	ToolCalls  []struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"tool_calls,omitempty"`
	Preserve   bool     `json:"preserve,omitempty"`
	Importance *float64 `json:"importance,omitempty"`
}

type goldenRun struct {
	TokensBefore int      `json:"tokens_before"`
	TokensAfter  int      `json:"tokens_after"`
	Dropped      int      `json:"dropped"`
	Notice       string   `json:"notice"`
	Error        string   `json:"error,omitempty"`
	Messages     []string `json:"messages"`
}

// TestGolden trims each conversation of testdata/*.json with every mode, at
// the limit the file gives, and compares a summary of the result — each
// message as "index role", markers in brackets, edited contents marked —
// with testdata/*.golden. Run with -update after a deliberate change.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	tr := newTrimmer(t, Config{})
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
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
			got := map[string]goldenRun{}
			for _, mode := range modes {
				res, err := tr.Trim(context.Background(), Request{Mode: mode}, msgs, in.Limit, counter)
				run := goldenRun{TokensBefore: Total(msgs, counter), Dropped: res.Dropped, Notice: res.Notice}
				if err != nil {
					run.Error = err.Error()
				}
				run.TokensAfter = Total(res.Messages, counter)
				for _, m := range res.Messages {
					run.Messages = append(run.Messages, summary(m))
				}
				got[mode] = run
			}
			out, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(file, ".json") + ".golden"
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

func summary(m Message) string {
	if m.Synthetic {
		return fmt.Sprintf("[%s] %s", m.Role, m.Content)
	}
	s := fmt.Sprintf("%d %s", idOf(m), m.Role)
	for _, c := range m.ToolCalls {
		s += " call:" + c.ID
	}
	if m.ToolCallID != "" {
		s += " for:" + m.ToolCallID
	}
	if m.Edited {
		s += fmt.Sprintf(" (edited to %d tokens)", m.Tokens)
	}
	return s
}
