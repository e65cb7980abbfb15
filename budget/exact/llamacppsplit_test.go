package exact

import (
	"slices"
	"strings"
	"testing"
)

// cutPieces applies a splitter to s and returns the pieces as text.
func cutPieces(split func([]rune) []int, s string) []string {
	r := []rune(s)
	var out []string
	for _, n := range split(r) {
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	return out
}

// The expected pieces follow llama.cpp's code (src/unicode.cpp in Ollama
// v0.17.4's vendored copy) step by step.
func TestKimiK2Pieces(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"中文和English混合", []string{"中文和", "English", "混合"}},
		{"  spaces\n\n  next", []string{" ", " spaces", "\n\n", " ", " next"}},
		{"I'm you'RE they'll", []string{"I'm", " you'RE", " they'll"}},
		{"1234567", []string{"123", "456", "7"}},
		{"x=1; y!!\n\nz", []string{"x", "=", "1", ";", " y", "!!\n\n", "z"}},
		{"a  b", []string{"a", " ", " b"}},
		{"end   ", []string{"end", "   "}},
		{"(café)", []string{"(café", ")"}},
		{"naïve\u0301x", []string{"naïve", "\u0301x"}}, // a mark is not a letter here: it leads the next word
		{"日本語です", []string{"日本語", "です"}},               // kana are letters, not Han
		{"$100,000", []string{"$", "100", ",", "000"}},
		{"\t\tx", []string{"\t", "\tx"}},
		{"", nil},
	} {
		got := cutPieces(kimiK2Pieces, c.in)
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
		if strings.Join(got, "") != c.in {
			t.Errorf("%q: the pieces do not cover the text: %q", c.in, got)
		}
	}
}

func TestAFMoEPieces(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"1234567", []string{"1", "234", "567"}},
		{"12345", []string{"12", "345"}},
		{"123", []string{"123"}},
		{"abc 12345 def", []string{"abc 12", "345", " def"}},
		{"no digits", []string{"no digits"}},
		{"x1y22z333", []string{"x1", "y22", "z333"}},
		{"", nil},
	} {
		if got := cutPieces(afmoePieces, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzLlamaCppSplitters: the hand-written splitters cut any text into
// non-empty pieces that cover it.
func FuzzLlamaCppSplitters(f *testing.F) {
	f.Add("Hello 中文 12345 '' \r\n  x")
	f.Fuzz(func(t *testing.T, s string) {
		for name, split := range customSplitters {
			r := []rune(s)
			total := 0
			for _, n := range split(r) {
				if n <= 0 {
					t.Fatalf("%s: a piece of %d runes", name, n)
				}
				total += n
			}
			if total != len(r) {
				t.Fatalf("%s: pieces of %d runes for %d", name, total, len(r))
			}
		}
	})
}
