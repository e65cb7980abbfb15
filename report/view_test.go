package report

import (
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

func TestFormatting(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"grouped 0", Grouped(0), "0"},
		{"grouped 999", Grouped(999), "999"},
		{"grouped 1000", Grouped(1000), "1,000"},
		{"grouped 131072", Grouped(131072), "131,072"},
		{"grouped negative", Grouped(-1234567), "-1,234,567"},
		{"bytes", BytesIEC(512), "512 B"},
		{"KiB", BytesIEC(131072), "128.0 KiB"},
		{"MiB", BytesIEC(432 << 20), "432.0 MiB"},
		{"GiB", BytesIEC(5.5 * (1 << 30)), "5.5 GiB"},
		{"TiB", BytesIEC(3 << 50), "3072.0 TiB"},
		{"percent", Percent(0.4219, 1), "42.2%"},
		{"percent NaN", Percent(ratio(1, 0), 0), "0%"},
		{"gib", gib(5<<30, 24<<30, "/"), "5.0/24.0 GiB"},
		{"clean control", Clean("ok\x1b[31mred\x07"), "ok?[31mred?"},
		{"clean unicode", Clean("café ⚠"), "café ⚠"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// TestWarningColors: the 80% warning is yellow and its 90% one
// orange; the level is read from the text.
func TestWarningColors(t *testing.T) {
	p := Palette{On: true}
	tests := []struct{ text, want string }{
		{"Context at 80% capacity. Consider /clear or /save.", "\x1b[33m⚠ Context at 80% capacity. Consider /clear or /save.\x1b[0m"},
		{"Context at 90% capacity. Auto-trimming soon.", "\x1b[38;5;208m⚠ Context at 90% capacity. Auto-trimming soon.\x1b[0m"},
		{"Context at 95% capacity.", "\x1b[38;5;208m⚠ Context at 95% capacity.\x1b[0m"},
		{"Context almost full.", "\x1b[33m⚠ Context almost full.\x1b[0m"},
	}
	for _, tt := range tests {
		if got := p.Warning(tt.text); got != tt.want {
			t.Errorf("warning(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
	if got := (Palette{}).Warning("Context at 90% capacity. Auto-trimming soon."); got != "⚠ Context at 90% capacity. Auto-trimming soon." {
		t.Errorf("without colors: %q", got)
	}
	if got := p.Notice("Context trimmed. Kept first 2 and last 10 messages."); got != "\x1b[36mℹ Context trimmed. Kept first 2 and last 10 messages.\x1b[0m" {
		t.Errorf("notice: %q", got)
	}
	for _, s := range []struct {
		in   string
		want int
	}{{"at 80% x", 80}, {"100%", 100}, {"no number", -1}, {"5 of 90%", 90}, {"%", -1}, {"99999999999999999999%", -1}} {
		if got := percentIn(s.in); got != s.want {
			t.Errorf("percentIn(%q) = %d, want %d", s.in, got, s.want)
		}
	}
}

func TestStatusBar(t *testing.T) {
	st := adminapi.Status{}
	st.GPU.Probe, st.GPU.Total, st.GPU.Used = "cpu", 32<<30, 8<<30
	st.Context.KVQuantization = "q8_0"
	st.Strategy.Mode = "none"
	session := &adminapi.SessionDetail{Model: "qwen3", Snapshots: 1, Stats: adminapi.SessionStats{Tokens: 7372, Limit: 8192, Usage: 0.9}}
	tests := []struct {
		name string
		f    Facts
		want string
	}{
		{"nothing known", Facts{}, ""},
		{"headers only", Facts{Model: "llama3.1", Head: &adminapi.Headers{Seen: true, Tokens: 3456, Limit: 8192, Usage: 42.2}},
			"llama3.1 · 3,456/8,192 tokens (42%)"},
		{"system memory, compression off, 90%", Facts{Status: &st, Session: session},
			"⚠ qwen3 · 7,372/8,192 tokens (90%) · RAM 8.0/32.0 GiB (25%) · q8_0 · 1 snapshot · auto-compress off"},
		// Cut to fit: the share is what was forwarded, and no ⚠ for the
		// conversation as sent.
		{"sent at 100%, forwarded at 76%", Facts{Session: &adminapi.SessionDetail{Model: "tiny",
			Stats: adminapi.SessionStats{Tokens: 7135, Sent: 5446, Limit: 7168, Usage: 0.995}}},
			"tiny · 7,135 sent → 5,446/7,168 tokens forwarded (76%) · 0 snapshots"},
	}
	for _, tt := range tests {
		if got := StatusBar(Palette{}, tt.f); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	colored := StatusBar(Palette{On: true}, Facts{Status: &st, Session: session})
	if !strings.HasPrefix(colored, Orange+"⚠"+Reset+" "+Dim) {
		t.Errorf("colored bar %q: want an orange ⚠ before the dim line", colored)
	}
}

// FuzzText: no text from the network, however malformed, panics the
// helpers that read or clean it.
func FuzzText(f *testing.F) {
	f.Add("Context at 90% capacity.")
	f.Add("ok\x1b[31mred\x07")
	f.Fuzz(func(t *testing.T, s string) {
		_ = percentIn(s)
		if c := Clean(s); strings.ContainsFunc(c, notPrintable) {
			t.Errorf("Clean(%q) = %q keeps a control character", s, c)
		}
	})
}

// A compress that did nothing says why, without counts that claim it
// did; a dry run says what it would do.
func TestCompressedLine(t *testing.T) {
	for _, tc := range []struct {
		r    adminapi.Compressed
		want string
	}{
		{adminapi.Compressed{Before: 81, After: 81, Notice: "Nothing to compress: the conversation uses 81 of 1,000 tokens, within the target of 60%."},
			"Nothing to compress: the conversation uses 81 of 1,000 tokens, within the target of 60%."},
		{adminapi.Compressed{Before: 1634, After: 1139, Dropped: 9}, "Compressed: 1,634 → 1,139 tokens (9 messages dropped, 0 summarized)."},
		{adminapi.Compressed{Before: 1634, After: 1139, Dropped: 9, DryRun: true}, "Would compress: 1,634 → 1,139 tokens (9 messages dropped, 0 summarized)."},
	} {
		if got := Compressed(tc.r); got != tc.want {
			t.Errorf("Compressed(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
