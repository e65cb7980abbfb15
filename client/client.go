package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Client talks to a running ctxproxy: its admin API under /ctxproxy/ and,
// for chat, its chat routes.
type Client struct {
	base string
	// token is admin.token; it goes to admin routes only, never to the
	// backend through a chat route.
	token string
	// APIKey is sent as the Authorization of chat requests, for an
	// OpenAI-compatible backend that needs one.
	APIKey string
	// admin bounds admin calls; chat has no timeout, as a reply takes as
	// long as the model needs (the caller's context ends it).
	admin, chat *http.Client
}

// MaxAnswer bounds what is read from one admin answer (an export of a
// long conversation is the largest).
const MaxAnswer = 512 << 20

// New returns a client of the ctxproxy at base (http://host:port); token
// is admin.token, sent to admin routes only.
func New(base, token string) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("proxy URL %q: want http://host:port", base)
	}
	return &Client{
		base:  strings.TrimSuffix(base, "/"),
		token: token,
		// Compact may run a summary on the model: give it room.
		admin: &http.Client{Timeout: 3 * time.Minute},
		chat:  &http.Client{},
	}, nil
}

// URL is the proxy URL the client talks to.
func (c *Client) URL() string { return c.base }

// Error is an error answer from ctxproxy or from the backend behind it.
type Error struct {
	// Status is the HTTP status, 0 for an error reported inside a stream.
	Status  int
	Message string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Status != 0 {
		msg = strings.ToLower(http.StatusText(e.Status))
	}
	switch e.Status {
	case 0:
		return msg // reported inside a stream
	case http.StatusUnauthorized:
		return fmt.Sprintf("%s (HTTP 401): set --token or CTXPROXY_ADMIN_TOKEN to ctxproxy's admin.token", msg)
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
}

// errorFrom reads an error answer: ctxproxy's and Ollama's {"error": "..."},
// OpenAI's {"error": {"message": "..."}}, or a short text.
func errorFrom(status int, body []byte) error {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil && len(v.Error) > 0 {
		var s string
		if json.Unmarshal(v.Error, &s) == nil {
			return &Error{Status: status, Message: s}
		}
		var o struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(v.Error, &o) == nil && o.Message != "" {
			return &Error{Status: status, Message: o.Message}
		}
	}
	text := strings.TrimSpace(string(body))
	if i := strings.IndexByte(text, '\n'); i >= 0 {
		text = text[:i]
	}
	if len(text) > 200 || strings.HasPrefix(text, "<") || strings.HasPrefix(text, "{") {
		text = ""
	}
	return &Error{Status: status, Message: text}
}

// UnreachableError says that nothing answered at the proxy URL.
type UnreachableError struct {
	base string
	err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach ctxproxy at %s: %s", e.base, cause(e.err))
}

func (e *UnreachableError) Unwrap() error { return e.err }

// cause is the readable end of a transport error chain, without the
// method and URL that url.Error repeats.
func cause(err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused (is ctxproxy running?)"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.As(err, &dns):
		return "unknown host " + dns.Name
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// transportErr turns a failed round trip into an error for the user: the
// caller's own cancellation stays itself.
func (c *Client) transportErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &UnreachableError{base: c.base, err: err}
}

// call sends one admin request and returns the answer's bytes, decoding
// them into out when out is not nil.
func (c *Client) call(ctx context.Context, method, path string, in, out any) ([]byte, error) {
	var body io.Reader
	if in != nil {
		data, ok := in.([]byte)
		if !ok {
			var err error
			if data, err = json.Marshal(in); err != nil {
				return nil, err
			}
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	// The admin token is for ctxproxy alone: on a passthrough route
	// (/api/ps, /v1/models) it would reach the backend.
	switch {
	case strings.HasPrefix(path, "/ctxproxy/"):
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
	case c.APIKey != "":
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := c.admin.Do(req)
	if err != nil {
		return nil, c.transportErr(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	if err != nil {
		return nil, c.transportErr(ctx, err)
	}
	if resp.StatusCode >= 300 {
		return data, errorFrom(resp.StatusCode, data)
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return data, fmt.Errorf("unexpected answer to %s %s: %v", method, path, err)
		}
	}
	return data, nil
}

// get is call for a typed answer.
func get[T any](ctx context.Context, c *Client, method, path string, in any) (T, []byte, error) {
	var v T
	raw, err := c.call(ctx, method, path, in, &v)
	return v, raw, err
}

// sessionPath is the admin path of a session: ids are path-escaped, as
// the contract says, so any string (slashes included) round-trips. The
// ids "." and ".." have their dots escaped too: PathEscape leaves them,
// and HTTP servers resolve them as dot segments (ServeMux redirects
// /ctxproxy/sessions/.. to /ctxproxy/).
func sessionPath(id string) string {
	if id == "." || id == ".." {
		return "/ctxproxy/sessions/" + strings.ReplaceAll(id, ".", "%2E")
	}
	return "/ctxproxy/sessions/" + url.PathEscape(id)
}

func (c *Client) Status(ctx context.Context) (adminapi.Status, []byte, error) {
	return get[adminapi.Status](ctx, c, http.MethodGet, "/ctxproxy/status", nil)
}

func (c *Client) Sessions(ctx context.Context) ([]adminapi.SessionInfo, []byte, error) {
	v, raw, err := get[struct {
		Sessions []adminapi.SessionInfo `json:"sessions"`
	}](ctx, c, http.MethodGet, "/ctxproxy/sessions", nil)
	return v.Sessions, raw, err
}

func (c *Client) Session(ctx context.Context, id string) (adminapi.SessionDetail, []byte, error) {
	return get[adminapi.SessionDetail](ctx, c, http.MethodGet, sessionPath(id), nil)
}

// PutSession creates a session or merges metadata into it.
func (c *Client) PutSession(ctx context.Context, id string, metadata map[string]any, model string) (adminapi.SessionDetail, []byte, error) {
	body := map[string]any{"metadata": metadata}
	if model != "" {
		body["model"] = model
	}
	return get[adminapi.SessionDetail](ctx, c, http.MethodPut, sessionPath(id), body)
}

// clear empties a session's conversation and stats and keeps its metadata
// (the REPL's /clear); purge removes the session and its snapshots.
func (c *Client) Clear(ctx context.Context, id string, purge bool) ([]byte, error) {
	path := sessionPath(id)
	if purge {
		path += "?purge=1"
	}
	return c.call(ctx, http.MethodDelete, path, nil, nil)
}

// Messages is the session's stored conversation.
func (c *Client) Messages(ctx context.Context, id string) (adminapi.Messages, []byte, error) {
	return get[adminapi.Messages](ctx, c, http.MethodGet, sessionPath(id)+"/messages", nil)
}

func (c *Client) AddMessages(ctx context.Context, id string, msgs []adminapi.NewMessage) (adminapi.Appended, []byte, error) {
	return get[adminapi.Appended](ctx, c, http.MethodPost, sessionPath(id)+"/messages",
		map[string]any{"messages": msgs})
}

func (c *Client) Export(ctx context.Context, id string) ([]byte, error) {
	return c.call(ctx, http.MethodGet, sessionPath(id)+"/export", nil, nil)
}

// Import sends an export, a bare array of messages or a chat
// request body as it is: ctxproxy validates it.
func (c *Client) Import(ctx context.Context, id string, body []byte) (adminapi.Imported, []byte, error) {
	return get[adminapi.Imported](ctx, c, http.MethodPost, sessionPath(id)+"/import", body)
}

func (c *Client) Snapshots(ctx context.Context, id string) ([]adminapi.SnapshotInfo, []byte, error) {
	v, raw, err := get[struct {
		Snapshots []adminapi.SnapshotInfo `json:"snapshots"`
	}](ctx, c, http.MethodGet, sessionPath(id)+"/snapshots", nil)
	return v.Snapshots, raw, err
}

func (c *Client) Snapshot(ctx context.Context, id, reason string) (adminapi.SnapshotInfo, []byte, error) {
	return get[adminapi.SnapshotInfo](ctx, c, http.MethodPost, sessionPath(id)+"/snapshots",
		map[string]string{"reason": reason})
}

func (c *Client) Restore(ctx context.Context, id, snap string) (adminapi.Restored, []byte, error) {
	return get[adminapi.Restored](ctx, c, http.MethodPost,
		sessionPath(id)+"/snapshots/"+url.PathEscape(snap)+"/restore", nil)
}

// Compact compresses session id (POST .../compress), with one-off
// instructions appended to the summary prompt (/compact INSTRUCTIONS);
// "" adds none.
func (c *Client) Compact(ctx context.Context, id, instructions string) (adminapi.Compressed, []byte, error) {
	return c.compact(ctx, id, instructions, false)
}

// CompactDryRun answers what Compact would do, and changes nothing.
func (c *Client) CompactDryRun(ctx context.Context, id, instructions string) (adminapi.Compressed, []byte, error) {
	return c.compact(ctx, id, instructions, true)
}

func (c *Client) compact(ctx context.Context, id, instructions string, dryRun bool) (adminapi.Compressed, []byte, error) {
	path := sessionPath(id) + "/compress"
	if dryRun {
		path += "?dry_run=1"
	}
	var body any
	if instructions != "" {
		body = adminapi.CompressRequest{Instructions: instructions}
	}
	return get[adminapi.Compressed](ctx, c, http.MethodPost, path, body)
}

func (c *Client) ContextSize(ctx context.Context) (adminapi.ContextSize, []byte, error) {
	return get[adminapi.ContextSize](ctx, c, http.MethodGet, "/ctxproxy/context/size", nil)
}

// SetContextSize fixes the context at tokens, or with tokens 0 returns it
// to sizing from free VRAM.
func (c *Client) SetContextSize(ctx context.Context, tokens int) (adminapi.ContextSize, []byte, error) {
	var body any = map[string]int{"tokens": tokens}
	if tokens == 0 {
		body = map[string]bool{"auto": true}
	}
	return get[adminapi.ContextSize](ctx, c, http.MethodPut, "/ctxproxy/context/size", body)
}

// RunningModels asks Ollama, through the proxy's passthrough, which
// models are loaded and how much memory they take.
func (c *Client) RunningModels(ctx context.Context) ([]adminapi.RunningModel, []byte, error) {
	v, raw, err := get[struct {
		Models []adminapi.RunningModel `json:"models"`
	}](ctx, c, http.MethodGet, "/api/ps", nil)
	return v.Models, raw, err
}

// Models lists the backend's models through the passthrough:
// Ollama's /api/tags, or /v1/models for an OpenAI-compatible server.
func (c *Client) Models(ctx context.Context, dialect string) ([]string, error) {
	var names []string
	if dialect == DialectOpenAI {
		v, _, err := get[struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}](ctx, c, http.MethodGet, "/v1/models", nil)
		for _, m := range v.Data {
			names = append(names, m.ID)
		}
		return names, err
	}
	v, _, err := get[struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}](ctx, c, http.MethodGet, "/api/tags", nil)
	for _, m := range v.Models {
		names = append(names, m.Name)
	}
	return names, err
}
