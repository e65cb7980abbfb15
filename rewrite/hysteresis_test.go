package rewrite

import (
	"context"
	"math/rand/v2"
	"testing"
)

func TestBudget(t *testing.T) {
	tests := []struct {
		name              string
		total, limit      int
		threshold, target float64
		want              int
		act               bool
	}{
		{"below threshold", 7999, 10000, 0.8, 0.6, 7999, false},
		{"at threshold", 8000, 10000, 0.8, 0.6, 6000, true},
		{"just past", 8100, 10000, 0.8, 0.6, 6100, true},
		{"one step later", 10100, 10000, 0.8, 0.6, 6100, true},
		{"far past", 25999, 10000, 0.8, 0.6, 7999, true},
		{"no hysteresis", 12000, 10000, 1, 1, 10000, true},
		{"no limit", 5000, 0, 0.8, 0.6, 5000, false},
		{"empty", 0, 10000, 0.8, 0.6, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, act := Budget(tt.total, tt.limit, tt.threshold, tt.target)
			if got != tt.want || act != tt.act {
				t.Errorf("Budget(%d, %d) = %d, %v; want %d, %v", tt.total, tt.limit, got, act, tt.want, tt.act)
			}
		})
	}
}

// isPrefix reports whether the backend can reuse its cache of prev for
// cur: prev is a prefix of cur.
func isPrefix(prev, cur []Message) bool {
	if len(prev) > len(cur) {
		return false
	}
	for i := range prev {
		a, b := &prev[i], &cur[i]
		if a.Role != b.Role || a.Content != b.Content || a.Synthetic != b.Synthetic || string(a.Raw) != string(b.Raw) {
			return false
		}
	}
	return true
}

// TestHysteresisKeepsPrefix grows a conversation turn by turn and, as the
// proxy does, trims the whole history on each turn. It counts the turns on
// which the forwarded conversation is not an extension of the previous
// turn's (the backend's prompt cache misses from the cut on), with
// hysteresis (threshold 0.80, target 0.60) and with cutting to the limit
// every time. Questions are short and answers long; "selective-chat" has
// long questions and short answers, so that the user messages alone exceed
// the target and selective drops the oldest messages of every role.
func TestHysteresisKeepsPrefix(t *testing.T) {
	const (
		limit = 16000
		turns = 300
	)
	for _, mode := range []string{"smart", "token_budget", "importance", "selective", "selective-chat", "composite", "mask"} {
		t.Run(mode, func(t *testing.T) {
			question, answer := 10, 50
			if mode == "selective-chat" {
				mode, question, answer = "selective", 200, 5
			}
			hyst, err := NewTrimmer(Config{Mode: mode}, nil)
			if err != nil {
				t.Fatal(err)
			}
			every, err := NewTrimmer(Config{Mode: mode, Threshold: 1, Target: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 7))
			history := numbered(sys("You are a helpful assistant."))
			var prevH, prevE []Message
			changesH, changesE, trimmed := 0, 0, 0
			for turn := range turns {
				u := user(pad("question ", 4*(question+rng.IntN(3*question))))
				u.Raw = raw(len(history))
				history = append(history, u)

				resH, err := hyst.Trim(context.Background(), Request{}, history, limit, counter)
				if err != nil {
					t.Fatal(err)
				}
				resE, err := every.Trim(context.Background(), Request{}, history, limit, counter)
				if err != nil {
					t.Fatal(err)
				}
				if resH.Dropped > 0 {
					trimmed++
					if got := Total(resH.Messages, counter); got >= 0.8*limit {
						t.Fatalf("turn %d: forwarded %d tokens, at or over the threshold", turn, got)
					}
				}
				if prevH != nil && !isPrefix(prevH, resH.Messages) {
					changesH++
				}
				if prevE != nil && !isPrefix(prevE, resE.Messages) {
					changesE++
				}
				prevH, prevE = resH.Messages, resE.Messages

				a := asst(pad("answer ", 4*(answer+rng.IntN(10*answer))))
				a.Raw = raw(len(history))
				history = append(history, a)
			}
			t.Logf("%s: %d turns, %d trimmed; forwarded prefix changed on %d turns with hysteresis, %d when cutting to the limit every time",
				mode, turns, trimmed, changesH, changesE)
			if trimmed < turns/2 {
				t.Fatalf("only %d turns trimmed: the test does not exercise trimming", trimmed)
			}
			if changesH*5 > changesE {
				t.Errorf("prefix changed %d times with hysteresis, %d without: want at most a fifth", changesH, changesE)
			}
		})
	}
}
