package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

var references sync.Map // encoding → *tiktoken.Tiktoken

var referenceLoader sync.Once

// reference returns pkoukk/tiktoken-go's encoder, the reference the
// counter is checked against.
func reference(t testing.TB, enc string) *tiktoken.Tiktoken {
	t.Helper()
	referenceLoader.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
	if v, ok := references.Load(enc); ok {
		return v.(*tiktoken.Tiktoken)
	}
	e, err := tiktoken.GetEncoding(enc)
	if err != nil {
		t.Fatal(err)
	}
	references.Store(enc, e)
	return e
}

// alphabet mixes every class the patterns tell apart: ASCII letters of
// both cases and the contraction letters, digits, apostrophes,
// punctuation, every kind of ASCII and Unicode space and line break, and
// non-ASCII letters of each category (Lu, Ll, Lt, Lm, Lo), marks (Mn,
// Mc), numbers (Nd, Nl, No), symbols, and letters whose case folding is
// unusual (ſ, İ, the Kelvin sign).
var alphabet = []string{
	"a", "b", "e", "s", "t", "r", "v", "m", "l", "d", "x", "A", "S", "T", "R", "V", "M", "L", "D", "Q",
	"0", "1", "7", "9", "'", "'", "'", "’", ".", ",", ";", ":", "!", "?", "/", "\\", "-", "_", "(", ")",
	"[", "]", "{", "}", "\"", "#", "$", "%", "&", "*", "+", "<", "=", ">", "@", "^", "`", "|", "~",
	" ", " ", " ", " ", "  ", "\t", "\n", "\n", "\r", "\r\n", "\v", "\f",
	"\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u1680", "\u2009", "\u200b", "\ufeff",
	"é", "É", "ß", "ñ", "ǅ", "ʰ", "ˆ", "中", "文", "語", "ا", "ש", "ก", "한", "ー", "ー",
	"\u0301", "\u0308", "\u0903", "\u093f", "٣", "५", "Ⅻ", "½", "²", "😀", "👍🏽", "€", "©", "∑",
	"ſ", "İ", "ı", "K", "Å", "ﬁ", "ǈ", "Σ", "ς", "Я", "ё",
	"hello", "World", "HTTP", "don't", "I'LL", "we've", "they'RE", "it's", "'s", "’s", "123456",
	"func", "    ", "\n\n", " \n ", "()", "=>", "://", "<|endoftext|>",
}

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

// shrink returns a small part of s on which count and ref still disagree.
func shrink(s string, differ func(string) bool) string {
	for changed := true; changed; {
		changed = false
		for size := len(s) / 2; size >= 1; size /= 2 {
			for i := 0; i+size <= len(s); {
				c := s[:i] + s[i+size:]
				if utf8.ValidString(c) && differ(c) {
					s, changed = c, true
					continue
				}
				i += size
			}
		}
	}
	return s
}

// The counter gives tiktoken's counts, token for token, on text built to
// hit every branch of both patterns, and on real text.
func TestTiktokenMatchesReference(t *testing.T) {
	for _, enc := range []string{EncodingCL100K, EncodingO200K} {
		t.Run(enc, func(t *testing.T) {
			ref := reference(t, enc)
			tk := mustTiktoken(t, enc)
			differ := func(s string) bool { return tk.enc.count(s) != len(ref.EncodeOrdinary(s)) }
			texts := []string{readTestdata(t, "chat_en.txt"), readTestdata(t, "mixed.txt")}
			rng := rand.New(rand.NewPCG(7, uint64(len(enc))))
			for range 3000 {
				texts = append(texts, randomText(rng, 1+rng.IntN(60)))
			}
			// All of it at once: chunked at spaces and counted in
			// parallel, the count must not change.
			all := strings.Join(texts, " ")
			if got, want := tk.Count(all), len(ref.EncodeOrdinary(all)); got != want {
				t.Errorf("Count of %d bytes = %d, tiktoken-go %d", len(all), got, want)
			}
			fails := 0
			for _, s := range texts {
				if differ(s) {
					min := shrink(s, differ)
					t.Errorf("count %d, tiktoken-go %d on %+q (from %d bytes)", tk.enc.count(min), len(ref.EncodeOrdinary(min)), min, len(s))
					if fails++; fails == 5 {
						t.FailNow()
					}
				}
			}
		})
	}
}

// FuzzTiktoken compares with tiktoken-go on any valid UTF-8 input
// (go test -fuzz FuzzTiktoken ./budget).
func FuzzTiktoken(f *testing.F) {
	for _, s := range []string{"Hello, world!", "don't  stop\n\n  me", "中文 text ʰé\u0301 123456 'S", "\u00a0\u3000x"} {
		f.Add(s)
	}
	refs := map[string]*tiktoken.Tiktoken{}
	tks := map[string]*Tiktoken{}
	for _, enc := range []string{EncodingCL100K, EncodingO200K} {
		refs[enc], tks[enc] = reference(f, enc), mustTiktoken(f, enc)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || len(s) > maxRun {
			return
		}
		for enc, ref := range refs {
			if got, want := tks[enc].enc.count(s), len(ref.EncodeOrdinary(s)); got != want {
				t.Errorf("%s: count %d, tiktoken-go %d on %+q", enc, got, want, s)
			}
		}
	})
}

func ExampleTiktoken() {
	tk, err := NewTiktoken(EncodingCL100K)
	if err != nil {
		panic(err)
	}
	fmt.Println(tk.Count("Hello, world!"))
	// Output: 4
}
