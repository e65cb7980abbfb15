package spread

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/fleet"
)

// fake is an httptest server that answers as Ollama does: JSON for the
// listings, NDJSON progress for pull and create, blobs kept by digest.
type fake struct {
	name   string
	broken bool   // every request answers 500
	fail   string // create and pull end with this error line
	srv    *httptest.Server

	mu       sync.Mutex
	models   map[string]time.Time // name → modified
	loaded   map[string]time.Time // name → expires
	blobs    map[string][]byte
	requests []string // "METHOD path"
	headers  []http.Header
}

func newFake(t *testing.T, name string, models ...string) *fake {
	t.Helper()
	f := &fake{name: name, models: map[string]time.Time{}, loaded: map[string]time.Time{}, blobs: map[string][]byte{}}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, m := range models {
		f.models[m] = base.Add(time.Duration(i) * time.Hour)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func progress(w http.ResponseWriter, lines ...any) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	for _, l := range lines {
		_ = json.NewEncoder(w).Encode(l)
		w.(http.Flusher).Flush()
	}
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	f.headers = append(f.headers, r.Header.Clone())
	if f.broken {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "broken"})
		return
	}
	var req struct {
		Model, Name, Source, Destination string
		Files                            map[string]string
	}
	_ = json.Unmarshal(body, &req)
	if req.Model == "" {
		req.Model = req.Name
	}
	if req.Model != "" && !strings.Contains(req.Model, ":") {
		req.Model += ":latest"
	}
	switch p := r.URL.Path; {
	case p == "/api/version":
		writeJSON(w, 200, map[string]string{"version": "0.17.4"})
	case p == "/api/tags":
		var ms []map[string]any
		for m, at := range f.models {
			ms = append(ms, map[string]any{"name": m, "model": m, "modified_at": at, "extra": map[string]string{"on": f.name}})
		}
		writeJSON(w, 200, map[string]any{"models": ms})
	case p == "/api/ps":
		ms := []map[string]any{}
		for m, at := range f.loaded {
			ms = append(ms, map[string]any{"name": m, "model": m, "expires_at": at, "size_vram": 1})
		}
		writeJSON(w, 200, map[string]any{"models": ms})
	case p == "/v1/models":
		var data []map[string]any
		for m, at := range f.models {
			data = append(data, map[string]any{"id": m, "object": "model", "created": at.Unix(), "owned_by": f.name})
		}
		writeJSON(w, 200, map[string]any{"object": "list", "data": data})
	case strings.HasPrefix(p, "/v1/models/"):
		m := strings.TrimPrefix(p, "/v1/models/")
		if _, ok := f.models[m]; !ok {
			writeJSON(w, 404, map[string]any{"error": map[string]string{"message": "model not found"}})
			return
		}
		writeJSON(w, 200, map[string]any{"id": m, "object": "model", "owned_by": f.name})
	case p == "/api/show" || p == "/api/embed" || p == "/v1/embeddings":
		if _, ok := f.models[req.Model]; !ok {
			writeJSON(w, 404, map[string]string{"error": "model '" + req.Model + "' not found"})
			return
		}
		writeJSON(w, 200, map[string]string{"model": req.Model, "server": f.name})
	case strings.HasPrefix(p, "/api/blobs/"):
		d := strings.TrimPrefix(p, "/api/blobs/")
		if r.Method == http.MethodHead {
			if _, ok := f.blobs[d]; !ok {
				w.WriteHeader(404)
			}
			return
		}
		f.blobs[d] = body
		w.WriteHeader(http.StatusCreated)
	case p == "/api/create":
		for _, d := range req.Files {
			if _, ok := f.blobs[d]; !ok {
				writeJSON(w, 400, map[string]string{"error": "missing blob " + d})
				return
			}
		}
		f.ended(w, req.Model, map[string]string{"status": "parsing GGUF"})
	case p == "/api/pull":
		f.ended(w, req.Model, map[string]any{"status": "pulling manifest"}, map[string]any{"status": "pulling abc", "total": 10, "completed": 10})
	case p == "/api/delete":
		if _, ok := f.models[req.Model]; !ok {
			writeJSON(w, 404, map[string]string{"error": "model '" + req.Model + "' not found"})
			return
		}
		delete(f.models, req.Model)
		w.WriteHeader(200)
	case p == "/api/push":
		progress(w, map[string]string{"status": "pushed by " + f.name}, map[string]string{"status": "success"})
	default:
		http.NotFound(w, r)
	}
}

// ended streams lines, then success (the model kept) or f.fail.
func (f *fake) ended(w http.ResponseWriter, model string, lines ...any) {
	if f.fail != "" {
		progress(w, append(lines, map[string]string{"error": f.fail})...)
		return
	}
	f.models[model] = time.Now()
	progress(w, append(lines, map[string]string{"status": "success"})...)
}

// server is f as a fleet server, its models listed once (polled).
func (f *fake) server(t *testing.T) *fleet.Node {
	t.Helper()
	u, _ := url.Parse(f.srv.URL)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	be := backend.New(backend.Config{URL: u, Client: &http.Client{Transport: tr},
		Prepare: backend.Preparation{Mode: backend.PrepareNone, List: true}})
	backend.NewPoller(be).Run(t.Context())
	f.mu.Lock()
	f.requests, f.headers = nil, nil
	f.mu.Unlock()
	return &fleet.Node{Name: f.name, URL: u, Backend: be, Transport: tr}
}

// downServer is a fleet server nothing listens at.
func downServer(t *testing.T, name string) *fleet.Node {
	t.Helper()
	ts := httptest.NewServer(http.NotFoundHandler())
	ts.Close()
	u, _ := url.Parse(ts.URL)
	tr := &http.Transport{}
	return &fleet.Node{Name: name, URL: u, Transport: tr,
		Backend: backend.New(backend.Config{URL: u, Client: &http.Client{Transport: tr}})}
}

// proxyOver is a Handler over servers, served by an httptest server.
func proxyOver(t *testing.T, servers ...*fleet.Node) *httptest.Server {
	t.Helper()
	r, err := fleet.New(servers, "")
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Fleet: r, MaxBody: 1 << 20, Timeout: 2 * time.Second,
		Shape: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			pr.Out.Header.Del(BackendHeader)
		}})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

func do(t *testing.T, method, u, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, u, rd)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func names(t *testing.T, body, list, key string) []string {
	t.Helper()
	var v map[string]json.RawMessage
	var entries []map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if err := json.Unmarshal(v[list], &entries); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var out []string
	for _, e := range entries {
		out = append(out, fmt.Sprint(e[key]))
	}
	return out
}
