package exact

import (
	"fmt"
	"image"
	"reflect"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/model/models/lfm2"
)

// lfm2Markers are LFM2-VL's image markers, for a vocabulary that holds
// them (rows and columns up to side).
func lfm2Markers(side int) []any {
	toks := []any{"<|startoftext|>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"}
	for r := 1; r <= side; r++ {
		for c := 1; c <= side; c++ {
			toks = append(toks, fmt.Sprintf("<|img_row_%d_col_%d|>", r, c))
		}
	}
	return toks
}

// lfm2KV is model_info of an LFM2-VL model with the converter's keys
// (Ollama v0.17.4 convert/convert_lfm2_vl.go) set to the image
// processor's defaults, as /api/show returns them, changed by set.
func lfm2KV(set map[string]any) map[string]any {
	kv := map[string]any{
		"general.architecture":                 "lfm2",
		"tokenizer.ggml.tokens":                lfm2Markers(10),
		"lfm2.vision.block_count":              27.0,
		"lfm2.vision.patch_size":               16.0,
		"lfm2.vision.projector.scale_factor":   2.0,
		"lfm2.vision.do_image_splitting":       true,
		"lfm2.vision.min_tiles":                2.0,
		"lfm2.vision.max_tiles":                10.0,
		"lfm2.vision.tile_size":                512.0,
		"lfm2.vision.min_image_tokens":         64.0,
		"lfm2.vision.max_image_tokens":         256.0,
		"lfm2.vision.max_pixels_tolerance":     2.0,
		"lfm2.vision.use_thumbnail":            true,
		"lfm2.vision.use_image_special_tokens": true,
		"lfm2.vision.image_start_token_id":     1.0,
		"lfm2.vision.image_end_token_id":       2.0,
		"lfm2.vision.image_thumbnail_token_id": 3.0,
	}
	for k, v := range set {
		if v == nil {
			delete(kv, k)
			continue
		}
		kv[k] = v
	}
	return kv
}

// TestLFM2Images: an LFM2-VL image's cost, from its size, for the
// processor's default keys and for keys that change each branch: resized
// whole (down past max_image_tokens, up past min_image_tokens, odd
// aspect ratios), split into tiles with their markers and a thumbnail,
// and the markers left out when the vocabulary or the keys have none.
func TestLFM2Images(t *testing.T) {
	noKeys := map[string]any{}
	for k := range lfm2KV(nil) {
		if k != "general.architecture" && k != "tokenizer.ggml.tokens" {
			noKeys[k] = nil
		}
	}
	cases := []struct {
		name string
		kv   map[string]any
		w, h int
		want int
	}{
		// Whole: <|image_start|>, (w/32)×(h/32) tokens, <|image_end|>.
		{"exact 512", nil, 512, 512, 256 + 2},
		{"exact 256", nil, 256, 256, 64 + 2},
		{"tiny, scaled up to 256x256", nil, 10, 10, 64 + 2},
		{"below min, odd aspect", nil, 300, 200, 10*7 + 2},
		{"past max, scaled down", nil, 640, 480, 18*13 + 2},
		{"tall and thin", nil, 50, 2000, 2*62 + 2},
		{"wide, scaled down", nil, 3000, 100, 87*2 + 2},
		{"round half to even", nil, 528, 400, 16*12 + 2},
		// A side rounded to nothing counts as one square (a Qwen-style
		// smartResize would scale the image up instead).
		{"a side under one square", nil, 3000, 10, 94*1 + 2},
		// Split: a 3×2 grid of 512 tiles (each a marker and 256
		// tokens), then <|img_thumbnail|> and the image at 576×416.
		{"split 4:3", nil, 1024, 768, 2 + 6*(1+256) + 1 + 18*13},
		// Square: 2×2 and 3×3 fit alike, the larger wins for an image
		// of more than half its pixels.
		{"split square", nil, 2000, 2000, 2 + 9*257 + 1 + 256},
		{"split square, small", nil, 1000, 1000, 2 + 4*257 + 1 + 256},
		{"split wide", nil, 3000, 1000, 2 + 3*257 + 1 + 27*9},
		{"no splitting", map[string]any{"lfm2.vision.do_image_splitting": false}, 1024, 768, 2 + 18*13},
		{"no thumbnail", map[string]any{"lfm2.vision.use_thumbnail": false}, 1024, 768, 2 + 6*257},
		{"no special tokens", map[string]any{"lfm2.vision.use_image_special_tokens": false}, 1024, 768, 6*256 + 18*13},
		{"no special tokens, whole", map[string]any{"lfm2.vision.use_image_special_tokens": false}, 512, 512, 256},
		// Markers found in the vocabulary when the keys do not say.
		{"markers from the vocabulary", map[string]any{"lfm2.vision.image_start_token_id": nil,
			"lfm2.vision.image_end_token_id": nil, "lfm2.vision.image_thumbnail_token_id": nil}, 1024, 768, 2 + 6*257 + 1 + 18*13},
		{"no markers in the vocabulary", map[string]any{"tokenizer.ggml.tokens": []any{"a", "b"},
			"lfm2.vision.image_start_token_id": nil, "lfm2.vision.image_end_token_id": nil,
			"lfm2.vision.image_thumbnail_token_id": nil}, 1024, 768, 6*256 + 18*13},
		// Row and column markers only as far as the vocabulary has them.
		{"few row markers", map[string]any{"tokenizer.ggml.tokens": lfm2Markers(1)}, 1024, 768, 2 + 1 + 6*256 + 1 + 18*13},
		// No keys at all: the processor's defaults.
		{"defaults, whole", noKeys, 640, 480, 18*13 + 2},
		{"defaults, split", noKeys, 1024, 768, 2 + 6*257 + 1 + 18*13},
		// Other keys: 8-pixel patches merged 2×2, 64-pixel tiles.
		{"small tiles", lfm2Small, 128, 96, 2 + 4*(1+16) + 1 + 4*3},
		{"small tiles, whole", lfm2Small, 64, 48, 2 + 4*3},
		{"no merging", map[string]any{"lfm2.vision.projector.scale_factor": 1.0}, 256, 256, 2 + 16*16},
		{"one tile allowed", map[string]any{"lfm2.vision.min_tiles": 1.0, "lfm2.vision.max_tiles": 1.0}, 2000, 2000, 2 + 256},
	}
	for _, c := range cases {
		cost := imagesOf(lfm2KV(c.kv))
		if n, exact := cost(chat.Image{Width: c.w, Height: c.h}); n != c.want || !exact {
			t.Errorf("%s: %dx%d costs %d (exact %v), want %d", c.name, c.w, c.h, n, exact, c.want)
		}
	}
	if n, exact := imagesOf(lfm2KV(nil))(chat.Image{}); exact || n != 2+6*257+1+18*13 {
		t.Errorf("an unknown size: %d (exact %v), want a 1024x768 image's estimate", n, exact)
	}
	moe := lfm2KV(nil)
	for k, v := range moe {
		if len(k) > 5 && k[:5] == "lfm2." {
			moe["lfm2moe."+k[5:]] = v
			delete(moe, k)
		}
	}
	moe["general.architecture"] = "lfm2moe"
	if n, _ := imagesOf(moe)(chat.Image{Width: 1024, Height: 768}); n != 2+6*257+1+18*13 {
		t.Errorf("lfm2moe: %d", n)
	}
}

// lfm2Small are the keys of the generated LFM2-VL (testkit/ggufgen):
// 8-pixel patches, 64-pixel tiles of 16 tokens, 4 to 16 tokens whole.
var lfm2Small = map[string]any{
	"lfm2.vision.patch_size": 8.0, "lfm2.vision.tile_size": 64.0,
	"lfm2.vision.min_image_tokens": 4.0, "lfm2.vision.max_image_tokens": 16.0,
	"lfm2.vision.max_tiles": 4.0,
}

// TestLFM2Images_OllamaProcessor holds the rule against Ollama v0.17.4's
// own LFM2 image processor (model/models/lfm2, built from the same keys)
// over a sweep of sizes: the images it makes (whole, or tiles and a
// thumbnail), their sizes and so their tokens, and the markers
// PostTokenize writes for that layout.
func TestLFM2Images_OllamaProcessor(t *testing.T) {
	sizes := [][2]int{{1, 1}, {7, 300}, {2000, 3}}
	for w := 8; w <= 400; w += 23 {
		for h := 5; h <= 400; h += 37 {
			sizes = append(sizes, [2]int{w, h})
		}
	}
	for _, keys := range []map[string]any{lfm2Small, {"lfm2.vision.min_tiles": 1.0, "lfm2.vision.max_tiles": 3.0,
		"lfm2.vision.patch_size": 8.0, "lfm2.vision.tile_size": 48.0, "lfm2.vision.max_image_tokens": 9.0,
		"lfm2.vision.max_pixels_tolerance": 1.5, "lfm2.vision.projector.scale_factor": 3.0}} {
		kv := lfm2KV(keys)
		cost := imagesOf(kv)
		proc := lfm2Processor(t, kv)
		for _, s := range sizes {
			want := ollamaLFM2Cost(t, proc, kv, s[0], s[1])
			if n, _ := cost(chat.Image{Width: s[0], Height: s[1]}); n != want {
				t.Errorf("%v: %dx%d costs %d, Ollama's processor %d", keys, s[0], s[1], n, want)
			}
		}
	}
	kv := lfm2KV(nil)
	proc := lfm2Processor(t, kv)
	for _, s := range [][2]int{{1024, 768}, {900, 1600}, {3000, 1000}, {700, 700}, {2000, 100}, {3000, 10}} {
		want := ollamaLFM2Cost(t, proc, kv, s[0], s[1])
		if n, _ := imagesOf(kv)(chat.Image{Width: s[0], Height: s[1]}); n != want {
			t.Errorf("defaults: %dx%d costs %d, Ollama's processor %d", s[0], s[1], n, want)
		}
	}
}

// lfm2Processor builds Ollama's LFM2 model from the numbers of kv (the
// vocabulary left out) and returns its image processor.
func lfm2Processor(t *testing.T, kv map[string]any) lfm2.ImageProcessor {
	t.Helper()
	c := ggml.KV{"general.architecture": "lfm2", "tokenizer.ggml.model": "gpt2", "lfm2.attention.head_count": uint32(1)}
	for k, v := range kv {
		switch v := v.(type) {
		case float64:
			if k == "lfm2.vision.max_pixels_tolerance" {
				c[k] = float32(v)
			} else {
				c[k] = uint32(v)
			}
		case bool:
			c[k] = v
		}
	}
	m, err := lfm2.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*lfm2.Model).ImageProcessor
}

// ollamaLFM2Cost runs Ollama's processor on a w×h image and counts what
// its model code makes of the result: each image's merged patches, and
// the markers kv's vocabulary holds for the layout.
func ollamaLFM2Cost(t *testing.T, p lfm2.ImageProcessor, kv map[string]any, w, h int) int {
	t.Helper()
	imgs, layout, err := p.ProcessImage(image.NewRGBA(image.Rect(0, 0, w, h)))
	if err != nil {
		t.Fatal(err)
	}
	// The processor's results are unexported: read them by reflection.
	field := func(v reflect.Value, name string) reflect.Value { return v.FieldByName(name) }
	patch, _ := number(kv["lfm2.vision.patch_size"])
	merge, _ := number(kv["lfm2.vision.projector.scale_factor"])
	lv := reflect.ValueOf(layout)
	multitile := field(lv, "rows").Int()*field(lv, "cols").Int() > 1
	n := 2 // <|image_start|>, <|image_end|>
	list := reflect.ValueOf(imgs)
	for i := range list.Len() {
		img := list.Index(i)
		size := field(img, "size")
		pw, ph := int(field(size, "X").Int())/patch, int(field(size, "Y").Int())/patch
		n += (pw + merge - 1) / merge * ((ph + merge - 1) / merge)
		if multitile {
			n++ // <|img_thumbnail|> or <|img_row_R_col_C|>: the vocabulary has all up to 10
		}
	}
	return n
}
