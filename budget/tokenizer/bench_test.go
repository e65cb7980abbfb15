package tokenizer

import (
	"fmt"
	"strings"
	"testing"
)

// coldTexts is the contents of budget's benchmark conversation: a system
// prompt and 99 messages of 1 KB, a ~100 KB chat.
func coldTexts(b *testing.B) ([]string, int) {
	paras := strings.Split(readTestdata(b, "chat_en.txt"), "\n\n")
	texts := []string{"You are a helpful assistant. cold"}
	size := len(texts[0])
	for i := 1; i < 100; i++ {
		var sb strings.Builder
		fmt.Fprintf(&sb, "[cold %d] ", i)
		for j := i; sb.Len() < 1000; j++ {
			sb.WriteString(paras[j%len(paras)])
			sb.WriteString("\n\n")
		}
		texts = append(texts, sb.String()[:1000])
		size += 1000
	}
	return texts, size
}

// BenchmarkCold counts a ~100 KB conversation nobody has seen, a message
// at a time: plain pkoukk/tiktoken-go (EncodeOrdinary) and the Tiktoken
// counter, on one goroutine (budget's BenchmarkCold counts it with Prompt).
func BenchmarkCold(b *testing.B) {
	texts, size := coldTexts(b)
	tk := mustTiktoken(b, EncodingCL100K)
	enc := reference(b, EncodingCL100K)
	b.Run("plain-tiktoken-go", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for _, s := range texts {
				n += len(enc.EncodeOrdinary(s))
			}
		}
	})
	b.Run("Tiktoken", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for _, s := range texts {
				n += tk.Count(s)
			}
		}
	})
}

// BenchmarkCountLarge counts one 512 KB tool result: chunks are counted
// in parallel.
func BenchmarkCountLarge(b *testing.B) {
	b.Run("plain-tiktoken-go", func(b *testing.B) {
		text := strings.Repeat(readTestdata(b, "chat_en.txt"), 100)[:512<<10]
		enc := reference(b, EncodingCL100K)
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			enc.EncodeOrdinary(text)
		}
	})
	b.Run("Tiktoken", benchCountLarge)
}

func benchCountLarge(b *testing.B) {
	text := strings.Repeat(readTestdata(b, "chat_en.txt"), 100)[:512<<10]
	tk := mustTiktoken(b, EncodingCL100K)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tk.Count(text)
	}
}

// BenchmarkCount10MB estimates a 10 MB message from samples.
func BenchmarkCount10MB(b *testing.B) {
	text := strings.Repeat(readTestdata(b, "chat_en.txt"), 10<<20/5295)
	tk := mustTiktoken(b, EncodingCL100K)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tk.Count(text)
	}
}

func BenchmarkApprox(b *testing.B) {
	text := readTestdata(b, "chat_en.txt")
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		Approx{}.Count(text)
	}
}

func BenchmarkNewTiktokenShared(b *testing.B) {
	mustTiktoken(b, EncodingO200K)
	b.ReportAllocs()
	for b.Loop() {
		mustTiktoken(b, EncodingO200K)
	}
}
