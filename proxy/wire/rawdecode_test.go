package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rawByJSON reads a raw prompt as Ollama does: encoding/json into its
// request type (whose options are a map, its keys matched exactly), then
// the prompt into a string. DecodeRaw must agree with it on every input
// (below the depth bound).
func rawByJSON(body []byte) (RawRequest, string, bool) {
	var ollama struct {
		RawRequest
		Options map[string]json.RawMessage `json:"options"`
	}
	var prompt string
	if json.Unmarshal(body, &ollama) != nil || json.Unmarshal(ollama.Prompt, &prompt) != nil {
		return RawRequest{}, "", false
	}
	req := ollama.RawRequest
	if v := ollama.Options["num_ctx"]; v != nil && json.Unmarshal(v, &req.Options.NumCtx) != nil {
		return RawRequest{}, "", false
	}
	return req, prompt, true
}

var rawSeeds = []string{
	`{"model":"llama3.1:8b","prompt":"Why is the sky blue?","stream":false}`,
	`{"model":"m","prompt":"<|user|>hi","raw":true,"options":{"num_ctx":8192,"temperature":0.1}}`,
	`{"model":"m","prompt":"a \"quoted\" \u00e9 line\n","system":"be brief","template":"{{ .Prompt }}","suffix":"end"}`,
	`{"model":"m","prompt":"x","images":["aGk=","aGk="],"context":[1,2,3],"think":true}`,
	`{"model":"m","prompt":null}`,
	`{"model":"m"}`,
	`{"model":"m","prompt":["a","b"]}`,
	`{"model":"m","prompt":5}`,
	`{"Model":"M","PROMPT":"case","Stream":true,"Options":{"NUM_CTX":4096}}`,
	`{"model":"m","prompt":"p","Options":{"num_ctx":4096}}`,
	`{"model":"m","prompt":"p","options":{"num_ctx":4096},"options":null}`,
	`{"model":"m","prompt":"p","options":{"num_ctx":4096},"options":{"num_ctx":null}}`,
	`{"model":"a","model":"b","prompt":"one","prompt":"two"}`,
	`{"model":"m","prompt":"p","options":{"num_ctx":2048},"options":{"temperature":1}}`,
	`{"model":"m","prompt":"p","options":{"num_ctx":1.5}}`,
	`{"model":"m","prompt":"p","options":null,"stream":null,"raw":null,"system":null}`,
	`{"model":"m","prompt":"p","options":"big"}`,
	`{"model":"m","prompt":"p","context":[1,"2"]}`,
	`{"model":"m","prompt":"p","context":null,"images":null}`,
	`{"model":"m","prompt":"p","images":{}}`,
	`{"model":"m","prompt":"p","raw":"yes"}`,
	`{"model":7,"prompt":"p"}`,
	`{"model":"m","prompt":"p","unknown":{"deep":[1,2,{"x":null}]}}`,
	"{\"model\":\"m\",\"prompt\":\"bad \xff utf8\"}",
	`{"model":"m","pro\u006dpt":"escaped key"}`,
	`{"model":"m","prompt":"p"} trailing`,
	`null`,
	`[]`,
	`"prompt"`,
	``,
}

func compareRaw(t *testing.T, body string) {
	t.Helper()
	wantReq, wantPrompt, wantOK := rawByJSON([]byte(body))
	gotReq, gotPrompt, gotOK := DecodeRaw([]byte(body), 256)
	if gotOK != wantOK {
		t.Fatalf("decodeRaw(%q) ok = %v, encoding/json %v", body, gotOK, wantOK)
	}
	if !gotOK {
		return
	}
	if gotPrompt != wantPrompt {
		t.Errorf("decodeRaw(%q) prompt = %q, encoding/json %q", body, gotPrompt, wantPrompt)
	}
	// Raw values keep their bytes; compact both sides' for comparison,
	// since encoding/json hands out the same bytes.
	norm := func(r RawRequest) RawRequest {
		r.Prompt, r.Think = compactRaw(r.Prompt), compactRaw(r.Think)
		for i := range r.Images {
			r.Images[i] = compactRaw(r.Images[i])
		}
		return r
	}
	if d := cmp.Diff(norm(wantReq), norm(gotReq)); d != "" {
		t.Errorf("decodeRaw(%q) (-encoding/json +decodeRaw):\n%s", body, d)
	}
}

func compactRaw(r json.RawMessage) json.RawMessage {
	if r == nil {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, r) != nil {
		return r
	}
	return b.Bytes()
}

func TestDecodeRawAgreesWithJSON(t *testing.T) {
	for _, s := range rawSeeds {
		compareRaw(t, s)
	}
	// A long prompt is shared with the body, not copied.
	long := `{"model":"m","prompt":"` + strings.Repeat("word ", 20000) + `"}`
	compareRaw(t, long)
}

// A request nested deeper than max_depth is forwarded as sent, unread.
func TestDecodeRawDepth(t *testing.T) {
	deep := `{"model":"m","prompt":"p","x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`
	if _, _, ok := DecodeRaw([]byte(deep), 256); ok {
		t.Error("a body nested 301 levels deep was read with max_depth 256")
	}
}

func FuzzDecodeRaw(f *testing.F) {
	for _, s := range rawSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if strings.Count(body, "[")+strings.Count(body, "{") > 200 {
			return // below the depth bound, where the two must agree
		}
		compareRaw(t, body)
	})
}

// BenchmarkDecodeRaw reads a raw request with a 100 KB prompt.
func BenchmarkDecodeRaw(b *testing.B) {
	body := []byte(`{"model":"llama3.1:8b","prompt":"` + strings.Repeat("message says something useful. ", 3300) + `","stream":false,"options":{"num_ctx":8192}}`)
	b.Run("jsonscan", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := DecodeRaw(body, 256); !ok {
				b.Fatal("not read")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, ok := rawByJSON(body); !ok {
				b.Fatal("not read")
			}
		}
	})
}

// DecodeChat reads model, stream and max_tokens as encoding/json did
// (null keeps the default, another type makes the body one ctxproxy does
// not understand, forwarded as sent).
func TestDecodeChatSmallValuesAsJSON(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		members   string
		ok        bool
		model     string
		stream    bool
		maxOutput int
	}{
		{`"model":"llama3.1:8b","stream":false,"max_tokens":100`, true, "llama3.1:8b", false, 100},
		{`"model":"caf\u00e9","stream":true`, true, "café", true, 0},
		{`"model":null,"stream":null,"max_tokens":null`, true, "", true, 0},
		{`"model":"m","max_tokens":10,"max_completion_tokens":20`, true, "m", true, 20},
		{`"model":"m","max_completion_tokens":20,"max_tokens":10`, true, "m", true, 20},
		{`"model":5`, false, "", false, 0},
		{`"model":"m","stream":"yes"`, false, "", false, 0},
		{`"model":"m","max_tokens":1.5`, false, "", false, 0},
		{`"model":"m","max_tokens":"10"`, false, "", false, 0},
		{"\"model\":\"bad \xff\"", true, "bad \ufffd", true, 0},
	} {
		body := `{` + c.members + `,` + msgs + `}`
		req, err := DecodeChat(Ollama, []byte(body))
		if (err == nil) != c.ok {
			t.Errorf("decodeChat(%s): err %v, want ok %v", body, err, c.ok)
			continue
		}
		if err == nil && (req.Model != c.model || req.Stream != c.stream || req.MaxOutput != c.maxOutput) {
			t.Errorf("decodeChat(%s) = model %q stream %v max %d; want %q %v %d", body, req.Model, req.Stream, req.MaxOutput, c.model, c.stream, c.maxOutput)
		}
	}
}
