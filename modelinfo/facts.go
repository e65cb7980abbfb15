package modelinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrUnknown means a model's facts are missing from model_info, so
// its KV-cache size cannot be computed.
var ErrUnknown = errors.New("modelinfo: model facts unknown")

// kvBits is the size of one cached value per KV-cache type, in bits (f16 2
// bytes, q8_0 1, q4_0 0.5; Ollama's own estimate in fs/ggml
// kvCacheBytesPerElement uses the same figures).
var kvBits = map[string]uint64{"f16": 16, "q8_0": 8, "q4_0": 4}

// KVType reports whether quant names a KV-cache type Ollama knows
// (f16, q8_0, q4_0).
func KVType(quant string) bool {
	_, ok := kvBits[quant]
	return ok
}

// Facts are the facts about a model that size its KV cache, read from
// Ollama's /api/show model_info (GGUF metadata).
type Facts struct {
	// Architecture is general.architecture, e.g. "llama", "qwen2".
	Architecture string
	// KVHeads holds <arch>.attention.head_count_kv for each layer; its
	// length is <arch>.block_count. A layer with 0 KV heads keeps no KV
	// cache (a recurrent layer).
	KVHeads []int
	// KeyLength and ValueLength are the per-head sizes
	// (<arch>.attention.key_length/value_length, default embedding_length
	// / head_count).
	KeyLength, ValueLength int
	// ContextLength is <arch>.context_length, the trained context; 0 when
	// unknown.
	ContextLength int
	// Guessed says which fact was filled in conservatively, e.g. when
	// /api/show without verbose elided a per-layer array; "" when none.
	Guessed string
}

// Known reports whether f has what BytesPerToken needs.
func (f Facts) Known() bool {
	return len(f.KVHeads) > 0 && f.KeyLength+f.ValueLength > 0
}

// BytesPerToken is the KV-cache memory one token of num_ctx costs:
// Σ_layers head_count_kv × (key_length + value_length) × bytes per value ×
// numParallel (Ollama allocates num_ctx tokens for each parallel slot).
// quant is "f16", "q8_0" or "q4_0" (anything else counts as f16);
// numParallel < 1 counts as 1. It returns 0 when the facts are unknown.
func (f Facts) BytesPerToken(quant string, numParallel int) uint64 {
	if !f.Known() {
		return 0
	}
	bits, ok := kvBits[quant]
	if !ok {
		bits = kvBits["f16"]
	}
	var values uint64
	for _, h := range f.KVHeads {
		values += uint64(h) * uint64(f.KeyLength+f.ValueLength)
	}
	return (values*bits + 7) / 8 * uint64(max(numParallel, 1))
}

// ParseJSON reads the model_info object of an /api/show reply.
func ParseJSON(data []byte) (Facts, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var info map[string]any
	if err := dec.Decode(&info); err != nil {
		return Facts{}, fmt.Errorf("gpu: model_info: %w", err)
	}
	return Parse(info)
}

// Parse reads the facts from /api/show's model_info, decoded with
// or without json.Decoder.UseNumber (as api.ShowResponse.ModelInfo is).
// Missing facts give an error wrapping ErrUnknown; values of the wrong
// type or out of range never panic.
func Parse(info map[string]any) (Facts, error) {
	arch, _ := info["general.architecture"].(string)
	if arch == "" {
		return Facts{}, fmt.Errorf("%w: no general.architecture", ErrUnknown)
	}
	key := func(k string) any { return info[arch+"."+k] }
	f := Facts{Architecture: arch}
	var guessed []string

	layers, ok := toInt(key("block_count"))
	if !ok || layers <= 0 || layers > 1<<16 {
		return Facts{}, fmt.Errorf("%w: no %s.block_count", ErrUnknown, arch)
	}
	f.ContextLength, _ = toInt(key("context_length"))

	heads, headsOK := perLayer(key("attention.head_count"), layers)
	kvHeads, kvOK := perLayer(key("attention.head_count_kv"), layers)
	switch {
	case kvOK:
	case headsOK:
		// Without head_count_kv every head keeps its own K and V (no
		// grouped-query attention), as llama.cpp assumes; when
		// /api/show elided a per-layer array (it drops arrays unless
		// verbose) this is the upper bound.
		kvHeads = heads
		guessed = append(guessed, "head_count_kv taken as head_count")
	default:
		return Facts{}, fmt.Errorf("%w: no %s.attention.head_count_kv or head_count", ErrUnknown, arch)
	}
	f.KVHeads = kvHeads

	// Default head size: embedding_length / head_count, with the smallest
	// per-layer head count as Ollama's EmbeddingHeadCountMax does.
	headDim := 0
	if emb, ok := toInt(key("embedding_length")); ok && headsOK {
		if h := minPositive(heads); h > 0 {
			headDim = emb / h
		}
	}
	f.KeyLength = headDim
	if n, ok := toInt(key("attention.key_length")); ok {
		f.KeyLength = n
	}
	f.ValueLength = headDim
	if n, ok := toInt(key("attention.value_length")); ok {
		f.ValueLength = n
	}
	if f.KeyLength <= 0 || f.ValueLength <= 0 || f.KeyLength > 1<<20 || f.ValueLength > 1<<20 {
		return Facts{}, fmt.Errorf("%w: no %s.attention.key_length/value_length or embedding_length/head_count", ErrUnknown, arch)
	}
	f.Guessed = strings.Join(guessed, "; ")
	return f, nil
}

// perLayer reads a fact that is a number (the same for every layer) or an
// array with one number per layer. An empty or null array (elided by
// /api/show) or one of the wrong length is not usable.
func perLayer(v any, layers int) ([]int, bool) {
	if n, ok := toInt(v); ok {
		if n < 0 || n > 1<<16 {
			return nil, false
		}
		out := make([]int, layers)
		for i := range out {
			out[i] = n
		}
		return out, true
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != layers {
		return nil, false
	}
	out := make([]int, layers)
	for i, e := range arr {
		n, ok := toInt(e)
		if !ok || n < 0 || n > 1<<16 {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

func minPositive(ns []int) int {
	m := 0
	for _, n := range ns {
		if n > 0 && (m == 0 || n < m) {
			m = n
		}
	}
	return m
}

// toInt reads a whole JSON number decoded as float64, json.Number or a Go
// integer.
func toInt(v any) (int, bool) {
	switch v := v.(type) {
	case float64:
		if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			return 0, false
		}
		return int(v), true
	case json.Number:
		n, err := v.Int64()
		if err != nil || n > 1<<53 || n < -(1<<53) {
			return 0, false
		}
		return int(n), true
	case int:
		return v, true
	case int64:
		return int(v), true
	case int32:
		return int(v), true
	case uint32:
		return int(v), true
	case uint64:
		if v > 1<<53 {
			return 0, false
		}
		return int(v), true
	}
	return 0, false
}

// Loaded is a model Ollama holds in memory, as /api/ps lists it.
type Loaded struct {
	// Name is the model's name ("llama3.1:8b").
	Name string
	// Size is all the memory it holds, SizeVRAM the part on the GPU
	// (/api/ps size and size_vram), in bytes.
	Size, SizeVRAM uint64
	// NumCtx is the num_ctx it was loaded with (/api/ps context_length);
	// 0 when unknown.
	NumCtx int
}
