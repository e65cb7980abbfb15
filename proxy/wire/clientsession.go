package wire

import (
	"encoding/json"
	"strings"
)

// ClientSessionOf returns the conversation id that the body member key,
// of raw value v, carries, or "": what coding agents send with every
// request of one conversation, and never across two.
//
//   - prompt_cache_key (OpenAI chat and Responses): Codex sets it to its
//     session id; an application that sets it keys its conversation's
//     prompt cache with it.
//   - metadata.user_id (Anthropic Messages): Claude Code writes a JSON
//     object there whose session_id is its session, or, before 2.1, a
//     "user_…_account_…_session_<id>" string.
func ClientSessionOf(key string, v []byte) string {
	switch key {
	case "prompt_cache_key":
		s, err := DecodeString(v)
		if err != nil {
			return ""
		}
		return s
	case "metadata":
		var md struct {
			UserID string `json:"user_id"`
		}
		if len(v) == 0 || v[0] != '{' || json.Unmarshal(v, &md) != nil || md.UserID == "" {
			return ""
		}
		if strings.HasPrefix(md.UserID, "{") {
			var id struct {
				SessionID string `json:"session_id"`
			}
			if json.Unmarshal([]byte(md.UserID), &id) == nil {
				return id.SessionID
			}
			return ""
		}
		if _, sess, ok := strings.Cut(md.UserID, "_session_"); ok {
			return sess
		}
	}
	return ""
}
