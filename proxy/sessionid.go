package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// maxClientID is the longest session id a client may send, in bytes; the
// id stored may be longer by the scope suffix (snapshots.MaxIDLen).
const maxClientID = 256

// scopeLen is the length of a scope suffix: "~" and 16 hex digits.
const scopeLen = 17

// sessionNamer names the session of a chat request: the session header,
// else the conversation id the client sends of its own (clientID), else
// a fingerprint; scoped by the caller's credential when configured.
type sessionNamer struct {
	header        string
	scopeHeaders  []string
	noFingerprint bool
	noClientIDs   bool
}

// clientIDHeaders are the headers in which coding agents send the id of
// their session with every request, with the prefix of the session
// named after it (the session header itself, X-Session-ID by default,
// is what opencode sends).
var clientIDHeaders = []struct{ header, prefix string }{
	{"X-Claude-Code-Session-Id", "claude-code-"},
	{"Session-Id", "codex-"},            // Codex since 0.1xx
	{"Session_id", "codex-"},            // Codex before it
	{"Conversation_id", "codex-"},       // Codex before it, with session_id
	{"X-Session-Affinity", "opencode-"}, // opencode, beside X-Session-Id
}

// id returns the session of a request: the session header, else the
// session a coding agent names in its own headers or body (clientID),
// else a fingerprint of the model and the first system and user messages
// (so a client that resends its whole history keeps one session without
// saying so), else "". With scoping on, a caller's sessions carry its scope; a
// caller without a credential may not name a scoped session, and one
// with a credential that names another's gets a session of its own.
func (s *sessionNamer) id(r *http.Request, req *wire.Request) (string, *wire.Error) {
	scope := s.scope(r)
	if id := r.Header.Get(s.header); id != "" {
		// The caller's own scoped id, as X-Ctxproxy-Session gave it,
		// names the same session again.
		name := id
		if scope != "" && strings.HasSuffix(id, scope) && len(id) > scopeLen {
			name = strings.TrimSuffix(id, scope)
		}
		// The store's rule, checked before the turn is answered: a turn
		// that could not be saved must not be answered as if it were.
		switch {
		case len(name) > maxClientID:
			return "", s.badID(fmt.Sprintf("session id is %d bytes, more than %d", len(name), maxClientID))
		case !utf8.ValidString(name):
			return "", s.badID("session id is not valid UTF-8")
		case scope == "" && len(s.scopeHeaders) > 0 && isScoped(name):
			return "", &wire.Error{Status: http.StatusForbidden, Message: fmt.Sprintf(
				"%s: this id names a session scoped to a credential (it ends in ~ and 16 hex digits); "+
					"send the credential it belongs to (%s)", s.header, strings.Join(s.scopeHeaders, ", "))}
		}
		return name + scope, nil
	}
	if !s.noClientIDs {
		if id := clientID(r, req); id != "" {
			return id + scope, nil
		}
	}
	if s.noFingerprint || req.FirstUser == "" {
		return "", nil
	}
	return fingerprint(req) + scope, nil
}

// clientID returns the session named after the conversation id a coding
// agent sends with every request (a header of clientIDHeaders, Claude
// Code's metadata session), or "" when it sends none that fits the
// store's rule. A body's prompt_cache_key may key several conversations
// of one user: it names the session together with the fingerprint.
func clientID(r *http.Request, req *wire.Request) string {
	ok := func(id string) bool {
		return id != "" && len(id) <= maxClientID-32 && utf8.ValidString(id) && !isScoped(id)
	}
	for _, h := range clientIDHeaders {
		if id := r.Header.Get(h.header); ok(id) {
			return h.prefix + id
		}
	}
	switch id := req.ClientSession; {
	case !ok(id):
	case req.Dialect == wire.Messages:
		return "claude-code-" + id
	case req.FirstUser != "":
		sum := sha256.Sum256([]byte(id + "\x00" + fingerprint(req)))
		return "key-" + hex.EncodeToString(sum[:8])
	}
	return ""
}

// fingerprint is the session of a request that names none: a hash of the
// model and the first system and user messages, so that a client that
// resends its whole history keeps one session without saying so.
func fingerprint(req *wire.Request) string {
	h := sha256.New()
	parts := [...]string{req.Model, req.FirstSystem, req.FirstUser}
	buf := make([]byte, 0, min(len(parts[0])+len(parts[1])+len(parts[2])+len(parts), 4096))
	for _, part := range parts {
		buf = writeString(h, buf, part)
		h.Write([]byte{0})
	}
	return "fp-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// writeString writes s to w a piece at a time through buf, and returns
// buf for the next string: a 30 MB first message is hashed without a copy
// of it (sha256's digest has no WriteString), a short one with one small
// buffer for all the parts.
func writeString(w io.Writer, buf []byte, s string) []byte {
	for len(s) > 0 {
		n := copy(buf[:cap(buf)], s)
		w.Write(buf[:n])
		s = s[n:]
	}
	return buf
}

func (s *sessionNamer) badID(why string) *wire.Error {
	return &wire.Error{Status: http.StatusBadRequest,
		Message: fmt.Sprintf("%s: %s (1 to %d bytes of UTF-8)", s.header, why, maxClientID)}
}

// scope is the suffix that keeps a caller's sessions its own: "~" and 16
// hex digits of a hash of the request's credential, the non-empty values
// of the scope headers in their order, or "" when it carries none. One
// credential is one caller whichever header carries it. The credential
// itself is never stored.
func (s *sessionNamer) scope(r *http.Request) string {
	var creds []string
	for _, name := range s.scopeHeaders {
		if v := r.Header.Get(name); v != "" {
			creds = append(creds, v)
		}
	}
	if len(creds) == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte("ctxproxy session scope\x00" + strings.Join(creds, "\x00")))
	return "~" + hex.EncodeToString(sum[:8])
}

// isScoped reports whether id ends the way a scoped session's id does.
func isScoped(id string) bool {
	if len(id) < scopeLen || id[len(id)-scopeLen] != '~' {
		return false
	}
	for _, c := range id[len(id)-scopeLen+1:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
