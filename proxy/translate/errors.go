package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// Error is an error in OpenAI's shape, with the HTTP status to answer with.
// Request returns one for input it cannot translate (always status 400);
// BackendError builds one from an Ollama error response. The proxy writes
// Status and JSON() to the client unchanged.
type Error struct {
	// Status is the HTTP status code to answer with.
	Status int
	// Type is OpenAI's error type: "invalid_request_error",
	// "authentication_error", "permission_error", "rate_limit_error" or
	// "api_error".
	Type string
	// Code is OpenAI's machine-readable code, such as "model_not_found" or
	// "context_length_exceeded"; empty encodes as null.
	Code string
	// Param names the offending request field, such as "messages[2].content";
	// empty encodes as null.
	Param string
	// Message is the human-readable text. It never holds message contents.
	Message string
}

// Error returns the message, prefixed with the param when there is one.
func (e *Error) Error() string {
	if e.Param != "" {
		return "translate: " + e.Param + ": " + e.Message
	}
	return "translate: " + e.Message
}

// JSON returns the body to send: {"error":{"message","type","param","code"}}.
func (e *Error) JSON() []byte {
	return e.appendObject(make([]byte, 0, 96+len(e.Message)))
}

// appendObject appends {"error":{…}}.
func (e *Error) appendObject(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonscan.AppendString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = jsonscan.AppendString(dst, e.Type)
	dst = append(dst, `,"param":`...)
	dst = appendNullable(dst, e.Param)
	dst = append(dst, `,"code":`...)
	dst = appendNullable(dst, e.Code)
	return append(dst, "}}"...)
}

func appendNullable(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return jsonscan.AppendString(dst, s)
}

// OpenAI's error codes that ctxproxy produces.
const (
	codeContextLength    = "context_length_exceeded"
	codeModelNotFound    = "model_not_found"
	codeUnsupportedValue = "unsupported_value"
	codeUnsupportedParam = "unsupported_parameter"
	codeInvalidType      = "invalid_type"
	codeInvalidValue     = "invalid_value"
	codeMissing          = "missing_required_parameter"
	codeIncomplete       = "stream_incomplete"
)

// invalid returns a 400 invalid_request_error.
func invalid(param, code, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: code, Param: param, Message: msg}
}

// ErrIncomplete is returned by Stream.Finish when Ollama's stream ended
// without its final "done": true line: the backend died or the connection
// broke, so the answer the client got is cut short.
var ErrIncomplete = errors.New("translate: backend stream ended before done")

// maxErrorText bounds how much of a non-JSON error body is quoted back.
const maxErrorText = 1024

// BackendError turns an Ollama error response (a non-2xx status with a body
// such as {"error":"model 'x' not found"}) into an OpenAI error.
//
// The status is kept, except that Ollama's context-length errors become 400
// with code "context_length_exceeded", as OpenAI answers an oversized
// prompt; a status below 400 (an error line inside a 200 stream) becomes
// 500. A 404 from /api/chat means the model is missing: code
// "model_not_found", as OpenAI answers an unknown model. Types follow
// OpenAI's, with 5xx as "api_error" as Ollama's own /v1 layer answers.
func BackendError(status int, body []byte) *Error {
	msg := errorText(body)
	if status < 400 {
		status = http.StatusInternalServerError
	}
	if msg == "" {
		msg = http.StatusText(status)
		if msg == "" {
			msg = "backend error"
		}
	}
	e := &Error{Status: status, Type: errorType(status), Message: msg}
	switch {
	case isContextLength(msg):
		e.Status = http.StatusBadRequest
		e.Type = "invalid_request_error"
		e.Code = codeContextLength
		e.Param = "messages"
	case status == http.StatusNotFound:
		e.Code = codeModelNotFound
		e.Param = "model"
	case status == http.StatusTooManyRequests:
		e.Code = "rate_limit_exceeded"
	}
	return e
}

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	}
	return "api_error"
}

// isContextLength recognises Ollama's prompt-too-long errors: the runner's
// "the input length exceeds the context length" and the server's "input
// exceeds maximum context length …".
func isContextLength(msg string) bool {
	return strings.Contains(msg, "exceeds the context length") ||
		strings.Contains(msg, "exceeds maximum context length")
}

// ErrorText returns the message of an Ollama or OpenAI error body, or
// the body itself (trimmed, at most 1 KiB) when it is not one.
func ErrorText(body []byte) string { return errorText(body) }

// errorText returns the "error" string of an Ollama error body, or the body
// itself (trimmed and bounded) when it is not one.
func errorText(body []byte) string {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil && len(v.Error) > 0 {
		var s string
		if json.Unmarshal(v.Error, &s) == nil {
			return s
		}
		// An OpenAI-shaped {"error":{"message":…}} from a relaying backend.
		var o struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(v.Error, &o) == nil && o.Message != "" {
			return o.Message
		}
	}
	body = bytes.TrimSpace(body)
	if len(body) > maxErrorText {
		body = body[:maxErrorText]
	}
	return string(body)
}
