package wire

import (
	"io"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

// TestSSEBodyEnds: however Ollama's stream ends, the client's SSE stream
// ends either with "data: [DONE]" or with an error event, never silently
// (a client would take a bare end for a complete answer).
func TestSSEBodyEnds(t *testing.T) {
	_, info, err := translate.Request([]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`),
		translate.RequestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chunk := `{"model":"m","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":"Hel"},"done":false}`
	last := `{"model":"m","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":1}`
	for _, tc := range []struct {
		name, in string
		complete bool
	}{
		{"whole", chunk + "\n" + last + "\n", true},
		{"crlf", chunk + "\r\n" + last + "\r\n", true},
		{"no final newline", chunk + "\n" + last, true},
		{"cut off", chunk + "\n", false},
		{"error line", chunk + "\n" + `{"error":"model crashed"}` + "\n", false},
		{"garbage line", chunk + "\nnot json\n" + last + "\n", false},
	} {
		for _, n := range []int{1, 5, 4096} {
			b := &sseBody{src: io.NopCloser(&pieces{s: tc.in, n: n}), st: translate.NewStream(info, translate.ResponseOptions{})}
			out, err := io.ReadAll(b)
			if err != nil {
				t.Fatalf("%s/%d: %v", tc.name, n, err)
			}
			done := strings.HasSuffix(string(out), "data: [DONE]\n\n")
			errEvent := strings.Contains(string(out), `"error":`)
			if done != tc.complete || errEvent == tc.complete {
				t.Errorf("%s/%d: [DONE] %v, error event %v; want [DONE] %v\n%s", tc.name, n, done, errEvent, tc.complete, out)
			}
		}
	}
}

// pieces reads s n bytes at a time.
type pieces struct {
	s string
	n int
}

func (p *pieces) Read(b []byte) (int, error) {
	if p.s == "" {
		return 0, io.EOF
	}
	k := min(len(b), p.n, len(p.s))
	copy(b, p.s[:k])
	p.s = p.s[k:]
	return k, nil
}
