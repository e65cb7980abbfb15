package modelinfo

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const kib = 1 << 10

// facts reads testdata/model_info/<name>.json.
func facts(t testing.TB, name string) Facts {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "model_info", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseJSON(data)
	if err != nil {
		t.Fatalf("ParseJSON(%s): %v", name, err)
	}
	return f
}

func TestParseModelInfo(t *testing.T) {
	repeat := func(n, v int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	tests := []struct {
		file string
		want Facts
	}{
		{"llama3.1-8b", Facts{Architecture: "llama", KVHeads: repeat(32, 8), KeyLength: 128, ValueLength: 128, ContextLength: 131072}},
		{"qwen2.5-7b", Facts{Architecture: "qwen2", KVHeads: repeat(28, 4), KeyLength: 128, ValueLength: 128, ContextLength: 32768}},
		{"tiny", Facts{Architecture: "llama", KVHeads: repeat(2, 2), KeyLength: 16, ValueLength: 16, ContextLength: 8192}},
		{"hybrid", Facts{Architecture: "hybrid", KVHeads: []int{4, 0, 4, 0}, KeyLength: 128, ValueLength: 128, ContextLength: 65536}},
		{"elided", Facts{Architecture: "hybrid", KVHeads: repeat(4, 16), KeyLength: 128, ValueLength: 128, ContextLength: 65536,
			Guessed: "head_count_kv taken as head_count"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, facts(t, tt.file)); diff != "" {
				t.Errorf("facts (-want +got):\n%s", diff)
			}
		})
	}
}

// The same facts whether model_info was decoded into float64s (as
// api.ShowResponse does) or json.Numbers.
func TestParseModelInfoFloat64(t *testing.T) {
	data, err := os.ReadFile("testdata/model_info/llama3.1-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(info)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(facts(t, "llama3.1-8b"), got); diff != "" {
		t.Errorf("(-json.Number +float64):\n%s", diff)
	}
}

func TestParseModelInfoBadInput(t *testing.T) {
	tests := []struct {
		name string
		info string
	}{
		{"empty", `{}`},
		{"no architecture", `{"llama.block_count": 32}`},
		{"architecture not a string", `{"general.architecture": 7}`},
		{"no block_count", `{"general.architecture": "llama", "llama.attention.head_count": 32, "llama.embedding_length": 4096}`},
		{"negative block_count", `{"general.architecture": "llama", "llama.block_count": -1}`},
		{"huge block_count", `{"general.architecture": "llama", "llama.block_count": 1e300}`},
		{"fractional block_count", `{"general.architecture": "llama", "llama.block_count": 2.5}`},
		{"no heads", `{"general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 64}`},
		{"heads as string", `{"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count": "4", "llama.embedding_length": 64}`},
		{"array of wrong length", `{"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count_kv": [1, 2, 3], "llama.attention.key_length": 8, "llama.attention.value_length": 8}`},
		{"array with junk", `{"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count_kv": [1, "x"], "llama.attention.key_length": 8, "llama.attention.value_length": 8}`},
		{"no head size", `{"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count_kv": 2}`},
		{"zero heads", `{"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count": 0, "llama.embedding_length": 64}`},
		{"negative key_length", `{"general.architecture": "llama", "llama.block_count": 2, "llama.attention.head_count_kv": 2, "llama.attention.key_length": -8, "llama.attention.value_length": 8}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseJSON([]byte(tt.info))
			if !errors.Is(err, ErrUnknown) {
				t.Errorf("err = %v, want ErrUnknown", err)
			}
			if f.BytesPerToken("f16", 1) != 0 {
				t.Errorf("BytesPerToken of failed facts = %d, want 0", f.BytesPerToken("f16", 1))
			}
		})
	}
	if _, err := ParseJSON([]byte(`not json`)); err == nil {
		t.Error("ParseJSON(not json): no error")
	}
}

func kvBytes(t *testing.T, model, quant string) uint64 {
	t.Helper()
	return facts(t, model).BytesPerToken(quant, 1)
}

// f16 uses 2 bytes per value. llama3.1 8B: 32 layers × 8 KV
// heads × (128 + 128) × 2 = 128 KiB per token.
func TestKVBytesF16TwoBytesPerValue(t *testing.T) {
	if got, want := kvBytes(t, "llama3.1-8b", "f16"), uint64(128*kib); got != want {
		t.Errorf("llama3.1 8B f16 = %d, want %d", got, want)
	}
}

// q8_0 uses 1 byte per value.
func TestKVBytesQ8OneBytePerValue(t *testing.T) {
	if got, want := kvBytes(t, "llama3.1-8b", "q8_0"), uint64(64*kib); got != want {
		t.Errorf("llama3.1 8B q8_0 = %d, want %d", got, want)
	}
}

// q4_0 uses half a byte per value.
func TestKVBytesQ4HalfBytePerValue(t *testing.T) {
	if got, want := kvBytes(t, "llama3.1-8b", "q4_0"), uint64(32*kib); got != want {
		t.Errorf("llama3.1 8B q4_0 = %d, want %d", got, want)
	}
}

func TestBytesPerToken(t *testing.T) {
	tests := []struct {
		name     string
		model    string
		quant    string
		parallel int
		want     uint64
	}{
		{"qwen2.5 7B f16", "qwen2.5-7b", "f16", 1, 28 * 4 * 256 * 2}, // 56 KiB
		{"qwen2.5 7B q8_0", "qwen2.5-7b", "q8_0", 1, 28 * 4 * 256},
		{"tiny f16", "tiny", "f16", 1, 2 * 2 * 32 * 2},
		{"tiny q4_0", "tiny", "q4_0", 1, 2 * 2 * 32 / 2},
		{"per-layer array skips recurrent layers", "hybrid", "f16", 1, 2 * 4 * 256 * 2},
		{"elided array counts every head", "elided", "f16", 1, 4 * 16 * 256 * 2},
		{"num_parallel 4 multiplies", "llama3.1-8b", "f16", 4, 4 * 128 * kib},
		{"num_parallel 0 counts as 1", "llama3.1-8b", "f16", 0, 128 * kib},
		{"unknown quantization counts as f16", "llama3.1-8b", "q5_1", 1, 128 * kib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := facts(t, tt.model).BytesPerToken(tt.quant, tt.parallel); got != tt.want {
				t.Errorf("BytesPerToken = %d, want %d", got, tt.want)
			}
		})
	}
}

func BenchmarkParseModelInfo(b *testing.B) {
	data, err := os.ReadFile("testdata/model_info/llama3.1-8b.json")
	if err != nil {
		b.Fatal(err)
	}
	var info map[string]any
	if err := json.Unmarshal(data, &info); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(info); err != nil {
			b.Fatal(err)
		}
	}
}

// Bad input never panics, and whatever parses has a sane size.
func FuzzParseModelInfoJSON(f *testing.F) {
	for _, name := range []string{"llama3.1-8b", "qwen2.5-7b", "tiny", "hybrid", "elided"} {
		data, err := os.ReadFile(filepath.Join("testdata", "model_info", name+".json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"general.architecture": "x", "x.block_count": 65536, "x.attention.head_count_kv": 65536, "x.attention.key_length": 1048576, "x.attention.value_length": 1048576}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		facts, err := ParseJSON(data)
		if err != nil {
			return
		}
		if !facts.Known() {
			t.Fatalf("parsed facts are not known: %+v", facts)
		}
		for _, q := range []string{"f16", "q8_0", "q4_0"} {
			facts.BytesPerToken(q, 4)
		}
	})
}
