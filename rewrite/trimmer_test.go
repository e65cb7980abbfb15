package rewrite

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/google/go-cmp/cmp"
)

func newTrimmer(t *testing.T, cfg Config) *Trimmer {
	t.Helper()
	tr, err := NewTrimmer(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestTrimBelowThresholdIsUnchanged(t *testing.T) {
	msgs := alternating(79, hundred) // 79% of 10000
	res, err := newTrimmer(t, Config{}).Trim(context.Background(), Request{}, msgs, 10000, counter)
	if err != nil {
		t.Fatal(err)
	}
	if &res.Messages[0] != &msgs[0] || res.Notice != "" || res.Dropped != 0 {
		t.Errorf("changed below the threshold: %q", res.Notice)
	}
}

func TestTrimCompactsToolResultsFirst(t *testing.T) {
	msgs := numbered(
		sys("s"), user("look"), call("a"), result("a", lines(1000)), asst("found"), // result: 2500 tokens
		user("again"), call("b"), result("b", lines(1000)), asst("found"), user("now?"),
	)
	res, err := newTrimmer(t, Config{}).Trim(context.Background(), Request{}, msgs, 6000, counter)
	if err != nil {
		t.Fatal(err)
	}
	if res.Dropped != 0 || res.Notice != "Compacted 2 tool results." {
		t.Errorf("dropped %d, notice %q; want both results compacted and nothing dropped", res.Dropped, res.Notice)
	}
	if got := Total(res.Messages, counter); got > 2500 {
		t.Errorf("total %d", got)
	}
}

func TestTrimOverflow(t *testing.T) {
	big := user(lines(1000)) // 2500 tokens: the newest user turn alone exceeds the window
	msgs := numbered(sys("s"), user("hi"), asst("hello"), big)
	images := numbered(sys("s"), Message{Role: "user", Content: "look", Images: make([]chat.Image, 30)})
	tests := []struct {
		policy  string
		msgs    []Message
		wantErr error
		check   func(t *testing.T, res Result)
	}{
		{OverflowShrink, msgs, nil, func(t *testing.T, res Result) {
			last := res.Messages[len(res.Messages)-1]
			if !last.Edited || !strings.Contains(last.Content, "tokens cut …]") || idOf(last) != 3 {
				t.Errorf("newest message not shrunk: %+v", last)
			}
			if !strings.Contains(res.Notice, "to fit the context window") {
				t.Errorf("notice %q", res.Notice)
			}
		}},
		{OverflowReject, msgs, ErrOverflow, nil},
		{OverflowForward, msgs, nil, func(t *testing.T, res Result) {
			if got := Total(res.Messages, counter); got <= 1000 {
				t.Errorf("forward cut the conversation to %d", got)
			}
		}},
		{OverflowShrink, images, ErrOverflow, nil}, // images cannot be cut
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			res, err := newTrimmer(t, Config{OnOverflow: tt.policy}).Trim(context.Background(), Request{}, tt.msgs, 1000, counter)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if tt.policy != OverflowForward {
				if got := Total(res.Messages, counter); got > 1000 {
					t.Errorf("total %d > 1000", got)
				}
			}
			tt.check(t, res)
		})
	}
}

func TestTrimModeNone(t *testing.T) {
	msgs := alternating(90, hundred)
	tr := newTrimmer(t, Config{Mode: "none"})
	res, err := tr.Trim(context.Background(), Request{}, msgs, 10000, counter)
	if err != nil || len(res.Messages) != 90 || res.Notice != "" {
		t.Errorf("none changed the conversation: %v %q", err, res.Notice)
	}
	// The window still bounds it: on_overflow applies.
	res, err = tr.Trim(context.Background(), Request{}, msgs, 5000, counter)
	if err != nil || res.Dropped != 0 || Total(res.Messages, counter) > 5000 {
		t.Errorf("none over the window: %v, dropped %d, %d tokens", err, res.Dropped, Total(res.Messages, counter))
	}
}

func TestTrimPerRequestMode(t *testing.T) {
	tr := newTrimmer(t, Config{})
	msgs := alternating(90, hundred)
	res, err := tr.Trim(context.Background(), Request{Mode: "token_budget"}, msgs, 10000, counter)
	if err != nil {
		t.Fatal(err)
	}
	if ids(res.Messages)[0] == 0 {
		t.Errorf("token_budget kept the first message, as smart would")
	}
	if _, err := tr.Trim(context.Background(), Request{Mode: "bogus"}, msgs, 10000, counter); !errors.Is(err, ErrUnknownMode) {
		t.Errorf("unknown mode: error = %v", err)
	}
	if _, err := tr.Strategy("summarize"); !errors.Is(err, ErrUnknownMode) || !strings.Contains(err.Error(), "needs a summarizer") {
		t.Errorf("summarize: error = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; nil for valid
	}{
		{"zero value", Config{}, nil},
		{"every mode", Config{Mode: "importance", Composite: []string{"tool_results", "selective"}}, nil},
		{"bad mode", Config{Mode: "magic"}, []string{"strategy.mode", `"magic"`}},
		{"summarizing mode", Config{Mode: "hybrid", Composite: []string{"summarize", "smart"}}, nil},
		{"target above threshold", Config{Threshold: 0.5, Target: 0.7}, []string{"strategy.target"}},
		{"threshold above 1", Config{Threshold: 1.5}, []string{"strategy.threshold"}},
		{"bad overflow", Config{OnOverflow: "explode"}, []string{"strategy.on_overflow"}},
		{"everything at once", Config{Mode: "x", Threshold: -1, OnOverflow: "y", Composite: []string{"z"}},
			[]string{"strategy.mode", "strategy.threshold", "strategy.on_overflow", "strategy.composite"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate: no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestNew(t *testing.T) {
	keep := TokenBudget{KeepTurn: true}
	yes := true
	tests := []struct {
		mode string
		cfg  Config
		want Strategy
	}{
		{"none", Config{}, None{}},
		{"token_budget", Config{}, keep},
		{"", Config{}, Composite{[]Strategy{Smart{Fill: true}, keep}}},
		{"smart", Config{Smart: SmartConfig{PreserveFirst: 1, PreserveLast: 4}}, Composite{[]Strategy{Smart{1, 4, true}, keep}}},
		{"composite", Config{}, Composite{[]Strategy{Smart{Fill: true}, keep}}},
		{"composite", Config{Composite: []string{"tool_results", "importance"}},
			Composite{[]Strategy{ToolResults{}, Importance{}, keep}}},
		{"selective", Config{Selective: SelectiveConfig{PreserveMarked: &yes}}, Composite{[]Strategy{Selective{PreserveMarked: true, Steady: true}, keep}}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			got, err := strategyFor(tt.mode, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("New (-want +got):\n%s", diff)
			}
		})
	}
}

func TestShrink(t *testing.T) {
	msgs := numbered(
		sys(lines(400)), user("read these"), call("a", "b"),
		result("a", lines(800)), result("b", lines(300)), user("and?"),
	)
	res := apply(t, Shrink{}, msgs, 1600)
	if got := Total(res.Messages, counter); got > 1600 {
		t.Errorf("total %d > 1600", got)
	}
	m := res.Messages
	if m[0].Edited {
		t.Errorf("system message cut, though cutting tool results was enough")
	}
	if !m[3].Edited || !m[4].Edited {
		t.Errorf("tool results not both cut to a common size: %v %v", m[3].Edited, m[4].Edited)
	}
	if d := counter.CountText(m[3].Content) - counter.CountText(m[4].Content); d < -2 || d > 2 {
		t.Errorf("tool results cut to different sizes: %d vs %d", counter.CountText(m[3].Content), counter.CountText(m[4].Content))
	}
	if res.Dropped != 0 || len(m) != len(msgs) {
		t.Errorf("shrink dropped messages")
	}
}

// TestShrinkKeepsSystemLast: the other messages are cut before the system
// prompt, which stays whole when it fits with the last message; when it
// does not, it and the last message are cut, the larger first, so that a
// short question is not cut for a long system prompt; the notice says
// what went of the system prompt.
func TestShrinkKeepsSystemLast(t *testing.T) {
	// 500, 1500, 1250 and 100 tokens.
	msgs := numbered(sys(lines(200)), user(lines(600)), asst(lines(500)), user(lines(40)))
	res := apply(t, Shrink{}, msgs, 1000)
	m := res.Messages
	if got := Total(m, counter); got > 1000 {
		t.Errorf("total %d > 1000", got)
	}
	if m[0].Edited || m[3].Edited {
		t.Errorf("system prompt (cut %v) or last message (cut %v) cut, though the middle was enough", m[0].Edited, m[3].Edited)
	}
	if !m[1].Edited || !m[2].Edited || strings.Contains(res.Notice, "system prompt") {
		t.Errorf("middle cut %v %v, notice %q", m[1].Edited, m[2].Edited, res.Notice)
	}

	// An agent's first request: a system prompt larger than the window.
	msgs = numbered(sys(lines(1200)), user(lines(40)))
	res = apply(t, Shrink{}, msgs, 2000)
	m = res.Messages
	if got := Total(m, counter); got > 2000 {
		t.Errorf("total %d > 2000", got)
	}
	if !m[0].Edited || m[1].Edited {
		t.Errorf("system prompt cut %v, question cut %v; want only the system prompt cut", m[0].Edited, m[1].Edited)
	}
	if !strings.Contains(res.Notice, "tokens out of the system prompt") || strings.Contains(res.Notice, "long message") {
		t.Errorf("notice %q does not say the system prompt was cut, and only it", res.Notice)
	}
}

// TestShrinkCutsLittleMore: when the middle, cut to its floor, leaves the
// conversation a few tokens over, the system prompt loses those tokens and
// at most a ninth more (the ladder's step), not a third of itself.
func TestShrinkCutsLittleMore(t *testing.T) {
	// A 2,500-token system prompt, a 60-token message between and a short
	// question: the middle can give about 20 tokens, 40 are needed.
	msgs := numbered(sys(lines(1000)), user(lines(24)), asst("ok"), user(lines(8)))
	total := Total(msgs, counter)
	target := total - 40
	res := apply(t, Shrink{}, msgs, target)
	m := res.Messages
	if got := Total(m, counter); got > target {
		t.Errorf("total %d > %d", got, target)
	}
	before, after := counter.CountText(msgs[0].Content), counter.CountText(m[0].Content)
	if !m[0].Edited || before-after > before/9+40 {
		t.Errorf("system prompt of %d tokens cut to %d for a 40-token overflow (notice %q)", before, after, res.Notice)
	}
	if m[3].Edited {
		t.Errorf("the question was cut")
	}
}

func TestLadder(t *testing.T) {
	for x, want := range map[int]int{1: shrinkFloor, 32: 32, 33: 32, 36: 36, 63: 60, 64: 64, 1000: 960, 2499: 2304, 4096: 4096, 4607: 4096, 4608: 4608} {
		if got := ladder(x); got != want {
			t.Errorf("ladder(%d) = %d, want %d", x, got, want)
		}
	}
}

func TestCutMiddle(t *testing.T) {
	tests := []struct {
		name string
		s    string
		keep int
	}{
		{"lines", lines(500), 100},
		{"one long line", strings.Repeat("abcdefghij", 500), 100},
		{"multi-byte", strings.Repeat("日本語のテキスト、", 300), 100},
		{"tiny keep", lines(500), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ok := cutMiddle(tt.s, tt.keep, counter)
			if !ok {
				t.Fatal("not cut")
			}
			if !utf8.ValidString(out) {
				t.Error("cut inside a UTF-8 sequence")
			}
			if n := counter.CountText(out); n > max(tt.keep, counter.CountText(cutNote(9999))) {
				t.Errorf("%d tokens left, want at most %d", n, tt.keep)
			}
			if !strings.Contains(out, "tokens cut …]") {
				t.Error("no note")
			}
			if tt.keep > 10 && (out[:8] != tt.s[:8] || out[len(out)-8:] != tt.s[len(tt.s)-8:]) {
				t.Error("start or end lost")
			}
		})
	}
	if out, ok := cutMiddle("short", 100, counter); ok || out != "short" {
		t.Errorf("short text cut: %q", out)
	}
}

func TestCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, sub := range subjects(t) {
		if _, err := sub.s.Apply(ctx, Input{Messages: alternating(4, 10), Target: 0, Counter: counter}); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: error = %v, want context.Canceled", sub.s.Name(), err)
		}
	}
}

func TestNilCounterAndOddInput(t *testing.T) {
	odd := []Message{
		{Role: ""}, {Role: "tool"}, {Role: "assistant", ToolCalls: []ToolCall{{}}}, {Role: "tool"},
		{Role: "weird", Importance: 7, HasImportance: true}, {Role: "user", Tokens: -5},
	}
	for _, sub := range subjects(t) {
		for _, c := range []Counter{nil, counter} {
			if _, err := sub.s.Apply(context.Background(), Input{Messages: odd, Target: 3, Counter: c}); err != nil {
				t.Errorf("%s: %v", sub.s.Name(), err)
			}
		}
		if _, err := sub.s.Apply(context.Background(), Input{Messages: nil, Target: 3, Counter: counter}); err != nil {
			t.Errorf("%s on nil: %v", sub.s.Name(), err)
		}
	}
	if m := (ToolResults{}).Compact(result("a", lines(2000)), nil); m.Edited {
		t.Error("Compact without a counter edited")
	}
}

// strategyFor is the strategy ctxproxy runs for mode under cfg, without a
// summarizer.
func strategyFor(mode string, cfg Config) (Strategy, error) {
	return newStrategy(mode, cfg.withDefaults(), nil, nil)
}
