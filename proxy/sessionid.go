package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/ctxproxy/ctxproxy/snapshots"
)

// sessionNamer names the session of a chat request: the session header,
// checked by the store's rule before the turn is answered, else a
// fingerprint; scoped by the caller's credential when configured.
type sessionNamer struct {
	header        string
	scopeHeader   string
	noFingerprint bool
}

// sessionID returns the session of a request: the session header, else a
// fingerprint of the model and the first system and user messages (so a
// client that resends its whole history keeps one session without saying
// so), else "".
func (s *sessionNamer) id(r *http.Request, req *chatRequest) (string, *apiError) {
	scope := s.scope(r)
	if id := r.Header.Get(s.header); id != "" {
		max := snapshots.MaxIDLen - len(scope)
		// The store's rule, checked before the turn is answered: a turn
		// that could not be saved must not be answered as if it were.
		if err := snapshots.CheckID(id); err != nil || len(id) > max {
			why := fmt.Sprintf("session id is %d bytes, more than %d", len(id), max)
			if err != nil {
				why = strings.TrimPrefix(err.Error(), snapshots.ErrInvalidID.Error()+": ")
			}
			return "", &apiError{status: http.StatusBadRequest,
				message: fmt.Sprintf("%s: %s (1 to %d bytes of UTF-8)", s.header, why, max)}
		}
		return id + scope, nil
	}
	if s.noFingerprint || req.firstUser == "" {
		return "", nil
	}
	h := sha256.New()
	for _, part := range []string{req.model, req.firstSystem, req.firstUser} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "fp-" + hex.EncodeToString(h.Sum(nil)[:8]) + scope, nil
}

// scope is the suffix that keeps a caller's sessions its own: "~" and 16
// hex digits of a hash of the request's credential (ScopeHeader), or ""
// when it carries none. The credential itself is never stored.
func (s *sessionNamer) scope(r *http.Request) string {
	if s.scopeHeader == "" {
		return ""
	}
	cred := r.Header.Get(s.scopeHeader)
	if cred == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("ctxproxy session scope\x00" + cred))
	return "~" + hex.EncodeToString(sum[:8])
}
