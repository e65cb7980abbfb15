package proxy

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// withTruncate sets Ollama's "truncate" in a chat body.
func withTruncate(t *testing.T, body []byte, v string) []byte {
	t.Helper()
	out, err := wire.SetMember(body, "truncate", []byte(v))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// smallWindow is a setup whose llama3.1 has a 4096-token window, so that
// conversation(…, 44, 200, …) (~3300 tokens) is over the threshold but
// fits, and conversation(…, 80, 200, …) (~6000) does not fit at all.
func smallWindow() setup {
	return setup{tokens: budget.Config{Models: map[string]budget.Model{"llama3.1": {MaxTokens: 4096, MaxOutputTokens: 256}}}}
}

// A client's own truncate: false: nothing is dropped — the conversation
// goes uncut with num_ctx sized — and one that cannot fit gets an overflow
// error in Ollama's shape without reaching the backend. Without it the
// same conversation is trimmed.
func TestClientTruncateFalse(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, smallWindow())
	fits := conversation("llama3.1", 44, 200, false)
	sent := len(forwardedMessages(t, fits))

	resp := post(t, sys.url+"/api/chat", fits, nil)
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || header(resp, "X-Ctxproxy-Dropped") == 0 {
		t.Fatalf("without truncate: status %d, dropped %q; the fixture must be over the threshold",
			resp.StatusCode, resp.Header.Get("X-Ctxproxy-Dropped"))
	}

	resp = post(t, sys.url+"/api/chat", withTruncate(t, fits, "false"), nil)
	io.Copy(io.Discard, resp.Body)
	got, _ := be.Last("/api/chat")
	var fwd struct {
		Messages []json.RawMessage `json:"messages"`
		Truncate *bool             `json:"truncate"`
		Options  struct {
			NumCtx int `json:"num_ctx"`
		} `json:"options"`
	}
	if err := json.Unmarshal(got.Body, &fwd); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || len(fwd.Messages) != sent || header(resp, "X-Ctxproxy-Dropped") != 0 {
		t.Errorf("truncate false: status %d, %d of %d messages forwarded, dropped %q", resp.StatusCode,
			len(fwd.Messages), sent, resp.Header.Get("X-Ctxproxy-Dropped"))
	}
	if fwd.Truncate == nil || *fwd.Truncate || fwd.Options.NumCtx != 4096 {
		t.Errorf("forwarded truncate %v, num_ctx %d; want false and 4096", fwd.Truncate, fwd.Options.NumCtx)
	}

	before := len(be.Requests())
	resp = post(t, sys.url+"/api/chat", withTruncate(t, conversation("llama3.1", 80, 200, false), "false"), nil)
	body := readAll(t, resp.Body)
	var oerr struct {
		Error string `json:"error"`
	}
	if resp.StatusCode != 400 || json.Unmarshal([]byte(body), &oerr) != nil || !strings.Contains(oerr.Error, `"truncate": false`) {
		t.Errorf("overflow: %d %s", resp.StatusCode, body)
	}
	if len(be.Requests()) != before {
		t.Error("an overflowing uncut request reached the backend")
	}

	// truncate: true is Ollama's own cutting: ctxproxy manages as usual.
	resp = post(t, sys.url+"/api/chat", withTruncate(t, fits, "true"), nil)
	io.Copy(io.Discard, resp.Body)
	if header(resp, "X-Ctxproxy-Dropped") == 0 {
		t.Error("truncate true: nothing dropped")
	}
}

// X-Ctxproxy-Max-Messages caps the non-system messages forwarded, below
// the threshold too, keeping the newest turn; a bad value is a 400.
func TestMaxMessagesHeader(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	sys := newSystem(t, be.URL, setup{})
	body := conversation("llama3.1", 20, 50, false) // far below the threshold
	resp := post(t, sys.url+"/api/chat", body, map[string]string{maxMessagesHeader: "6"})
	io.Copy(io.Discard, resp.Body)
	got, _ := be.Last("/api/chat")
	fwd := forwardedMessages(t, got.Body)
	nonSystem := 0
	for _, m := range fwd {
		if m["role"] != "system" {
			nonSystem++
		}
	}
	if resp.StatusCode != 200 || nonSystem > 6 || nonSystem < 5 || fwd[0]["role"] != "system" ||
		fwd[len(fwd)-1]["content"] != "and now?" {
		t.Errorf("status %d, %d non-system messages forwarded: %v", resp.StatusCode, nonSystem, fwd)
	}
	if header(resp, "X-Ctxproxy-Dropped") == 0 || !strings.Contains(resp.Header.Get("X-Ctxproxy-Notice"), "Capped at 6 messages") {
		t.Errorf("headers: dropped %q, notice %q", resp.Header.Get("X-Ctxproxy-Dropped"), resp.Header.Get("X-Ctxproxy-Notice"))
	}
	if strings.Contains(string(got.Body), "Max-Messages") {
		t.Error("the header leaked into the body")
	}
	for _, bad := range []string{"0", "-3", "many"} {
		resp := post(t, sys.url+"/api/chat", body, map[string]string{maxMessagesHeader: bad})
		text := readAll(t, resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(text, maxMessagesHeader) {
			t.Errorf("%q: %d %s", bad, resp.StatusCode, text)
		}
	}
}
