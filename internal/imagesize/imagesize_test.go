package imagesize

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
)

func encoded(t testing.TB, format string, w, h int) string {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&b, img)
	case "jpeg":
		err = jpeg.Encode(&b, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func quoted(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestOf(t *testing.T) {
	png := encoded(t, "png", 640, 480)
	jpg := encoded(t, "jpeg", 33, 1001)
	want, tall := chat.Image{Width: 640, Height: 480}, chat.Image{Width: 33, Height: 1001}
	for _, c := range []struct {
		name, v string
		want    chat.Image
	}{
		{"ollama base64", quoted(png), want},
		{"ollama jpeg", quoted(jpg), tall},
		{"escaped slashes", strings.ReplaceAll(quoted(png), "/", `\/`), want},
		{"data url", quoted("data:image/png;base64," + png), want},
		{"openai part", `{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + jpg + `","detail":"low"}}`, tall},
		{"openai string part", `{"type":"image_url","image_url":"data:image/png;base64,` + png + `"}`, want},
		{"responses part", `{"type":"input_image","detail":"auto","image_url":"data:image/png;base64,` + png + `"}`, want},
		{"anthropic part", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}}`, want},
		{"keys in any case", `{"type":"image_url","Image_URL":{"URL":"data:image/png;base64,` + png + `"}}`, want},
		{"remote url", `{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}`, chat.Image{}},
		{"not base64", quoted("not an image!"), chat.Image{}},
		{"truncated", quoted(png[:20]), chat.Image{}},
		{"data url without base64", quoted("data:image/png," + png), chat.Image{}},
		{"number", `12`, chat.Image{}},
		{"empty string", `""`, chat.Image{}},
	} {
		if got := Of([]byte(c.v)); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// Reading a size decodes the header, not the image: a large PNG costs a
// few kilobytes of base64.
func BenchmarkOf(b *testing.B) {
	v := []byte(quoted(encoded(b, "png", 2048, 2048)))
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		if !Of(v).Known() {
			b.Fatal("no size")
		}
	}
}

func FuzzOf(f *testing.F) {
	f.Add([]byte(quoted(encoded(f, "png", 3, 2))))
	f.Add([]byte(`{"source":{"data":"iVBORw0KGgo="}}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		if !json.Valid(v) {
			return
		}
		// Never a panic, and a size is whole or absent.
		if img := Of(v); img != (chat.Image{}) && !img.Known() {
			t.Fatalf("%+v", img)
		}
	})
}
