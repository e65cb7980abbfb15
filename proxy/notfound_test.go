package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// A chat for a model the backend does not have passes its 404 through
// and leaves nothing behind: no session, no row under "Models in use",
// and one notice instead of headers about a plan that never ran.
func TestModelNotFoundLeavesNoTrace(t *testing.T) {
	be := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{Status: http.StatusNotFound,
		ErrorMessage: "model 'nosuchmodel' not found"})
	sys := newSystem(t, be.URL, setup{})
	for _, tc := range []struct{ path, session, body string }{
		{"/api/chat", "s404", `{"model":"nosuchmodel","stream":false,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/chat/completions", "s404-openai", `{"model":"nosuchmodel","messages":[{"role":"user","content":"hi"}]}`},
		{"/api/chat", "", `{"model":"nosuchmodel","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		req, _ := http.NewRequest(http.MethodPost, sys.url+tc.path, strings.NewReader(tc.body))
		if tc.session != "" {
			req.Header.Set("X-Session-ID", tc.session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "model 'nosuchmodel' not found") {
			t.Errorf("%s: %d %s", tc.path, resp.StatusCode, body)
		}
		if n := resp.Header.Get("X-Ctxproxy-Notice"); !strings.Contains(n, `does not have model "nosuchmodel"`) {
			t.Errorf("%s: notice %q", tc.path, n)
		}
		for _, h := range []string{"X-Ctxproxy-Num-Ctx", "X-Ctxproxy-Warning", "X-Ctxproxy-Session", "X-Ctxproxy-Budget"} {
			if v := resp.Header.Get(h); v != "" {
				t.Errorf("%s: %s: %s on a model the backend does not have", tc.path, h, v)
			}
		}
	}
	sys.flush(t)
	list, err := sys.store.List(context.Background())
	if err != nil || len(list) != 0 {
		t.Errorf("sessions after 404s: %+v, %v", list, err)
	}
	if _, err := sys.store.Get(context.Background(), "s404"); !errors.Is(err, snapshots.ErrNotFound) {
		t.Errorf("session s404: %v", err)
	}
	resp, err := http.Get(sys.url + "/ctxproxy/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st adminapi.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Models {
		if m.Name == "nosuchmodel" {
			t.Errorf("status lists a model the backend does not have: %+v", m)
		}
	}
}
