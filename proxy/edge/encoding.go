package edge

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/klauspost/compress/zstd"
)

// DecodeBody returns a chat request's body as it reads when it was sent
// compressed (Content-Encoding gzip or zstd: Codex sends zstd, and Ollama
// decompresses it), so that it is counted and managed like any other; the
// request's Content-Encoding goes, and it is forwarded plain, which every
// backend takes. Another encoding is returned as sent, to be forwarded as
// it came. The decompressed body is held to maxBody as a plain one is.
func DecodeBody(r *http.Request, body []byte, maxBody int64) ([]byte, *wire.Error) {
	if !compressed(r) {
		return body, nil
	}
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	var zr io.Reader
	switch enc {
	case "gzip", "x-gzip":
		g, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, badEncoding(enc, err)
		}
		zr = g
	case "zstd":
		z, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(maxBody)+1))
		if err != nil {
			return nil, badEncoding(enc, err)
		}
		defer z.Close()
		zr = z
	}
	plain, err := io.ReadAll(io.LimitReader(zr, maxBody+1))
	switch {
	case int64(len(plain)) > maxBody:
		return nil, &wire.Error{Status: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("request body decompresses to more than the %d bytes ctxproxy accepts (max_body)", maxBody)}
	case err != nil:
		return nil, badEncoding(enc, err)
	}
	r.Header.Del("Content-Encoding")
	r.Header.Set("Content-Length", strconv.Itoa(len(plain)))
	r.ContentLength = int64(len(plain))
	return plain, nil
}

// compressed reports whether r's body comes in an encoding DecodeBody
// decompresses.
func compressed(r *http.Request) bool {
	switch strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))) {
	case "gzip", "x-gzip", "zstd":
		return true
	}
	return false
}

func badEncoding(enc string, err error) *wire.Error {
	return &wire.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("the request body is not valid %s: %v", enc, err)}
}
