package wire

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

// Error is an error a client sees, written in its dialect's shape: a Go
// error string with internals never reaches a client.
type Error struct {
	Status  int
	Message string
	// Code is OpenAI's machine-readable Code (e.g. context_length_exceeded).
	Code string
	// Raw, when set, is the complete error body to send in the client's
	// dialect (from the translator, which fills param and type itself).
	Raw []byte
}

// BadRequest is a 400 with OpenAI's code ("" for none): a request
// ctxproxy will not forward as it is.
func BadRequest(code, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: msg}
}

// Unavailable is a 503: a request ctxproxy cannot serve now and the
// client may send again.
func Unavailable(msg string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Message: msg}
}

// WriteError writes e in the shape clients of dialect d parse:
// OpenAI {"error":{"message","type","param","code"}}, Ollama {"error":"..."}.
func WriteError(w http.ResponseWriter, d Dialect, e Error) {
	body := ErrorBody(d, e)
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(body, '\n'))
}

// DialectOf returns the dialect whose error shape fits a request path:
// Anthropic's for /v1/messages, the OpenAI shape for the rest of /v1/...,
// Ollama's for everything else.
func DialectOf(path string) Dialect {
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

// ErrorBody is e in the dialect's error shape.
func ErrorBody(d Dialect, e Error) []byte {
	if d != Ollama && e.Raw != nil {
		return e.Raw
	}
	switch d {
	case Ollama:
		body, _ := json.Marshal(map[string]string{"error": e.Message})
		return body
	case Messages:
		te := translate.Error{Status: e.Status, Message: e.Message, Code: e.Code}
		return te.AnthropicJSON()
	}
	typ := "invalid_request_error"
	switch {
	case e.Status >= 500:
		typ = "server_error"
	case e.Status == http.StatusUnauthorized:
		typ = "authentication_error"
	}
	var code any
	if e.Code != "" {
		code = e.Code
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": e.Message, "type": typ, "param": nil, "code": code,
	}})
	return body
}

// WriteJSON writes v as the JSON answer with status; a value that does
// not encode is a 500 in the shape of ctxproxy's own errors.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		WriteError(w, Ollama, Error{Status: http.StatusInternalServerError, Message: "encoding the answer failed: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
