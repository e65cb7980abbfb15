package exact

import (
	"math"

	"github.com/ctxproxy/ctxproxy/chat"
)

// Images on Ollama 0.30 and later. From 0.30 Ollama runs every model in
// llama.cpp's llama-server, whose multimodal library (mtmd, with its
// clip vision encoders) turns an image into prompt tokens, not Ollama's
// own model code: the rules in visionFamilies no longer apply there.
// Ollama hands llama-server each image's bytes as they came (a WebP as
// PNG) with a media marker where the prompt's [img-N] tag was; its
// compatibility layer rewrites the vision keys of the files its own
// converter wrote (model_info's "<arch>.vision.*") into clip's, and
// llama-server's prompt_n, which Ollama reports as prompt_eval_count,
// counts each image chunk's tokens: what clip's encoder outputs for the
// image after mtmd's preprocessing (a fixed-size resize, a size-dependent
// resize, tiling), plus the marker text mtmd writes around it.
//
// serverFamilies maps each architecture whose images ctxproxy counts that
// way to its rule, made from model_info and a function that counts the
// tokens of marker text as llama-server does (mtmd tokenizes each marker
// on its own, special tokens parsed); each is checked against a real
// llama-server Ollama in the e2e suite. Other families, and models whose
// projector is a file of its own, are estimated (projectorEstimate).
var serverFamilies = map[string]func(kv map[string]any, text func(string) int) imageCoster{
	"gemma3":      gemma3ServerImages,
	"qwen25vl":    qwen25vlServerImages,
	"qwen3vl":     qwen3vlServerImages,
	"qwen3vlmoe":  qwen3vlServerImages,
	"qwen35":      qwen35ServerImages,
	"qwen35moe":   qwen35ServerImages,
	"mistral3":    mistral3ServerImages,
	"llama4":      llama4ServerImages,
	"glmocr":      glmocrServerImages,
	"deepseekocr": deepseekocrServerImages,
}

// serverImagesOf returns how a model's images cost on llama-server: nil
// when ctxproxy does not know its family's rule there, or the projector
// is a file of its own (projector_info holds its facts), which Ollama's
// compatibility layer leaves as it is.
func serverImagesOf(kv, projectorInfo map[string]any, text func(string) int) imageCoster {
	if len(projectorInfo) > 0 {
		return nil
	}
	arch, _ := kv["general.architecture"].(string)
	if rule := serverFamilies[arch]; rule != nil {
		return rule(kv, text)
	}
	return nil
}

// dynSize is clip's size-dependent resize (mtmd's dyn_size preprocessor,
// the Qwen-VL and GLM-4V projectors'): each side is rounded to a multiple
// of factor = patch_size × merge pixels (halves away from zero, at least
// one factor); an image over maxTokens squares is scaled down by
// √(pixels/max) and floored to multiples of factor, one under minTokens
// scaled up by √(min/pixels) and ceiled; each factor×factor square is one
// token, plus the tokens of the markers mtmd writes around the image
// (markers). The arithmetic is clip's, in single precision.
type dynSize struct {
	factor, minTokens, maxTokens, markers int
}

func (d dynSize) cost(img chat.Image) (int, bool) {
	if !img.Known() {
		n, _ := d.cost(chat.Image{Width: 1024, Height: 768})
		return n, false
	}
	w, h := d.resize(img.Width, img.Height)
	return (w/d.factor)*(h/d.factor) + d.markers, true
}

// resize returns the sides, in pixels, clip resizes a width×height image
// to (calc_size_preserved_ratio).
func (d dynSize) resize(width, height int) (w, h int) {
	f := float32(d.factor)
	round := func(x float32) int { return int(math.Round(float64(x/f))) * d.factor }
	floor := func(x float32) int { return int(math.Floor(float64(x/f))) * d.factor }
	ceil := func(x float32) int { return int(math.Ceil(float64(x/f))) * d.factor }
	area := d.factor * d.factor
	minPixels, maxPixels := d.minTokens*area, d.maxTokens*area
	w, h = max(d.factor, round(float32(width))), max(d.factor, round(float32(height)))
	switch {
	case maxPixels > 0 && w*h > maxPixels:
		beta := float32(math.Sqrt(float64(float32(height) * float32(width) / float32(maxPixels))))
		h, w = max(d.factor, floor(float32(height)/beta)), max(d.factor, floor(float32(width)/beta))
	case minPixels > 0 && w*h < minPixels:
		beta := float32(math.Sqrt(float64(float32(minPixels) / (float32(height) * float32(width)))))
		h, w = ceil(float32(height)*beta), ceil(float32(width)*beta)
	}
	return w, h
}
