package exact

import (
	"encoding/json"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/tokenizer"
)

// TestBPEAsOllama: the compact vocabulary counts every text as Ollama's
// own BytePairEncoding encodes it, for each set of pre-tokenizer
// expressions Ollama's engine uses (DeepSeek V3's leave text between
// matches, where Ollama's splitter repeats what came before), with
// merges that offer a word several paths and equal ranks.
func TestBPEAsOllama(t *testing.T) {
	v := vocabgen.BPE(6000, "qwen2", 7)
	merges := withDetours(v.Tokens, v.Merges)
	ollamaVocab := &tokenizer.Vocabulary{Values: v.Tokens, Types: v.Types, Merges: merges}
	compact := newBPEVocab(v.Tokens, merges)
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{hardText(), "aaaa bbbb 1111111 ----- !!!!\n\n\n   \t"}
	for i := range 60 {
		texts = append(texts, vocabgen.Text(40+rng.IntN(400), uint64(i)))
	}
	for name, exprs := range map[string][]string{"default": nil, "llama3": {regexLlama3}, "qwen2": {regexQwen2},
		"tekken": {regexTekken}, "o200k": {regexO200k}, "deepseek-v3": deepseekV3} {
		ollama := tokenizer.NewBytePairEncoding(ollamaVocab, exprs...)
		ours := newBPE(compact, exprs, false, true)
		for _, text := range texts {
			ids, err := ollama.Encode(text, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := ours.count(text); got != len(ids) {
				t.Errorf("%s: %d tokens, Ollama's tokenizer %d, for %.80q", name, got, len(ids), text)
			}
		}
	}
}

// TestBPETokenize: Tokenize and Detokenize of a byte-level BPE model give
// the ids and the text Ollama's tokenizer gives, special tokens, BOS and
// all.
func TestBPETokenize(t *testing.T) {
	v := vocabgen.BPE(4000, "llama-bpe", 12).WithSpecials("<|eot_id|>")
	kv := ollamaEngine(v.KV())
	m, err := New(Show{Version: ollama017, ModelInfo: kv, Template: templates["chatml"]})
	if err != nil {
		t.Fatal(err)
	}
	ref := tokenizer.NewBytePairEncoding(&tokenizer.Vocabulary{Values: v.Tokens, Types: v.Types, Merges: v.Merges,
		BOS: []int32{int32(v.BOS)}, EOS: []int32{int32(v.EOS)}, AddBOS: v.AddBOS}, Pretokenizer(v.Pre)...)
	for i, text := range []string{hardText(), "<|im_start|>user\nhi<|im_end|><|eot_id|>x", vocabgen.Text(3000, 5), "\x00\xad é"} {
		for _, special := range []bool{false, true} {
			want, _ := ref.Encode(text, special)
			got, err := m.Tokenize(text, special)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("text %d, addSpecial %v: ids %v, Ollama's %v (%v)", i, special, got, want, err)
			}
			wantText, _ := ref.Decode(want)
			if gotText, err := m.Detokenize(got); err != nil || gotText != wantText {
				t.Fatalf("text %d: decoded %q, Ollama's %q (%v)", i, gotText, wantText, err)
			}
		}
	}
	if _, err := m.Detokenize([]int32{int32(len(v.Tokens))}); err == nil {
		t.Error("an id outside the vocabulary decoded")
	}
}

// TestBPEVocabRoundTrip: the compact vocabulary gives back the tokens and
// the merges it was built from, later duplicates winning as in Ollama's
// maps.
func TestBPEVocabRoundTrip(t *testing.T) {
	v := vocabgen.BPE(3000, "llama-bpe", 9)
	c := newBPEVocab(v.Tokens, v.Merges)
	if got := mergesOf(c); strings.Join(got, "\n") != strings.Join(v.Merges, "\n") {
		t.Fatal("merges differ")
	}
	for i, tok := range v.Tokens {
		if c.id(tok) != int32(i) || c.token(int32(i)) != tok {
			t.Fatalf("id(%q) = %d, token(%d) = %q", tok, c.id(tok), i, c.token(int32(i)))
		}
	}
	// Every merge's rank is its line; a pair no line names has none.
	for rank, m := range v.Merges {
		left, right, _ := strings.Cut(m, " ")
		if got := c.rank(c.id(left), c.id(right)); got != rank {
			t.Fatalf("rank(%q) = %d, want %d", m, got, rank)
		}
	}
	if c.id("no such token") != -1 || c.rank(c.id("<|im_end|>"), c.id("<|im_end|>")) != -1 || c.rank(-1, 0) != -1 {
		t.Error("lookups of what is not there answered")
	}
	dup := newBPEVocab([]string{"a", "b", "a"}, []string{"a b", "b a", "a b"})
	if dup.id("a") != 2 || dup.rank(2, 1) != 2 {
		t.Errorf("duplicates: id(a) %d, rank(a b) %d; want the later, 2 and 2", dup.id("a"), dup.rank(2, 1))
	}
}

// withDetours adds, after merges, a merge for every other way to split
// a token into two tokens, as vocabularies converted from tiktoken have
// (Llama 3's 280,000 merges for 128,000 tokens).
func withDetours(tokens, merges []string) []string {
	index := map[string]bool{}
	for _, tok := range tokens {
		index[tok] = true
	}
	have := map[string]bool{}
	for _, m := range merges {
		have[m] = true
	}
	out := append([]string(nil), merges...)
	for _, tok := range tokens {
		r := []rune(tok)
		for i := 1; i < len(r); i++ {
			m := string(r[:i]) + " " + string(r[i:])
			if index[string(r[:i])] && index[string(r[i:])] && !have[m] {
				out = append(out, m)
				have[m] = true
			}
		}
	}
	return out
}

func hardText() string {
	return "Totals: 1234567 and 3.14159, 2026-11-27.\n\n```go\nfunc main() {}\n```\n\n東京の天気は晴れです。 北京 42 度\n\t\t  indented   spaces ]}}}}}\n don't"
}

// BenchmarkTokenizerHeap reports the heap a tokenizer of a 128,000-token
// vocabulary keeps after a GC (MB-heap), built from its /api/show JSON
// and used once, as the proxy builds one per model digest: /plain for
// the generated vocabulary (a merge per token), /realistic for one shaped
// like a real 128k one, 6.5 bytes a token on average and 237,000 merges
// (every other split of a token into two tokens added, as vocabularies
// converted from tiktoken have them: Llama 3 has 280,000); /spm-128k
// and /spm-262k for SentencePiece (Gemma's are 262,144 tokens);
// /realistic-second: a second model of the realistic vocabulary, under
// another template, while the first is held (the tables are shared).
//
//	go test ./budget/exact -run '^$' -bench TokenizerHeap -benchtime 3x
func BenchmarkTokenizerHeap(b *testing.B) {
	v := vocabgen.BPE(128000, "qwen2", 31)
	b.Run("plain", func(b *testing.B) { benchmarkHeap(b, v) })
	v.Merges = withDetours(v.Tokens, v.Merges)
	b.Run("realistic", func(b *testing.B) { benchmarkHeap(b, v) })
	b.Run("realistic-second", func(b *testing.B) { benchmarkHeap(b, v, v) })
	b.Run("spm-128k", func(b *testing.B) { benchmarkHeap(b, vocabgen.SentencePiece(128000, 3)) })
	b.Run("spm-262k", func(b *testing.B) { benchmarkHeap(b, vocabgen.SentencePiece(262144, 3)) })
}

// benchmarkHeap: the heap a tokenizer of v keeps, built while a model of
// each vocabulary in others (another template) is held.
func benchmarkHeap(b *testing.B, v vocabgen.Vocab, others ...vocabgen.Vocab) {
	var held []*Tokenizer
	for _, o := range others {
		m, err := New(Show{ModelInfo: o.KV(), Template: "{{ .System }}{{ .Prompt }}"})
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, m)
	}
	data, _ := json.Marshal(map[string]any{"model_info": v.KV(), "template": "{{ .Prompt }}"})
	text := vocabgen.Text(2000, 1)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var grew float64
	for b.Loop() {
		before := heap()
		var show Show
		if err := json.Unmarshal(data, &show); err != nil {
			b.Fatal(err)
		}
		m, err := New(show)
		if err != nil {
			b.Fatal(err)
		}
		show = Show{}
		if _, err := m.CountText(text); err != nil {
			b.Fatal(err)
		}
		grew = max(grew, float64(heap())-float64(before))
		runtime.KeepAlive(m)
	}
	b.ReportMetric(grew/1e6, "MB-heap")
	runtime.KeepAlive(held)
}

// FuzzBPEAsOllama: for any text, the compact BPE in Ollama's order counts
// what Ollama's tokenizer encodes, with Llama 3's and DeepSeek V3's
// expressions (the second leaves text between matches).
func FuzzBPEAsOllama(f *testing.F) {
	v := vocabgen.BPE(3000, "llama-bpe", 8)
	merges := withDetours(v.Tokens, v.Merges)
	compact := newBPEVocab(v.Tokens, merges)
	vocab := &tokenizer.Vocabulary{Values: v.Tokens, Types: v.Types, Merges: merges}
	type pair struct {
		ours   *bpe
		ollama tokenizer.BytePairEncoding
	}
	var pairs []pair
	for _, exprs := range [][]string{{regexLlama3}, deepseekV3} {
		pairs = append(pairs, pair{newBPE(compact, exprs, false, true), tokenizer.NewBytePairEncoding(vocab, exprs...)})
	}
	for _, s := range []string{hardText(), "}}}}}}}\n\n", "a  b\t\tc 12345 東京", "\xff\xfe bad utf-8", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range pairs {
			ids, err := p.ollama.Encode(s, false)
			if err != nil {
				t.Skip()
			}
			if got := p.ours.count(s); got != len(ids) {
				t.Fatalf("%q: %d tokens, Ollama's tokenizer %d", s, got, len(ids))
			}
		}
	})
}

// mergesOf returns the merges of v that can apply, in rank order, as
// tokenizer.ggml.merges holds them.
func mergesOf(v *bpeVocab) []string {
	n := int32(-1)
	for _, r := range v.ranks {
		n = max(n, r)
	}
	out := make([]string, n+1)
	for i, key := range v.pairs {
		if key != 0 {
			out[v.ranks[i]] = v.token(int32(key>>32)-1) + " " + v.token(int32(key&0xffffffff)-1)
		}
	}
	return out
}
