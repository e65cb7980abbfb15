package budget

import (
	"math"
	"os"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
)

// readTestdata reads one of the tokenizer's sample texts.
func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("tokenizer/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustTiktoken(t testing.TB, enc string) *tokenizer.Tiktoken {
	t.Helper()
	tk, err := tokenizer.NewTiktoken(enc)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func within(got, want int, frac float64) bool {
	return math.Abs(float64(got-want)) <= frac*float64(want)
}
