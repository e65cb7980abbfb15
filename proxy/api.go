package proxy

import "time"

// The admin API's JSON (README, "Admin API"). The server writes these and
// ctxproxy's own client (ctxproxy context, ctxproxy chat) reads them, so
// the two cannot drift apart. Every field is always present: the
// snapshots package's own JSON leaves zero fields out.

// SessionInfo is one row of GET /ctxproxy/sessions.
type SessionInfo struct {
	SessionID string    `json:"session_id"`
	Model     string    `json:"model"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	Messages  int       `json:"messages"`
	Tokens    int       `json:"tokens"`
	Limit     int       `json:"limit"`
	Usage     float64   `json:"usage"`
	// Sent is what the last request forwarded after cutting (0 when
	// unknown); ForwardedUsage is Sent over Limit.
	Sent           int     `json:"sent"`
	ForwardedUsage float64 `json:"forwarded_usage"`
	Requests       int     `json:"requests"`
	Snapshots      int     `json:"snapshots"`
}

// SessionStats are a session's numbers: those of its last request, and
// running counts.
type SessionStats struct {
	Tokens           int        `json:"tokens"`
	Limit            int        `json:"limit"`
	Usage            float64    `json:"usage"`
	Sent             int        `json:"sent"`
	NumCtx           int        `json:"num_ctx"`
	Dropped          int        `json:"dropped"`
	Summarized       int        `json:"summarized"`
	PromptTokens     int        `json:"prompt_tokens"`
	CompletionTokens int        `json:"completion_tokens"`
	Requests         int        `json:"requests"`
	Truncations      int        `json:"truncations"`
	LastTruncation   *time.Time `json:"last_truncation"`
}

// SessionDetail is GET /ctxproxy/sessions/{id}.
type SessionDetail struct {
	SessionID string         `json:"session_id"`
	Model     string         `json:"model"`
	Created   time.Time      `json:"created"`
	Updated   time.Time      `json:"updated"`
	Metadata  map[string]any `json:"metadata"`
	Stats     SessionStats   `json:"stats"`
	Messages  int            `json:"messages"`
	Snapshots int            `json:"snapshots"`
	// Warning is seed 000's text from 80% usage; absent below.
	Warning string `json:"warning,omitempty"`
}

// SessionMessage is one message of GET /ctxproxy/sessions/{id}/messages.
type SessionMessage struct {
	Role       string         `json:"role"`
	Content    string         `json:"content"`
	Timestamp  time.Time      `json:"timestamp"`
	Importance *float64       `json:"importance,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Preserve   bool           `json:"preserve,omitempty"`
}

// SnapshotInfo is one snapshot of GET /ctxproxy/sessions/{id}/snapshots.
type SnapshotInfo struct {
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	Created   time.Time `json:"created"`
	Model     string    `json:"model"`
	Tokens    int       `json:"tokens"`
	Usage     float64   `json:"usage"`
	Reason    string    `json:"reason"`
	Messages  int       `json:"messages"`
	Bytes     int       `json:"bytes"`
}
