package proxy

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

// apiError is an error a client sees, written in its dialect's shape: a Go
// error string with internals never reaches a client.
type apiError struct {
	status  int
	message string
	// code is OpenAI's machine-readable code (e.g. context_length_exceeded).
	code string
	// raw, when set, is the complete error body to send in the client's
	// dialect (from the translator, which fills param and type itself).
	raw []byte
}

// writeError writes e in the shape clients of dialect d parse:
// OpenAI {"error":{"message","type","param","code"}}, Ollama {"error":"..."}.
func writeError(w http.ResponseWriter, d Dialect, e apiError) {
	body := errorBody(d, e)
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(body, '\n'))
}

// dialectOf returns the dialect whose error shape fits a request path:
// Anthropic's for /v1/messages, the OpenAI shape for the rest of /v1/...,
// Ollama's for everything else.
func dialectOf(path string) Dialect {
	switch {
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return Messages
	case path == "/v1/responses" || strings.HasPrefix(path, "/v1/responses/"):
		return Responses
	case strings.HasPrefix(path, "/v1/"):
		return OpenAI
	}
	return Ollama
}

// errorBody is e in the dialect's error shape.
func errorBody(d Dialect, e apiError) []byte {
	if d != Ollama && e.raw != nil {
		return e.raw
	}
	switch d {
	case Ollama:
		body, _ := json.Marshal(map[string]string{"error": e.message})
		return body
	case Messages:
		te := translate.Error{Status: e.status, Message: e.message, Code: e.code}
		return te.AnthropicJSON()
	}
	typ := "invalid_request_error"
	switch {
	case e.status >= 500:
		typ = "server_error"
	case e.status == http.StatusUnauthorized:
		typ = "authentication_error"
	}
	var code any
	if e.code != "" {
		code = e.code
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": e.message, "type": typ, "param": nil, "code": code,
	}})
	return body
}
