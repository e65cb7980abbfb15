package backend

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
)

// fullShow is what a verbose /api/show of v decodes to, with every field
// the file keeps set.
func fullShow(t testing.TB, v vocabgen.Vocab) exact.Show {
	t.Helper()
	kv := v.KV()
	kv["tokenizer.ggml.eos_token_ids"] = vocabgen.AnySlice([]int32{int32(v.EOS)})
	kv["general.name"] = "gen"
	show := map[string]any{
		"template":       "{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n",
		"system":         "You are terse.",
		"modelfile":      "FROM gen\nPARAMETER num_ctx 4096\n",
		"messages":       []api.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}},
		"model_info":     kv,
		"projector_info": map[string]any{"clip.vision.image_size": 224.0},
		"capabilities":   []string{"completion", "vision"},
		"details":        map[string]any{"family": "llama"},
	}
	data, err := json.Marshal(show)
	if err != nil {
		t.Fatal(err)
	}
	var out exact.Show
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestVocabFileRoundTrip: a Show written to the tokenizer directory reads
// back whole (the vocabulary typed, the rest as it was), and the
// tokenizer built from the file counts every text as the one built from
// the JSON does.
func TestVocabFileRoundTrip(t *testing.T) {
	d := diskCache{dir: t.TempDir(), log: slog.New(slog.DiscardHandler)}
	text := "Totals: 1234567 and 3.14159 東京の天気 <|im_start|> don't " + vocabgen.Text(2000, 9)
	msgs := []api.Message{{Role: "user", Content: vocabgen.Text(300, 2)}, {Role: "assistant", Content: vocabgen.Text(200, 3)}}
	for _, v := range []vocabgen.Vocab{vocabgen.BPE(5000, "llama-bpe", 3), vocabgen.SentencePiece(5000, 3)} {
		show := fullShow(t, v)
		d.store("sha256:"+v.Model, show)
		got, ok := d.load("sha256:" + v.Model)
		if !ok {
			t.Fatalf("%s: not read back", v.Model)
		}
		want := show.Split()
		if !reflect.DeepEqual(got.Vocab, want.Vocab) {
			t.Errorf("%s: the vocabulary read back differs", v.Model)
		}
		gotJS, _ := json.Marshal(got)
		wantJS, _ := json.Marshal(want)
		if !bytes.Equal(gotJS, wantJS) {
			t.Errorf("%s: read back\n%s\nwant\n%s", v.Model, gotJS, wantJS)
		}
		fromJSON, err := exact.New(show)
		if err != nil {
			t.Fatal(err)
		}
		fromFile, err := exact.New(got)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := fromJSON.CountText(text)
		b, _ := fromFile.CountText(text)
		pa, _, _ := fromJSON.Count(exact.Prompt{Messages: msgs})
		pb, _, _ := fromFile.Count(exact.Prompt{Messages: msgs})
		if a != b || pa != pb || a == 0 {
			t.Errorf("%s: from the file %d and %d tokens, from the JSON %d and %d", v.Model, b, pb, a, pa)
		}
	}
}

// TestVocabFileCorrupt: a file cut short anywhere, one with a byte
// changed, of another version, with bytes past its end, or not one at
// all, is logged and not read (the backend is asked), never a panic.
func TestVocabFileCorrupt(t *testing.T) {
	good, err := encodeVocabFile(fullShow(t, vocabgen.BPE(400, "llama-bpe", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeVocabFile(good); err != nil {
		t.Fatalf("the good file: %v", err)
	}
	// reseal sets a changed body's checksum, so the layout is what fails.
	reseal := func(b []byte) []byte {
		body := b[:len(b)-4]
		return binary.LittleEndian.AppendUint32(body[:len(body):len(body)], crc32.Checksum(body, crcTable))
	}
	bad := map[string][]byte{
		"empty":         nil,
		"garbage":       []byte("not a tokenizer file at all, just some bytes"),
		"flipped":       append(append([]byte{}, good[:len(good)/2]...), append([]byte{good[len(good)/2] ^ 0x55}, good[len(good)/2+1:]...)...),
		"version 2":     reseal(append([]byte(vocabMagic+"\x02"), good[len(vocabMagic)+1:]...)),
		"past its end":  reseal(append(append([]byte{}, good[:len(good)-4]...), 0, 0, 0, 0, 0)),
		"cut, resealed": reseal(append(append([]byte{}, good[:len(good)-40]...), 0, 0, 0, 0)),
	}
	for n := 0; n < len(good); n += 1 + n/8 {
		bad[fmt.Sprintf("cut at %d", n)] = good[:n]
	}
	var logged bytes.Buffer
	d := diskCache{dir: t.TempDir(), log: slog.New(slog.NewTextHandler(&logged, nil))}
	for name, data := range bad {
		if _, err := decodeVocabFile(data); err == nil {
			t.Errorf("%s: read", name)
		}
		if err := os.WriteFile(d.path("sha256:x", vocabExt), data, 0o644); err != nil {
			t.Fatal(err)
		}
		logged.Reset()
		if _, ok := d.load("sha256:x"); ok || !strings.Contains(logged.String(), "does not read") {
			t.Errorf("%s: loaded %v, logged %q", name, ok, logged.String())
		}
	}
}

// FuzzVocabFile: the reader never panics, whether the checksum matches
// (the input is sealed with its own, so the layout is what is tried) or
// not, and what it reads writes back to a file that reads the same.
func FuzzVocabFile(f *testing.F) {
	good, err := encodeVocabFile(fullShow(f, vocabgen.SentencePiece(300, 1)))
	if err != nil {
		f.Fatal(err)
	}
	body := good[:len(good)-4]
	f.Add(body)
	f.Add(body[:len(body)/2])
	f.Add([]byte(vocabMagic + "\x01"))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _ = decodeVocabFile(body)
		sealed := binary.LittleEndian.AppendUint32(body[:len(body):len(body)], crc32.Checksum(body, crcTable))
		show, err := decodeVocabFile(sealed)
		if err != nil {
			return
		}
		again, err := encodeVocabFile(show)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeVocabFile(again)
		if err != nil || !reflect.DeepEqual(back.Vocab, show.Vocab) {
			t.Fatalf("written again, reads %v", err)
		}
	})
}

// TestTokenizerDiskCacheOldFile: a digest's file of the gzipped JSON that
// ctxproxy kept before is read once, with no /api/show, then written
// again as a vocabulary file and removed; a damaged one is removed and the
// backend asked.
func TestTokenizerDiskCacheOldFile(t *testing.T) {
	dir := t.TempDir()
	o, start := diskBackends(t, dir)
	ctx := context.Background()
	writeOld := func(digest string, show any) string {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if err := json.NewEncoder(zw).Encode(show); err != nil || zw.Close() != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, strings.ReplaceAll(digest, ":", "-")+oldExt)
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := writeOld("sha256:aaa", map[string]any{
		"template":   "{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n",
		"model_info": o.vocab.KV(),
	})
	m := start().Model(ctx, "tiny")
	if m.Tokenizer == nil || o.verbose.Load() != 0 {
		t.Fatalf("an old file: tokenizer %v, %d verbose /api/show, want 0", m.Tokenizer != nil, o.verbose.Load())
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Error("the old file is still there")
	}
	if _, err := os.Stat(filepath.Join(dir, "sha256-aaa"+vocabExt)); err != nil {
		t.Errorf("no vocabulary file written in its place: %v", err)
	}
	again := start().Model(ctx, "tiny")
	if again.Tokenizer == nil || o.verbose.Load() != 0 {
		t.Fatalf("after it: tokenizer %v, %d verbose /api/show, want 0", again.Tokenizer != nil, o.verbose.Load())
	}
	text := "hello there, 12345 times"
	a, _ := m.Tokenizer.CountText(text)
	b, _ := again.Tokenizer.CountText(text)
	if a != b {
		t.Errorf("the old file's tokenizer counts %d, the new file's %d", a, b)
	}

	o.digest.Store("sha256:bbb")
	damaged := filepath.Join(dir, "sha256-bbb"+oldExt)
	if err := os.WriteFile(damaged, []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := start().Model(ctx, "tiny"); m.Tokenizer == nil || o.verbose.Load() != 1 {
		t.Errorf("a damaged old file: tokenizer %v, %d verbose, want 1", m.Tokenizer != nil, o.verbose.Load())
	}
	if _, err := os.Stat(damaged); !os.IsNotExist(err) {
		t.Error("the damaged old file is still there")
	}
}

// BenchmarkTokenizerFromDisk: what a restarted ctxproxy spends on a
// model's tokenizer kept in the tokenizer directory: reading the file
// (/load) and reading it and building the tokenizer (/load+build), for a
// generated 128,000-token vocabulary of each kind, in a process that holds
// no model of that vocabulary (the shared tables are let go between
// rounds); and writing the file (/store), which the first fetch of a
// digest does before the request that asked for it is answered. MB-file
// is the file's size.
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
		show := exact.Show{ModelInfo: c.vocab.KV(), Template: "{{ .Prompt }}"}
		b.Run(c.name+"/store", func(b *testing.B) {
			for b.Loop() {
				d.store("sha256:bench", show)
			}
			b.ReportMetric(size, "MB-file")
		})
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

// diskBackends serves a 2,000-token vocabulary as the model of digest
// sha256:aaa, and returns the server and a function that starts a new
// Backend in front of it on the tokenizer directory dir.
func diskBackends(t *testing.T, dir string) (*ollamaShow, func() *Backend) {
	t.Helper()
	o := &ollamaShow{vocab: vocabgen.BPE(2000, "llama-bpe", 1)}
	o.digest.Store("sha256:aaa")
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return o, func() *Backend { return New(Config{URL: u, Client: srv.Client(), TokenizerDir: dir}) }
}
