package tokenizer

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/parallel"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// Tiktoken counts with one of OpenAI's BPE encodings, cl100k_base or
// o200k_base, with the vocabularies embedded in the binary
// (pkoukk/tiktoken-go-loader: no download at run time).
//
// Counts are tiktoken's: the same pieces, merged the same way, checked
// against pkoukk/tiktoken-go's EncodeOrdinary on generated and real text
// (TestTiktokenMatchesReference). The pre-tokenizer is hand-written
// instead of a backtracking regular expression and only counts are kept,
// which makes counting several times faster and free of allocations
// (docs/benchmarks.md). Text is counted as ordinary text: a special-token
// string such as "<|endoftext|>" in a message costs what its characters
// cost, as it does when a backend renders user content.
type Tiktoken struct {
	name string
	enc  *bpe
}

var encodings sync.Map // encoding name → *encodingOnce

type encodingOnce struct {
	once sync.Once
	enc  *bpe
	err  error
}

// pieceFuncs are the pre-tokenizers of the supported encodings.
var pieceFuncs = map[string]func(string, int) int{
	EncodingCL100K: cl100kPiece,
	EncodingO200K:  o200kPiece,
}

// NewTiktoken returns a counter for the named encoding ("cl100k_base",
// "o200k_base"). Each encoding is built once per process (reading its
// vocabulary takes 60–80 ms and 5–10 MB) and shared by every counter that
// uses it; an error is remembered too.
func NewTiktoken(encoding string) (*Tiktoken, error) {
	v, ok := encodings.Load(encoding)
	if !ok {
		v, _ = encodings.LoadOrStore(encoding, new(encodingOnce))
	}
	e := v.(*encodingOnce)
	e.once.Do(func() {
		piece, ok := pieceFuncs[encoding]
		if !ok {
			e.err = fmt.Errorf("tokenizer: encoding %q is not supported (cl100k_base, o200k_base)", encoding)
			return
		}
		ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(encoding + ".tiktoken")
		if err != nil {
			e.err = fmt.Errorf("tokenizer: load encoding %q: %w", encoding, err)
			return
		}
		table, err := newRankTable(ranks)
		if err != nil {
			e.err = fmt.Errorf("tokenizer: load encoding %q: %w", encoding, err)
			return
		}
		e.enc = &bpe{ranks: table, piece: piece}
	})
	if e.err != nil {
		return nil, e.err
	}
	return &Tiktoken{name: encoding, enc: e.enc}, nil
}

// Name returns the encoding name.
func (t *Tiktoken) Name() string { return t.name }

// Sizes that keep tokenizing fast and bounded.
const (
	// chunkBytes is the length of text counted at once, and the unit of
	// parallel work. A cut is made only before an ASCII space that
	// follows a non-space: every piece of both encodings ends there (no
	// pattern takes a space after a non-space; a line break it may), so
	// such cuts change no count.
	chunkBytes = 16 << 10
	// maxRun bounds a run of non-space (or of space) bytes. Byte-pair
	// merging is quadratic in the length of one piece: 4 KB of "aaaa…"
	// cost tiktoken-go 8 ms, and 1 MB would cost minutes. Real text
	// rarely has 512-byte runs (long URLs, base64, unspaced CJK); cutting
	// one costs at most a token per cut.
	maxRun = 512
	// exactBytes is the largest text counted in full; beyond it the count
	// is extrapolated from evenly spaced samples, so a 10 MB message costs
	// about as much as a 512 KB one.
	exactBytes = 1 << 20
	samples    = 16
	sampleSize = 32 << 10
	// parallelBytes is the text length from which chunks are counted on
	// several cores.
	parallelBytes = 64 << 10
)

// Count returns the number of tokens of text.
func (t *Tiktoken) Count(text string) int {
	if text == "" {
		return 0
	}
	if !utf8.ValidString(text) {
		// tiktoken-go would turn each invalid byte into a U+FFFD of three
		// bytes; one per invalid sequence keeps runs of garbage short.
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	if len(text) > exactBytes {
		return t.sampled(text)
	}
	if len(text) <= maxRun {
		return t.enc.count(text)
	}
	if len(text) < parallelBytes || runtime.GOMAXPROCS(0) == 1 {
		n := 0
		split(text, func(s string) { n += t.enc.count(s) })
		return n
	}
	var parts []string
	split(text, func(s string) { parts = append(parts, s) })
	var total atomic.Int64
	parallel.For(len(parts), func(i int) {
		total.Add(int64(t.enc.count(parts[i])))
	})
	return int(total.Load())
}

// sampled counts samples of a huge text and scales by its length.
func (t *Tiktoken) sampled(text string) int {
	step := (len(text) - sampleSize) / (samples - 1)
	var tokens, size atomic.Int64
	parallel.For(samples, func(i int) {
		start := runeStart(text, i*step)
		end := runeStart(text, min(len(text), i*step+sampleSize))
		if end <= start {
			return
		}
		s := text[start:end]
		n := 0
		split(s, func(s string) { n += t.enc.count(s) })
		tokens.Add(int64(n))
		size.Add(int64(len(s)))
	})
	if size.Load() == 0 {
		return Approx{}.Count(text)
	}
	return ceil(float64(tokens.Load()) * float64(len(text)) / float64(size.Load()))
}

// runeStart moves i back to the start of the rune it falls in (at most
// three bytes, so invalid UTF-8 cannot make it wander).
func runeStart(s string, i int) int {
	for j := 0; j < utf8.UTFMax-1 && i > 0 && i < len(s) && !utf8.RuneStart(s[i]); j++ {
		i--
	}
	return i
}

// split calls fn with consecutive pieces of s that together are s: pieces
// of about chunkBytes cut before an ASCII space that follows a non-space,
// and runs longer than maxRun cut at a rune boundary.
func split(s string, fn func(string)) {
	start, run := 0, 0
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		sp := c == ' ' || c == '\n' || c == '\t' || c == '\r'
		if sp != space {
			space, run = sp, 0
			if c == ' ' && i-start >= chunkBytes {
				fn(s[start:i])
				start = i
			}
		}
		run++
		if run > maxRun && utf8.RuneStart(c) {
			fn(s[start:i])
			start, run = i, 1
		}
	}
	if start < len(s) {
		fn(s[start:])
	}
}
