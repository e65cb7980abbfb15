// Package imagesize reads the size of an image that a chat request
// carries as base64 text, decoding only the image's header. The proxy
// needs the size because a vision model's image costs prompt tokens by
// its size: a Qwen-VL model, for one, cuts it into patches.
package imagesize

import (
	"bytes"
	"encoding/base64"
	"image"
	_ "image/jpeg" // the formats Ollama's model code decodes (model/model.go, v0.17.4)
	_ "image/png"

	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/tiff"
	_ "golang.org/x/image/webp"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// Of returns the size of the image in the JSON value v, as any dialect
// sends one:
//   - a string of base64 data (an element of Ollama's "images"), or a
//     data: URL (OpenAI's "image_url" as a string, the Responses API's
//     "input_image" part's "image_url");
//   - a content part holding one: {"image_url": {"url": …}} (OpenAI),
//     {"image_url": …}, {"source": {"data": …}} (Anthropic), {"url": …},
//     {"data": …}.
//
// Member names match in any case, as the backend's encoding/json reads
// them. The zero Image means the size could not be read: a remote URL, a
// format Ollama does not decode either, damaged data.
func Of(v []byte) chat.Image {
	switch jsonscan.KindOf(v) {
	case jsonscan.KindString:
		return ofString(v)
	case jsonscan.KindObject:
		var img chat.Image
		_ = jsonscan.Members(v, func(key, val []byte) error {
			for _, name := range []string{"image_url", "source", "url", "data"} {
				if keyIs(key, name) {
					if got := Of(val); got.Known() {
						img = got
					}
				}
			}
			return nil
		})
		return img
	}
	return chat.Image{}
}

// keyIs reports whether the raw key token names name in any case.
func keyIs(key []byte, name string) bool {
	if len(key) == len(name)+2 && bytes.EqualFold(key[1:len(key)-1], []byte(name)) {
		return true
	}
	return bytes.IndexByte(key, '\\') >= 0 && bytes.EqualFold([]byte(jsonscan.KeyName(key)), []byte(name))
}

// ofString reads the string token tok: base64 data, or a data: URL.
func ofString(tok []byte) chat.Image {
	s := tok[1 : len(tok)-1]
	if bytes.IndexByte(s, '\\') >= 0 {
		s = jsonscan.AppendUnescaped(nil, tok) // rare: an encoder that escapes "/"
	}
	if bytes.HasPrefix(s, []byte("data:")) {
		_, data, ok := bytes.Cut(s, []byte(";base64,"))
		if !ok {
			return chat.Image{}
		}
		s = data
	}
	// DecodeConfig reads a few kilobytes at most for PNG, WebP and BMP;
	// a JPEG's size follows its metadata segments.
	cfg, _, err := image.DecodeConfig(base64.NewDecoder(base64.StdEncoding, bytes.NewReader(s)))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return chat.Image{}
	}
	return chat.Image{Width: cfg.Width, Height: cfg.Height}
}
