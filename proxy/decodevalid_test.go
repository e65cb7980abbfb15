package proxy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// decodeTwoPass is how a chat body was read before decodeFused: validate
// it all, then decode the messages; decodeFused must agree with it.
func decodeTwoPass(d Dialect, body []byte, depth int) (*chatRequest, error) {
	ms, err := validMembers(body, depth)
	if err != nil {
		return nil, err
	}
	return decodeValidChat(d, body, ms)
}

// fusedSeeds are chat bodies, valid and not, for the tests below.
var fusedSeeds = []string{
	`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi \n \" \u00e9 \ud83d\ude00 \\"}]}`,
	`{"model":"m","stream":false,"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","name":"f","content":"ok"}],"tools":[{"type":"function"}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:x"}}]}],"max_tokens":5,"max_completion_tokens":7}`,
	`{"messages":[{"role":"user","content":"x","images":["aGk=","aGk="]}],"options":{"num_ctx":4096,"num_predict":100},"think":true,"truncate":false}`,
	`{"messages":[{"role":"user","content":"keep","_preserve":true,"_importance":0.7},{"role":"user","_importance":2,"content":"y"}],"reasoning_effort":"low"}`,
	`{"messag\u0065s":[{"rol\u0065":"user","content":"escaped keys"}]}`,
	` { "messages" : [ ] , "model" : "m" } `,
	`{"messages":[{"role":"user","content":"bad \x escape"}]}`,
	"{\"messages\":[{\"role\":\"user\",\"content\":\"ctl \x01\"}]}",
	`{"messages":[{"role":"user","content":"x"},]}`,
	`{"messages":[{"role":"user","content":"x"}`,
	`{"messages":[{"role":"user","content":"unclosed}]}`,
	`{"messages":[{"role":"user","content":"odd \\\"}]}`,
	`{"messages":[{"role":"user","content":"even \\\\"}]}`,
	`{"messages":[{"role":"user","content":"x","extra":` + strings.Repeat(`[`, 20) + strings.Repeat(`]`, 20) + `}]}`,
	`{"messages":[{"role":"user","content":"x"}],"messages":[{"role":"user","content":"bad \q"}]}`,
	`{"messages":[{"role":"user","content":"bad \q"}],"messages":[{"role":"user","content":"y"}]}`,
	`{"messages":[{"role":"user","content":"first"}],"messages":[{"role":"system","content":"second"}]}`,
	`{"messages":[1,{"role":"user","content":"x"}]}`,
	`{"messages":["x"]}`,
	`{"messages":[{"role":"user","content":"x"} {"role":"user","content":"y"}]}`,
	`{"messages":[{"role":"user","content":"x"},,{"role":"user","content":"y"}]}`,
	`{"messages":{"role":"user"}}`,
	`{"messages":"[{}]"}`,
	`{"messages":null,"model":"m"}`,
	`{"messages":[{"role":"user","content":"x"}]]}`,
	`{"messages":[{"role":"user","content":"x"}],"model":1}`,
	`{"messages":[{"content":"no role"}]}`,
	`{"messages":[{"role":"user","content":"x"}]}x`,
	`[{"messages":[]}]`,
	`{"messages":[{"role":"user","content":"x"}],"tools":[` + strings.Repeat(`[`, 30) + `]}`,
	`{"messages":[{"role":"user","content":"x"}],"options":{"num_ctx":"big"}}`,
}

// checkFused holds decodeFused and decodeChatDepth to decodeTwoPass for
// one body at one nesting limit.
func checkFused(t *testing.T, d Dialect, body []byte, depth int) {
	t.Helper()
	want, werr := decodeTwoPass(d, body, depth)
	got, gerr := decodeChatDepth(d, body, depth)
	if (gerr == nil) != (werr == nil) || errors.Is(gerr, jsonscan.ErrDepth) != errors.Is(werr, jsonscan.ErrDepth) ||
		errors.Is(gerr, errNotChat) != errors.Is(werr, errNotChat) {
		t.Fatalf("%s depth %d %q: decodeChatDepth error %v, two passes %v", d, depth, body, gerr, werr)
	}
	fused, ferr := decodeFused(d, body, depth)
	if ferr == nil && werr != nil {
		t.Fatalf("%s depth %d %q: decodeFused accepted what two passes refuse: %v", d, depth, body, werr)
	}
	if werr != nil {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s depth %d %q: decodeChatDepth\n%+v\ntwo passes\n%+v", d, depth, body, got, want)
	}
	if ferr == nil && !reflect.DeepEqual(fused, want) {
		t.Fatalf("%s depth %d %q: decodeFused\n%+v\ntwo passes\n%+v", d, depth, body, fused, want)
	}
}

// FuzzFusedDecode holds the one-pass chat decoder to the two passes it
// replaces, for any body: the same error class, the same request.
func FuzzFusedDecode(f *testing.F) {
	for _, s := range fusedSeeds {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(4))
	}
	f.Fuzz(func(t *testing.T, body []byte, small uint8) {
		d := Ollama
		if small&0x80 != 0 {
			d = OpenAI
		}
		checkFused(t, d, body, jsonscan.MaxDepth)
		checkFused(t, d, body, int(small%8)+1)
	})
}

// TestFusedDecodeTaken checks that valid chats take the one-pass path,
// so that FuzzFusedDecode compares it and not only the fallback.
func TestFusedDecodeTaken(t *testing.T) {
	bodies := [][]byte{chatBody100K()}
	for _, s := range fusedSeeds[:7] {
		bodies = append(bodies, []byte(s))
	}
	files, _ := filepath.Glob("testdata/requests/*.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	for _, b := range bodies {
		if _, err := decodeFused(Ollama, b, jsonscan.MaxDepth); err != nil {
			t.Errorf("decodeFused(%.60q): %v", b, err)
		}
		checkFused(t, Ollama, b, jsonscan.MaxDepth)
		checkFused(t, OpenAI, b, 5)
	}
}

// TestFusedDecodeDepth checks that a message nested past the limit is
// refused with jsonscan.ErrDepth, as the whole-body validation refuses it.
func TestFusedDecodeDepth(t *testing.T) {
	deep := `{"messages":[{"role":"user","content":"x","x":` + strings.Repeat(`[`, 10) + strings.Repeat(`]`, 10) + `}]}`
	if _, err := decodeChatDepth(Ollama, []byte(deep), 13); err != nil {
		t.Fatalf("13 levels allowed: %v", err)
	}
	if _, err := decodeChatDepth(Ollama, []byte(deep), 12); !errors.Is(err, jsonscan.ErrDepth) {
		t.Fatalf("12 levels allowed: %v, want ErrDepth", err)
	}
}
