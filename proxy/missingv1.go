package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// openAIPaths are the routes OpenAI's SDKs call under their base URL. A
// client given http://host:11435 for http://host:11435/v1 calls them at
// the root, where Ollama has no such route.
var openAIPaths = []string{"/chat/completions", "/completions", "/embeddings", "/models", "/responses"}

// missingV1 replaces the backend's bare "404 page not found" for one of
// openAIPaths, called without /v1, with an OpenAI-shaped error that says
// what to change. Any other answer, a JSON 404 included, passes as sent.
// base is the backend URL's path, before the client's.
func missingV1(resp *http.Response, base string) {
	if resp.StatusCode != http.StatusNotFound || resp.Request == nil {
		return
	}
	p := "/" + strings.TrimPrefix(strings.TrimPrefix(resp.Request.URL.Path, strings.TrimSuffix(base, "/")), "/")
	if !slices.Contains(openAIPaths, p) {
		return
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "application/json" {
		return
	}
	host := resp.Request.Header.Get("X-Forwarded-Host")
	if host == "" {
		host = "HOST:PORT"
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": "ctxproxy: " + p + " is not a route; OpenAI clients need the base URL with /v1 " +
			"(http://" + host + "/v1), which makes this /v1" + p,
		"type": "invalid_request_error",
		"code": "not_found",
	}})
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Del("Content-Encoding")
}
