package wire

import (
	"encoding/json"
	"fmt"
	"testing"
)

// canonical is a JSON body with its object members sorted (encoding/json
// into any and back): two bodies a backend reads alike compare equal.
func canonical(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// TestNamesMergedAndNull: of the members that name a field, encoding/json
// decodes each over the last: a map's members are added (options), a
// pointer is emptied by null (stream, so Ollama streams by default).
func TestNamesMergedAndNull(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"model":"m","options":{"num_ctx":2048},"Options":{"temperature":0.5},"messages":[{"role":"user","content":"hi"}]}`,
			`{"messages":[{"content":"hi","role":"user"}],"model":"m","options":{"num_ctx":2048,"temperature":0.5}}`},
		{`{"model":"m","options":{"num_ctx":2048},"OPTIONS":null,"messages":[{"role":"user","content":"hi"}]}`,
			`{"messages":[{"content":"hi","role":"user"}],"model":"m","options":null}`},
		{`{"model":"m","stream":false,"Stream":null,"messages":[{"role":"user","content":"hi"}]}`,
			`{"messages":[{"content":"hi","role":"user"}],"model":"m","stream":null}`},
		{`{"model":"m","stream":false,"Stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`{"messages":[{"content":"hi","role":"user"}],"model":"m","stream":true}`},
	} {
		req, err := DecodeChat(Ollama, []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if g := canonical(t, req.Body); g != c.want {
			t.Errorf("%s\nresolved to %s\nwant        %s", c.body, g, c.want)
		}
		var stream struct{ Stream *bool }
		json.Unmarshal([]byte(c.body), &stream)
		if want := stream.Stream == nil || *stream.Stream; req.Stream != want {
			t.Errorf("%s: stream %v, want %v as Ollama reads it", c.body, req.Stream, want)
		}
		var opts struct{ Options map[string]any }
		json.Unmarshal([]byte(c.body), &opts)
		if n, _ := opts.Options["num_ctx"].(float64); req.NumCtx != int(n) {
			t.Errorf("%s: num_ctx %d, want %v as Ollama reads it", c.body, req.NumCtx, n)
		}
	}
}

// TestRolesAsOllamaReadsThem: Ollama reads a message's role in lower
// case (api.Message), so "SYSTEM" is the system prompt the strategies keep.
func TestRolesAsOllamaReadsThem(t *testing.T) {
	req, err := DecodeChat(Ollama, []byte(`{"model":"m","messages":[{"role":"SYSTEM","content":"rules"},{"Role":"User","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{req.Messages[0].Role, req.Messages[1].Role}; got[0] != "system" || got[1] != "user" {
		t.Errorf("roles %q, want system and user", got)
	}
	if req.FirstSystem != "rules" || req.FirstUser != "hi" {
		t.Errorf("fingerprint parts %q %q", req.FirstSystem, req.FirstUser)
	}
}

// TestSameName holds sameName to encoding/json's own matching.
func TestSameName(t *testing.T) {
	for _, key := range []string{"messages", "Messages", "MESSAGES", "meſſages", "mEsSaGeS", "message", "messagesx", "méssages", "", "KELVIN", "\u212aelvin"} {
		var v struct {
			Messages int `json:"messages"`
			Kelvin   int `json:"kelvin"`
		}
		json.Unmarshal([]byte(fmt.Sprintf(`{%q:1}`, key)), &v)
		if got := sameName(key, "messages") || sameName(key, "kelvin"); got != (v.Messages == 1 || v.Kelvin == 1) {
			t.Errorf("sameName(%q) = %v; encoding/json matched %v", key, got, !got)
		}
	}
}
