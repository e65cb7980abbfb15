package proxy

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
	"github.com/klauspost/compress/zstd"
)

func postEncoded(t *testing.T, url, enc string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", enc)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func zstdOf(t *testing.T, b []byte) []byte {
	t.Helper()
	w, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return w.EncodeAll(b, nil)
}

func gzipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// TestCompressedBodies: a chat request sent with Content-Encoding zstd
// (as Codex sends it) or gzip is decompressed, counted, managed and
// forwarded plain, as a plain one is; one that does not decompress is
// refused, one that decompresses past max_body too; another encoding is
// forwarded as it came.
func TestCompressedBodies(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	responses := []byte(`{"model":"llama3.1:8b","input":"hi","instructions":"Be brief.","prompt_cache_key":"k1"}`)
	chat := []byte(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	for _, c := range []struct {
		enc, path string
		body      []byte
	}{
		{"zstd", "/v1/responses", zstdOf(t, responses)},
		{"gzip", "/api/chat", gzipOf(t, chat)},
		{"GZIP", "/v1/responses", gzipOf(t, responses)},
	} {
		resp := postEncoded(t, sys.url+c.path, c.enc, c.body)
		reply := readAll(t, resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("X-Ctxproxy-Tokens") == "" || resp.Header.Get("X-Ctxproxy-Session") == "" {
			t.Errorf("%s %s: status %d, tokens %q, session %q: %.300s", c.enc, c.path, resp.StatusCode,
				resp.Header.Get("X-Ctxproxy-Tokens"), resp.Header.Get("X-Ctxproxy-Session"), reply)
		}
		got, ok := be.Last("/api/chat")
		if !ok || got.Header.Get("Content-Encoding") != "" || !bytes.Contains(got.Body, []byte(`"hi"`)) {
			t.Errorf("%s %s: forwarded with Content-Encoding %q: %.200s", c.enc, c.path, got.Header.Get("Content-Encoding"), got.Body)
		}
	}
	if resp := postEncoded(t, sys.url+"/v1/responses", "zstd", []byte("not zstd")); resp.StatusCode != 400 ||
		!strings.Contains(readAll(t, resp.Body), "not valid zstd") {
		t.Errorf("a body that is not zstd: status %d", resp.StatusCode)
	}
	bomb := zstdOf(t, append(append([]byte(`{"model":"m","input":"`), bytes.Repeat([]byte("a"), 40<<20)...), `"}`...))
	if resp := postEncoded(t, sys.url+"/v1/responses", "zstd", bomb); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a %d-byte body decompressing past max_body: status %d", len(bomb), resp.StatusCode)
	}
	n := len(be.Requests())
	resp := postEncoded(t, sys.url+"/api/chat", "br", []byte("brotli bytes"))
	readAll(t, resp.Body)
	if got := be.Requests(); len(got) != n+1 || string(got[n].Body) != "brotli bytes" || got[n].Header.Get("Content-Encoding") != "br" {
		t.Errorf("another encoding was not forwarded as it came")
	}
}
