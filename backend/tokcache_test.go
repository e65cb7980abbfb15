package backend

import (
	"log/slog"
	"os"
	"runtime"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

// BenchmarkTokenizerFromDisk: what a restarted ctxproxy spends on a
// model's tokenizer kept in the tokenizer directory: reading the file
// (/load) and reading it and building the tokenizer (/load+build), for a
// generated 128,000-token vocabulary of each kind, in a process that holds
// no model of that vocabulary (the shared tables are let go between
// rounds). MB-file is the file's size.
//
//	go test ./backend -run '^$' -bench TokenizerFromDisk -benchtime 10x
func BenchmarkTokenizerFromDisk(b *testing.B) {
	for _, c := range []struct {
		name  string
		vocab vocabgen.Vocab
	}{
		{"bpe-128k", vocabgen.BPE(128000, "qwen2", 31)},
		{"spm-128k", vocabgen.SentencePiece(128000, 3)},
	} {
		d := diskCache{dir: b.TempDir(), log: slog.New(slog.DiscardHandler)}
		d.store("sha256:bench", exact.Show{ModelInfo: c.vocab.KV(), Template: "{{ .Prompt }}"})
		entries, err := os.ReadDir(d.dir)
		if err != nil || len(entries) != 1 {
			b.Fatalf("%d files written: %v", len(entries), err)
		}
		info, _ := entries[0].Info()
		size := float64(info.Size()) / 1e6
		text := vocabgen.Text(200, 1)
		b.Run(c.name+"/load", func(b *testing.B) {
			for b.Loop() {
				if _, ok := d.load("sha256:bench"); !ok {
					b.Fatal("not read")
				}
			}
			b.ReportMetric(size, "MB-file")
		})
		b.Run(c.name+"/load+build", func(b *testing.B) {
			for b.Loop() {
				show, ok := d.load("sha256:bench")
				if !ok {
					b.Fatal("not read")
				}
				m, err := exact.New(show)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := m.CountText(text); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				m, show = nil, exact.Show{}
				runtime.GC() // the tables go: the next round builds them again
				b.StartTimer()
			}
			b.ReportMetric(size, "MB-file")
		})
	}
}
