package inband

import (
	"testing"

	"github.com/ctxproxy/ctxproxy/rewrite"
)

// TestLastRestore: the newest restore exchange counts, a clear after it
// cancels it, and a command without ctxproxy's answer is the user's text.
func TestLastRestore(t *testing.T) {
	u := func(s string) rewrite.Message { return rewrite.Message{Role: "user", Content: s} }
	a := func(s string) rewrite.Message { return rewrite.Message{Role: "assistant", Content: s} }
	for _, tc := range []struct {
		name string
		in   []rewrite.Message
		at   int
		snap string
	}{
		{"none", []rewrite.Message{u("a"), a("b"), u("c")}, -1, ""},
		{"one", []rewrite.Message{u("a"), a("b"), u("/context restore X"), a("ok"), u("c")}, 2, "X"},
		{"the newest", []rewrite.Message{u("/context restore X"), a("ok"), u("/context restore Y"), a("ok"), u("c")}, 2, "Y"},
		{"a clear after", []rewrite.Message{u("/context restore X"), a("ok"), u("/clear"), a("ok"), u("c")}, -1, ""},
		{"a clear before", []rewrite.Message{u("/clear"), a("ok"), u("/context restore X"), a("ok"), u("c")}, 2, "X"},
		{"unanswered", []rewrite.Message{u("/context restore X"), u("c")}, -1, ""},
		{"newest message", []rewrite.Message{u("a"), a("b"), u("/context restore X")}, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, snap := lastRestore(tc.in)
			if at != tc.at || snap != tc.snap {
				t.Errorf("got %d %q, want %d %q", at, snap, tc.at, tc.snap)
			}
		})
	}
}
