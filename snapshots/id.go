package snapshots

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxIDLen is the longest session id accepted, in bytes. Ids come from a
// client header or URL; a bound keeps a hostile one from bloating every
// record and index entry that carries it. Clients name ids of up to 256
// bytes; the rest is room for the suffix that scopes a session to its
// caller's credential.
const MaxIDLen = 256 + 32

// ErrInvalidID reports an id that cannot be one: a session id that is
// empty, longer than MaxIDLen or not valid UTF-8, or a snapshot id that is
// not 1 to 64 of [A-Za-z0-9._-] or starts with a dot.
var ErrInvalidID = errors.New("snapshots: invalid id")

// CheckID validates a session id: the one rule every path applies. Any non-empty UTF-8 string up to MaxIDLen
// bytes is a valid id: slashes, dots, "..", NUL, spaces and emoji included,
// because the id is only ever hashed, never used as a path. Invalid UTF-8 is
// refused because JSON cannot carry it: encoding/json would replace the bad
// bytes with U+FFFD and the id would no longer round-trip.
func CheckID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty session id", ErrInvalidID)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: session id is %d bytes, more than %d", ErrInvalidID, len(id), MaxIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: session id is not valid UTF-8", ErrInvalidID)
	}
	return nil
}

// key is the name a session is stored under: the hex SHA-256 of its id.
func key(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// isKey reports whether name looks like a key made by key.
func isKey(name string) bool {
	if len(name) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// maxSnapIDLen bounds a snapshot id.
const maxSnapIDLen = 64

// checkSnapID validates a snapshot id. Unlike a session id, a snapshot id
// is used in a file name and a Redis key, so only [A-Za-z0-9._-] is allowed
// and it may not start with a dot (no "..", no hidden or temporary names).
// The store makes ids itself (see newSnapID); a caller's id must follow the
// same rule.
func checkSnapID(id string) error {
	if id == "" || len(id) > maxSnapIDLen || id[0] == '.' {
		return fmt.Errorf("%w: snapshot id %q", ErrInvalidID, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: snapshot id %q", ErrInvalidID, id)
		}
	}
	return nil
}
