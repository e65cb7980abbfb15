package tokenizer

import (
	"math"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustTiktoken(t testing.TB, enc string) *Tiktoken {
	t.Helper()
	tk, err := NewTiktoken(enc)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func within(got, want int, frac float64) bool {
	return math.Abs(float64(got-want)) <= frac*float64(want)
}

// A simple text is counted positive and within 5%.
// cl100k_base encodes "Hello, world!" as Hello | , | world | ! (4 tokens).
func TestTiktokenCountsSimpleText(t *testing.T) {
	for _, enc := range []string{EncodingCL100K, EncodingO200K} {
		got := mustTiktoken(t, enc).Count("Hello, world!")
		if got <= 0 || !within(got, 4, 0.05) {
			t.Errorf("%s: Count(%q) = %d, want 4 (±5%%)", enc, "Hello, world!", got)
		}
	}
}

func TestNewTiktokenUnknownEncoding(t *testing.T) {
	if _, err := NewTiktoken("no_such_base"); err == nil {
		t.Fatal("NewTiktoken(no_such_base) succeeded")
	}
	// The failure is remembered, not retried.
	if _, err := NewTiktoken("no_such_base"); err == nil {
		t.Fatal("second NewTiktoken(no_such_base) succeeded")
	}
}

// The approximate counter by words: 1.3 tokens per word.
func TestApproxTokensPerWord(t *testing.T) {
	got := Approx{TokensPerWord: WordTokens}.Count("one two three four five")
	if got < 6 || got > 7 {
		t.Errorf("Count = %d, want 6–7", got)
	}
}

func TestApprox(t *testing.T) {
	tests := []struct {
		name string
		a    Approx
		text string
		want int
	}{
		{"empty", Approx{}, "", 0},
		{"one byte", Approx{}, "a", 1},
		{"four per token", Approx{}, strings.Repeat("x", 400), 100},
		{"rounds up", Approx{}, "hello", 2},
		{"3.5 per token", Approx{CharsPerToken: 3.5}, strings.Repeat("x", 35), 10},
		{"negative rate means default", Approx{CharsPerToken: -1}, strings.Repeat("x", 8), 2},
		{"infinite rate means default", Approx{CharsPerToken: math.Inf(1)}, strings.Repeat("x", 8), 2},
		{"bytes not runes", Approx{}, "日本語", 3}, // 9 bytes
		{"words", Approx{TokensPerWord: 1.3}, "  a\tb\nc  ", 4},
		{"words unicode space", Approx{TokensPerWord: 1}, "a\u3000b\u00a0c", 3},
		{"words none", Approx{TokensPerWord: 1.3}, " \n\t ", 0},
		{"invalid utf-8", Approx{}, "\xff\xfe\xfd\xfc\xfb", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Count(tt.text); got != tt.want {
				t.Errorf("Count(%q) = %d, want %d", tt.text, got, tt.want)
			}
		})
	}
}

// The 4-characters-per-token heuristic is
// within ±20% of the real count on a realistic English chat.
func TestApproxWithin20PercentOfTiktoken(t *testing.T) {
	text := readTestdata(t, "chat_en.txt")
	for _, enc := range []string{EncodingCL100K, EncodingO200K} {
		want := mustTiktoken(t, enc).Count(text)
		got := Approx{}.Count(text)
		if !within(got, want, 0.20) {
			t.Errorf("%s: chars/4 = %d, tiktoken = %d: off by more than 20%%", enc, got, want)
		}
		t.Logf("%s: chars/4 = %d, tiktoken = %d (%+.1f%%)", enc, got, want, 100*float64(got-want)/float64(want))
	}
}

// The approximate counter divides bytes, not runes: on mixed-script text
// that is the closer estimate of a BPE count.
func TestApproxBytesNotRunes(t *testing.T) {
	text := readTestdata(t, "mixed.txt")
	want := mustTiktoken(t, EncodingCL100K).Count(text)
	bytes := Approx{}.Count(text)
	runes := ceil(float64(utf8.RuneCountInString(text)) / 4)
	t.Logf("cl100k %d, bytes/4 %d (%+.0f%%), runes/4 %d (%+.0f%%)", want,
		bytes, 100*float64(bytes-want)/float64(want), runes, 100*float64(runes-want)/float64(want))
	if math.Abs(float64(bytes-want)) >= math.Abs(float64(runes-want)) {
		t.Errorf("bytes/4 (%d) is not closer to %d than runes/4 (%d)", bytes, want, runes)
	}
	if !within(bytes, want, 0.20) {
		t.Errorf("bytes/4 = %d, cl100k = %d: off by more than 20%%", bytes, want)
	}
}

func TestTiktokenKnownCounts(t *testing.T) {
	tests := []struct {
		enc, text string
		want      int
	}{
		{EncodingCL100K, "", 0},
		{EncodingCL100K, "hello world", 2},
		{EncodingCL100K, "Hi there!", 3},
		// Special-token text is ordinary text in a message: counted, no panic.
		{EncodingCL100K, "<|endoftext|>", 7},
		{EncodingO200K, "<|endoftext|>", 7},
		{EncodingO200K, "hello world", 2},
	}
	for _, tt := range tests {
		if got := mustTiktoken(t, tt.enc).Count(tt.text); got != tt.want {
			t.Errorf("%s Count(%q) = %d, want %d", tt.enc, tt.text, got, tt.want)
		}
	}
}

// Chunking, and counting chunks in parallel, changes no count: cuts fall
// where pieces end anyway.
func TestTiktokenChunkedMatchesWhole(t *testing.T) {
	tk := mustTiktoken(t, EncodingCL100K)
	text := strings.Repeat(readTestdata(t, "chat_en.txt")+"\n", 40) // ~210 KB: chunked and parallel
	if got, want := tk.Count(text), len(reference(t, EncodingCL100K).EncodeOrdinary(text)); got != want {
		t.Errorf("Count = %d, tiktoken-go = %d", got, want)
	}
}

func TestSplitCoversText(t *testing.T) {
	tests := map[string]string{
		"empty":       "",
		"short":       "hello world",
		"long run":    strings.Repeat("a", 3*maxRun+7),
		"long spaces": strings.Repeat(" ", 2*maxRun+1) + "x",
		"prose":       strings.Repeat("lorem ipsum dolor sit amet ", 2000),
		"cjk run":     strings.Repeat("会議は木曜日", 200),
		"invalid":     strings.Repeat("\xff\xfe", maxRun),
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			var parts []string
			split(s, func(p string) { parts = append(parts, p) })
			if got := strings.Join(parts, ""); got != s {
				t.Fatalf("pieces do not rebuild the text")
			}
			for _, p := range parts {
				if p == "" {
					t.Errorf("empty piece")
				}
				if utf8.ValidString(s) && !utf8.ValidString(p) {
					t.Errorf("piece cuts a rune: %q", p[:min(len(p), 16)])
				}
			}
		})
	}
}

// Bad input is counted, never a panic.
func TestTiktokenBadInput(t *testing.T) {
	tk := mustTiktoken(t, EncodingCL100K)
	huge := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 10<<20/45)
	tests := []struct {
		name string
		text string
		min  int
		max  int
	}{
		{"invalid utf-8", "\xff\xfe abc \xc3", 1, 20},
		{"nul bytes", "a\x00b\x00c", 1, 10},
		{"special tokens", "<|im_start|>user<|im_end|><|endoftext|><|fim_prefix|>", 10, 60},
		{"pathological run", strings.Repeat("a", 1<<20), 1 << 15, 1 << 19},
		{"pathological spaces", strings.Repeat(" ", 200000), 1, 200000},
		// 10 MB: estimated from samples, about 10 tokens per sentence.
		{"10 MB message", huge, 10 * len(huge) / 45 * 95 / 100, 10 * len(huge) / 45 * 105 / 100},
		{"10 MB invalid", strings.Repeat("\xff", 10<<20), 1, 20 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tk.Count(tt.text); got < tt.min || got > tt.max {
				t.Errorf("Count = %d, want in [%d, %d]", got, tt.min, tt.max)
			}
		})
	}
}

// At 3.5 characters a token the count is ceil(length / 3.5).
func TestApproxCharsPerTokenRoundsUp(t *testing.T) {
	a := Approx{CharsPerToken: 3.5}
	for text, want := range map[string]int{"hello": 2, "": 0, "abcdefg": 2, "abcdefgh": 3} {
		if got := a.Count(text); got != want {
			t.Errorf("Count(%q) = %d, want %d", text, got, want)
		}
	}
}

// The default approximation is ceil(length / 4).
func TestApproxDefaultIsFourBytesPerToken(t *testing.T) {
	for text, want := range map[string]int{"hello": 2, "abcd": 1, "abcde": 2, "": 0} {
		if got := (Approx{}).Count(text); got != want {
			t.Errorf("Count(%q) = %d, want %d", text, got, want)
		}
	}
}
