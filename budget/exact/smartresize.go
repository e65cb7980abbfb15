package exact

import "math"

// smartResize is the resize rule of Ollama's Qwen-style image processors
// (v0.17.4: model/models/qwen25vl/process_image.go,
// qwen3vl/imageprocessor.go, glmocr/imageprocessor.go). Each side is
// rounded to the nearest multiple of factor (halves to even). When the
// image's pixels, counted frames times, are more than maxPixels, both
// sides are divided by √(pixels/maxPixels) and floored to multiples of
// factor; when fewer than minPixels, multiplied by √(minPixels/pixels)
// and ceiled. It returns the sides in squares of factor pixels. The float
// operations are the processors', in their order, so that the results
// agree at the boundaries.
func smartResize(height, width, factor, frames, minPixels, maxPixels int) (rows, cols int) {
	f := float64(factor)
	h, w := float64(height), float64(width)
	rows, cols = int(math.RoundToEven(h/f)), int(math.RoundToEven(w/f))
	switch pixels := frames * rows * factor * cols * factor; {
	case pixels > maxPixels:
		beta := math.Sqrt(float64(frames*height*width) / float64(maxPixels))
		rows, cols = int(math.Floor(h/beta/f)), int(math.Floor(w/beta/f))
	case pixels < minPixels:
		beta := math.Sqrt(float64(minPixels) / float64(frames*height*width))
		rows, cols = int(math.Ceil(h*beta/f)), int(math.Ceil(w*beta/f))
	}
	return rows, cols
}
