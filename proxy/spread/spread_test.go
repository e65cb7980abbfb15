package spread

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
)

// TestListingsMerged: /api/tags, /api/ps and /v1/models are every
// server's, each model once, latest first, each entry as its server
// wrote it.
func TestListingsMerged(t *testing.T) {
	a := newFake(t, "a", "qwen3:latest", "llama3.1:8b") // qwen3 00:00, llama 01:00
	b := newFake(t, "b", "gemma3:4b", "qwen3:latest", "phi4:latest")
	b.models["phi4:latest"] = time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	now := time.Now()
	a.loaded["qwen3:latest"] = now.Add(time.Minute)
	b.loaded["qwen3:latest"] = now.Add(2 * time.Minute)
	b.loaded["gemma3:4b"] = now.Add(time.Hour)
	p := proxyOver(t, a.server(t), b.server(t))

	resp, body := do(t, "GET", p.URL+"/api/tags", "")
	if resp.StatusCode != 200 {
		t.Fatalf("tags: %d %s", resp.StatusCode, body)
	}
	// qwen3 is a's (listed first), older than llama3.1; a tie keeps the
	// servers' order.
	want := []string{"phi4:latest", "llama3.1:8b", "qwen3:latest", "gemma3:4b"}
	if got := names(t, body, "models", "name"); !slices.Equal(got, want) {
		t.Fatalf("tags: %v, want %v", got, want)
	}
	if !strings.Contains(body, `"extra":{"on":"a"}`) || !strings.Contains(body, `"extra":{"on":"b"}`) {
		t.Fatalf("tags lost the servers' own members: %s", body)
	}
	_, body = do(t, "GET", p.URL+"/api/ps", "")
	if got := names(t, body, "models", "name"); !slices.Equal(got, []string{"gemma3:4b", "qwen3:latest"}) {
		t.Fatalf("ps: %v", got)
	}
	_, body = do(t, "GET", p.URL+"/v1/models", "")
	if got := names(t, body, "data", "id"); !slices.Equal(got, want) {
		t.Fatalf("v1/models: %v, want %v", got, want)
	}
	if !strings.Contains(body, `"object":"list"`) {
		t.Fatalf("v1/models: %s", body)
	}
	resp, body = do(t, "GET", p.URL+"/v1/models/phi4:latest", "")
	if resp.StatusCode != 200 || resp.Header.Get(BackendHeader) != "b" {
		t.Fatalf("v1/models/phi4: %d %q %s", resp.StatusCode, resp.Header.Get(BackendHeader), body)
	}
	resp, _ = do(t, "GET", p.URL+"/v1/models/none", "")
	if resp.StatusCode != 404 {
		t.Fatalf("v1/models/none: %d", resp.StatusCode)
	}
}

// TestListingFailures: a failing server is left out; all failing is a
// 502 in the route's dialect.
func TestListingFailures(t *testing.T) {
	a := newFake(t, "a", "qwen3:latest")
	b := newFake(t, "b", "gemma3:4b")
	b.broken = true
	p := proxyOver(t, a.server(t), b.server(t), downServer(t, "c"))
	resp, body := do(t, "GET", p.URL+"/api/tags", "")
	if got := names(t, body, "models", "name"); resp.StatusCode != 200 || !slices.Equal(got, []string{"qwen3:latest"}) {
		t.Fatalf("tags: %d %v", resp.StatusCode, got)
	}
	a.broken = true
	resp, body = do(t, "GET", p.URL+"/api/tags", "")
	if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(body, `{"error":"`) {
		t.Fatalf("all failing, tags: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, "GET", p.URL+"/v1/models", "")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"type":"server_error"`) {
		t.Fatalf("all failing, v1/models: %d %s", resp.StatusCode, body)
	}
}

// TestCreateWithBlobs: the blob reaches every server, byte for byte,
// and the create that uses it too.
func TestCreateWithBlobs(t *testing.T) {
	a, b := newFake(t, "a"), newFake(t, "b")
	p := proxyOver(t, a.server(t), b.server(t))
	blob := bytes.Repeat([]byte("0123456789abcdef"), 100000) // 1.6 MB
	d := fmt.Sprintf("sha256:%x", sha256.Sum256(blob))
	b.blobs[d] = blob
	resp, _ := do(t, "HEAD", p.URL+"/api/blobs/"+d, "")
	if resp.StatusCode != 404 {
		t.Fatalf("HEAD with one server lacking the blob: %d, want 404", resp.StatusCode)
	}
	resp, body := do(t, "POST", p.URL+"/api/blobs/"+d, string(blob))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST blob: %d %s", resp.StatusCode, body)
	}
	for _, f := range []*fake{a, b} {
		if !bytes.Equal(f.blobs[d], blob) {
			t.Fatalf("%s got %d bytes of the blob", f.name, len(f.blobs[d]))
		}
	}
	if resp, _ := do(t, "HEAD", p.URL+"/api/blobs/"+d, ""); resp.StatusCode != 200 {
		t.Fatalf("HEAD once everywhere: %d", resp.StatusCode)
	}
	resp, body = do(t, "POST", p.URL+"/api/create", `{"model":"mine","files":{"m.gguf":"`+d+`"}}`)
	if resp.StatusCode != 200 || !strings.HasSuffix(body, `{"status":"success"}`+"\n") || strings.Contains(body, "error") {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	if _, ok := a.models["mine:latest"]; !ok {
		t.Fatal("a did not create the model")
	}
	if _, ok := b.models["mine:latest"]; !ok {
		t.Fatal("b did not create the model")
	}
}

// TestPartialFailureTold: a server that fails a streamed pull is told
// in an extra error line; a non-streamed delete, in a failing status.
func TestPartialFailureTold(t *testing.T) {
	a, b := newFake(t, "a", "x:latest"), newFake(t, "b")
	b.fail = "disk full"
	p := proxyOver(t, a.server(t), b.server(t))
	resp, body := do(t, "POST", p.URL+"/api/pull", `{"model":"qwen3"}`)
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if resp.StatusCode != 200 || lines[len(lines)-2] != `{"status":"success"}` ||
		lines[len(lines)-1] != `{"error":"backend b: disk full"}` {
		t.Fatalf("pull: %d %s", resp.StatusCode, body)
	}
	// Deleting a model one server lacks is no failure.
	resp, body = do(t, "DELETE", p.URL+"/api/delete", `{"model":"x:latest"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("delete where one has it: %d %s", resp.StatusCode, body)
	}
	b.broken = true
	a.models["y:latest"] = time.Now()
	resp, body = do(t, "DELETE", p.URL+"/api/delete", `{"model":"y"}`)
	if resp.StatusCode != 500 || body != `{"error":"backend b: broken"}`+"\n" {
		t.Fatalf("delete failing on b: %d %s", resp.StatusCode, body)
	}
}

// TestBackendHeader: a named server alone gets the request, and says so;
// an unknown name is a 400.
func TestBackendHeader(t *testing.T) {
	a, b := newFake(t, "a"), newFake(t, "b")
	p := proxyOver(t, a.server(t), b.server(t))
	resp, body := do(t, "POST", p.URL+"/api/pull", `{"model":"qwen3"}`, BackendHeader, "b")
	if resp.StatusCode != 200 || resp.Header.Get(BackendHeader) != "b" || !strings.Contains(body, "success") {
		t.Fatalf("pull on b: %d %q %s", resp.StatusCode, resp.Header.Get(BackendHeader), body)
	}
	if len(a.seen()) != 0 {
		t.Fatalf("a was asked: %v", a.seen())
	}
	if h := b.headers[0].Get(BackendHeader); h != "" {
		t.Fatalf("the backend saw ctxproxy's header: %q", h)
	}
	resp, body = do(t, "POST", p.URL+"/api/pull", `{"model":"qwen3"}`, BackendHeader, "z")
	if resp.StatusCode != 400 || !strings.Contains(body, `\"z\" is none of a, b`) {
		t.Fatalf("unknown name: %d %s", resp.StatusCode, body)
	}
	// push: the first server that lists the model.
	b.models["mine:latest"] = time.Now()
	p = proxyOver(t, a.server(t), b.server(t))
	resp, body = do(t, "POST", p.URL+"/api/push", `{"model":"mine"}`)
	if resp.Header.Get(BackendHeader) != "b" || !strings.Contains(body, "pushed by b") {
		t.Fatalf("push: %q %s", resp.Header.Get(BackendHeader), body)
	}
}

// TestByModel: show and embed go to the server that has the model; one
// that cannot be reached gives way to the next.
func TestByModel(t *testing.T) {
	a, b := newFake(t, "a", "qwen3:latest"), newFake(t, "b", "nomic:latest")
	p := proxyOver(t, a.server(t), b.server(t))
	for _, c := range []struct{ path, body, want string }{
		{"/api/show", `{"name":"nomic"}`, "b"},
		{"/api/show", `{"model":"qwen3"}`, "a"},
		{"/api/embed", `{"model":"nomic:latest","input":"hi"}`, "b"},
		{"/v1/embeddings", `{"model":"qwen3","input":"hi"}`, "a"},
	} {
		resp, body := do(t, "POST", p.URL+c.path, c.body)
		if resp.StatusCode != 200 || resp.Header.Get(BackendHeader) != c.want || !strings.Contains(body, `"server":"`+c.want+`"`) {
			t.Fatalf("%s %s: %d %q %s", c.path, c.body, resp.StatusCode, resp.Header.Get(BackendHeader), body)
		}
	}
	resp, body := do(t, "GET", p.URL+"/api/version", "")
	if resp.StatusCode != 200 || resp.Header.Get(BackendHeader) != "a" {
		t.Fatalf("version: %d %q %s", resp.StatusCode, resp.Header.Get(BackendHeader), body)
	}

	// A server down: the next one answers, and the down one is taken out.
	down := downServer(t, "down")
	c := newFake(t, "c", "qwen3:latest")
	p = proxyOver(t, down, c.server(t))
	resp, body = do(t, "GET", p.URL+"/api/version", "")
	if resp.StatusCode != 200 || resp.Header.Get(BackendHeader) != "c" {
		t.Fatalf("version with the first down: %d %s", resp.StatusCode, body)
	}
	if down.Up(time.Now()) {
		t.Fatal("the server that could not be reached is still up")
	}
	down.Answered()   // back in,
	down.Weight = 100 // and first for qwen3
	resp, body = do(t, "POST", p.URL+"/api/show", `{"model":"qwen3"}`)
	if resp.StatusCode != 200 || resp.Header.Get(BackendHeader) != "c" {
		t.Fatalf("show with the first down: %d %q %s", resp.StatusCode, resp.Header.Get(BackendHeader), body)
	}
	if down.Up(time.Now()) {
		t.Fatal("show did not try the server that ranks first")
	}
}

// TestAllDown: nothing can be reached: 502 in the route's dialect.
func TestAllDown(t *testing.T) {
	p := proxyOver(t, downServer(t, "x"), downServer(t, "y"))
	resp, body := do(t, "POST", p.URL+"/v1/embeddings", `{"model":"m","input":"hi"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"type":"server_error"`) {
		t.Fatalf("embeddings: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, "POST", p.URL+"/api/pull", `{"model":"m"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "backend x: could not be reached") {
		t.Fatalf("pull: %d %s", resp.StatusCode, body)
	}
}

// TestOllamaClient: Ollama's own Go client, pointed at ctxproxy over two
// servers, lists the models of both and creates a model on both.
func TestOllamaClient(t *testing.T) {
	a, b := newFake(t, "a", "qwen3:latest"), newFake(t, "b", "gemma3:4b")
	p := proxyOver(t, a.server(t), b.server(t))
	u, _ := url.Parse(p.URL)
	c := api.NewClient(u, http.DefaultClient)
	ctx := context.Background()
	list, err := c.List(ctx)
	if err != nil || len(list.Models) != 2 {
		t.Fatalf("List: %v %+v", err, list)
	}
	blob := []byte("GGUF model bytes")
	d := fmt.Sprintf("sha256:%x", sha256.Sum256(blob))
	if err := c.CreateBlob(ctx, d, bytes.NewReader(blob)); err != nil {
		t.Fatalf("CreateBlob: %v", err)
	}
	var statuses []string
	err = c.Create(ctx, &api.CreateRequest{Model: "mine", Files: map[string]string{"m.gguf": d}},
		func(p api.ProgressResponse) error { statuses = append(statuses, p.Status); return nil })
	if err != nil || statuses[len(statuses)-1] != "success" {
		t.Fatalf("Create: %v %v", err, statuses)
	}
	list, _ = c.List(ctx)
	if len(list.Models) != 3 || list.Models[0].Name != "mine:latest" {
		t.Fatalf("List after Create: %+v", list.Models)
	}
	b.fail = "no space left"
	err = c.Pull(ctx, &api.PullRequest{Model: "phi4"}, func(api.ProgressResponse) error { return nil })
	if err == nil || err.Error() != "backend b: no space left" {
		t.Fatalf("Pull failing on b: %v", err)
	}
}
