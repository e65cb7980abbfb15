package rewrite

import (
	"strings"
	"testing"
)

func triggerTrimmer(t *testing.T, cfg Config) *Trimmer {
	t.Helper()
	cfg.Mode = "token_budget"
	tr, err := NewTrimmer(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func nonSystem(msgs []Message) int {
	n := 0
	for i := range msgs {
		if !isSystem(&msgs[i]) {
			n++
		}
	}
	return n
}

// TestTriggerTokens: trimming starts at strategy.trigger_tokens, below the
// threshold's share of the window.
func TestTriggerTokens(t *testing.T) {
	msgs := turns(20, 200) // about 2200 tokens: 22% of the window
	total := Total(msgs, counter)
	if res := mustTrim(t, triggerTrimmer(t, Config{}), Request{}, msgs, 10000); res.Dropped != 0 {
		t.Fatalf("trimmed at %d of 10000 without a trigger", total)
	}
	res := mustTrim(t, triggerTrimmer(t, Config{TriggerTokens: total - 100}), Request{}, msgs, 10000)
	if res.Dropped == 0 {
		t.Fatalf("not trimmed at %d tokens with trigger_tokens %d", total, total-100)
	}
	// Cut to the target's share of the trigger's step: below the trigger.
	if got := Total(res.Messages, counter); got >= total-100 {
		t.Errorf("%d tokens after trimming, trigger %d", got, total-100)
	}
	if res := mustTrim(t, triggerTrimmer(t, Config{TriggerTokens: total + 1}), Request{}, msgs, 10000); res.Dropped != 0 {
		t.Errorf("trimmed below trigger_tokens")
	}
}

// TestTriggerMessagesKeepMessages: at strategy.trigger_messages non-system
// messages the conversation is cut to the newest keep_messages.
func TestTriggerMessagesKeepMessages(t *testing.T) {
	tr := triggerTrimmer(t, Config{TriggerMessages: 30, KeepMessages: 10})
	short := turns(14, 200) // 28 messages
	if res := mustTrim(t, tr, Request{}, short, 100000); res.Dropped != 0 {
		t.Fatalf("trimmed %d messages below trigger_messages", res.Dropped)
	}
	msgs := turns(15, 200) // 30 messages
	res := mustTrim(t, tr, Request{}, msgs, 100000)
	if n := nonSystem(res.Messages); n != 10 || res.Messages[0].Role != "system" {
		t.Errorf("kept %d non-system messages (%s), want 10 after the system prompt", n, rolesOf(res.Messages))
	}
	if last := res.Messages[len(res.Messages)-1]; idOf(last) != len(msgs)-1 {
		t.Errorf("the newest message was not kept")
	}
}

// TestKeepTokens: strategy.keep_tokens replaces strategy.target; the cut
// keeps the system prompt and about that many tokens of the newest
// messages, with hysteresis: a conversation just over the trigger keeps
// at most keep_tokens plus one step of growth.
func TestKeepTokens(t *testing.T) {
	msgs := turns(40, 200) // about 4400 tokens
	total := Total(msgs, counter)
	sysCost := cost(&msgs[0], counter)
	tr := triggerTrimmer(t, Config{TriggerTokens: total - 50, KeepTokens: 1000})
	res := mustTrim(t, tr, Request{}, msgs, 100000)
	got := Total(res.Messages, counter)
	if got > sysCost+1000+50 || got < sysCost+1000-2*(3+50) {
		t.Errorf("%d tokens kept, want about %d", got, sysCost+1000)
	}
	// keep_messages and keep_tokens together: the smaller wins.
	tr = triggerTrimmer(t, Config{TriggerTokens: total - 50, KeepTokens: 1000, KeepMessages: 4})
	res = mustTrim(t, tr, Request{}, msgs, 100000)
	if n := nonSystem(res.Messages); n != 4 {
		t.Errorf("kept %d non-system messages, want 4", n)
	}
}

func TestTriggersValidate(t *testing.T) {
	err := Config{TriggerTokens: -1, TriggerMessages: -1, KeepTokens: -1, KeepMessages: -1}.Validate()
	for _, key := range []string{"trigger_tokens", "trigger_messages", "keep_tokens", "keep_messages"} {
		if err == nil || !strings.Contains(err.Error(), "strategy."+key) {
			t.Errorf("error %v lacks strategy.%s", err, key)
		}
	}
}

// TestSummaryPromptConfigurable: summarize.prompt replaces the built-in
// system prompt of summarizer calls, and one-off instructions (/compact)
// are appended to it.
func TestSummaryPromptConfigurable(t *testing.T) {
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{Prompt: "Summarize tersely, in French.", KeepRecent: 1}, f, CompactorOptions{})
	if _, err := c.Compact(t.Context(), session("p"), turns(8, hundred), counter); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) == 0 {
		t.Fatal("no summarizer call")
	}
	if sys, _ := reqs[0].Prompt(); sys != "Summarize tersely, in French." {
		t.Errorf("system prompt %q", sys)
	}
	if sys, _ := (SummaryRequest{}).Prompt(); sys != SummaryPrompt {
		t.Errorf("default system prompt %q", sys)
	}

	// Instructions: new summaries, written with them, kept apart from the
	// automatic ones.
	before := f.count()
	got, err := c.Compact(t.Context(), Request{Session: "p", Instructions: "Keep every file name."}, turns(8, hundred), counter)
	if err != nil || got.Summaries == 0 {
		t.Fatalf("compact with instructions: %v, %d summaries", err, got.Summaries)
	}
	reqs = f.requests()[before:]
	if len(reqs) != got.Summaries {
		t.Fatalf("%d calls for %d summaries: cached automatic summaries reused", len(reqs), got.Summaries)
	}
	sys, _ := reqs[0].Prompt()
	if !strings.HasPrefix(sys, "Summarize tersely, in French.") || !strings.HasSuffix(sys, "Instructions for this summary: Keep every file name.") {
		t.Errorf("system prompt with instructions %q", sys)
	}
}

// TestUntouched: a whole prompt within Untouched is never cut: below the
// threshold's share (or the one a request sets), and trigger_tokens;
// with a trigger by message count, no count of tokens tells.
func TestUntouched(t *testing.T) {
	msgs := turns(20, 200)
	total := Total(msgs, counter)
	for _, c := range []struct {
		cfg       Config
		threshold float64
		want      int
	}{
		{Config{}, 0, 8000},
		{Config{}, 0.6, 6000},
		{Config{TriggerTokens: 500}, 0, 500},
		{Config{TriggerMessages: 10}, 0, 0},
		{Config{KeepMessages: 4}, 0, 0},
	} {
		tr := triggerTrimmer(t, c.cfg)
		got := tr.Untouched(10000, c.threshold)
		if got != c.want {
			t.Errorf("%+v, threshold %v: %d, want %d", c.cfg, c.threshold, got, c.want)
		}
		if got >= total {
			// A conversation of that many tokens is left as it is.
			if res := mustTrim(t, tr, Request{Threshold: c.threshold}, msgs, 10000); res.Dropped != 0 || res.Notice != "" {
				t.Errorf("%+v: %d tokens within Untouched %d were cut", c.cfg, total, got)
			}
		}
	}
}
