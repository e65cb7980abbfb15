package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// longMessages are n user and assistant turns of some hundreds of bytes.
func longMessages(n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `{"role":%q,"content":%q}`, role, fmt.Sprintf("turn %d: %s", i, strings.Repeat("lorem ipsum dolor ", 30)))
	}
	return b.String() + "]"
}

// TestNamesAsOllamaReadsThem: Ollama reads a request with encoding/json
// (names matched without regard to case, the last of two members
// winning). A body that spells a member in another case, or names it
// twice, is counted, cut and stored as Ollama runs it, on every route:
// each is counted exactly as the body Ollama would see, which is what
// ctxproxy forwards.
func TestNamesAsOllamaReadsThem(t *testing.T) {
	long, short := longMessages(13), `[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		name, path, body, same string
		model                  string
	}{
		{"messages twice", "/api/chat",
			`{"model":"m","stream":false,"messages":` + short + `,"Messages":` + long + `}`,
			`{"model":"m","stream":false,"messages":` + long + `}`, "m"},
		{"Messages alone", "/api/chat",
			`{"model":"m","stream":false,"Messages":` + long + `}`,
			`{"model":"m","stream":false,"messages":` + long + `}`, "m"},
		{"Model beside model", "/api/chat",
			`{"model":"tiny","Model":"tiny-tools","stream":false,"messages":` + long + `}`,
			`{"model":"tiny-tools","stream":false,"messages":` + long + `}`, "tiny-tools"},
		{"a null model keeps the first", "/api/chat",
			`{"model":"tiny","MODEL":null,"stream":false,"messages":` + long + `}`,
			`{"model":"tiny","stream":false,"messages":` + long + `}`, "tiny"},
		{"message names", "/api/chat",
			`{"model":"m","stream":false,"messages":[{"ROLE":"User","Content":"` + strings.Repeat("word ", 300) + `"}]}`,
			`{"model":"m","stream":false,"messages":[{"role":"User","content":"` + strings.Repeat("word ", 300) + `"}]}`, "m"},
		{"openai Messages", "/v1/chat/completions",
			`{"model":"m","messages":` + short + `,"MESSAGES":` + long + `}`,
			`{"model":"m","messages":` + long + `}`, "m"},
		{"responses Input", "/v1/responses",
			`{"model":"m","Input":"` + strings.Repeat("word ", 300) + `"}`,
			`{"model":"m","input":"` + strings.Repeat("word ", 300) + `"}`, "m"},
		{"anthropic messages twice", "/v1/messages",
			`{"model":"m","max_tokens":50,"messages":` + short + `,"Messages":` + long + `}`,
			`{"model":"m","max_tokens":50,"messages":` + long + `}`, "m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
			// Counted without calibration, so that the two counts compare.
			calibrate := false
			sys := newSystem(t, be.URL, setup{tokens: budget.Config{Calibrate: &calibrate}})
			count := func(body, session string) (http.Header, []byte) {
				resp := post(t, sys.url+c.path, []byte(body), map[string]string{"X-Session-ID": session})
				readAll(t, resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %d", session, resp.StatusCode)
				}
				got, _ := be.Last(backendPath(c.path))
				return resp.Header, got.Body
			}
			want, wantBody := count(c.same, "same")
			got, gotBody := count(c.body, "spelled")
			if g, w := got.Get("X-Ctxproxy-Tokens-Before"), want.Get("X-Ctxproxy-Tokens-Before"); g != w || g == "" {
				t.Errorf("counted %s tokens, want %s as for the body Ollama reads", g, w)
			}
			if g, w := got.Get("X-Ctxproxy-Num-Ctx"), want.Get("X-Ctxproxy-Num-Ctx"); g != w {
				t.Errorf("num_ctx %s, want %s", g, w)
			}
			if g, w := canonical(t, gotBody), canonical(t, wantBody); g != w {
				t.Errorf("forwarded\n%s\nwant what the body Ollama reads forwards\n%s", g, w)
			}
			sys.flush(t)
			s, err := sys.store.Get(t.Context(), "spelled")
			if err != nil {
				t.Fatal(err)
			}
			w, _ := sys.store.Get(t.Context(), "same")
			if s.Model != c.model || len(s.Messages) != len(w.Messages) {
				t.Errorf("stored model %q with %d messages, want %q with %d", s.Model, len(s.Messages), c.model, len(w.Messages))
			}
		})
	}
}

// backendPath is where a route's request reaches the Ollama fake: the
// OpenAI dialects are translated to /api/chat.
func backendPath(route string) string {
	if route == "/v1/chat/completions" || route == "/v1/responses" || route == "/v1/messages" {
		return "/api/chat"
	}
	return route
}

// TestNamesRefusedWhenUnknown: toward a backend whose rules ctxproxy
// cannot know, a body that names a member twice or in another spelling
// is refused with a 400 in the route's error shape, and nothing reaches
// the backend; a body that names each once is served as ever.
func TestNamesRefusedWhenUnknown(t *testing.T) {
	be := fakebackend.New(t, fakebackend.OpenAI, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"}],"Messages":[{"role":"user","content":"b"}]}`},
		{"/v1/chat/completions", `{"model":"m","Messages":[{"role":"user","content":"b"}]}`},
		{"/v1/chat/completions", `{"model":"m","model":"n","messages":[{"role":"user","content":"b"}]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","Content":"b"}]}`},
		{"/v1/messages", `{"model":"m","max_tokens":5,"Stream":true,"messages":[{"role":"user","content":"b"}]}`},
	} {
		n := len(be.Requests())
		resp := post(t, sys.url+c.path, []byte(c.body), nil)
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		json.Unmarshal([]byte(readAll(t, resp.Body)), &e)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error.Message, "cannot tell which the backend reads") {
			t.Errorf("%s: %d %q", c.body, resp.StatusCode, e.Error.Message)
		}
		for _, r := range be.Requests()[n:] {
			if r.Path == c.path {
				t.Errorf("%s reached the backend", c.body)
			}
		}
	}
	resp := post(t, sys.url+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"b"}],"temperature":0.1}`), nil)
	if readAll(t, resp.Body); resp.StatusCode != http.StatusOK {
		t.Errorf("a plain body: %d", resp.StatusCode)
	}
}

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
