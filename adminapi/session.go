package adminapi

import "time"

// SessionRow is what a listing shows of a session: a row of GET
// /ctxproxy/sessions (SessionInfo) and the session's entry in the store's
// index (snapshots.Listing), which keeps it with each session record.
type SessionRow struct {
	SessionID string    `json:"session_id"`
	Model     string    `json:"model"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	Messages  int       `json:"messages"`
	Tokens    int       `json:"tokens"`
	Limit     int       `json:"limit"`
	Usage     float64   `json:"usage"`
	// Sent is what the last request forwarded after cutting (0 when
	// unknown).
	Sent      int `json:"sent"`
	Requests  int `json:"requests"`
	Snapshots int `json:"snapshots"`
	// Backend is the server of the session's last turn, with several
	// (backends:).
	Backend string `json:"backend,omitempty"`
}

// SessionInfo is one row of GET /ctxproxy/sessions.
type SessionInfo struct {
	SessionRow
	// ForwardedUsage is Sent over Limit.
	ForwardedUsage float64 `json:"forwarded_usage"`
}

// Sessions is GET /ctxproxy/sessions.
type Sessions struct {
	Sessions []SessionInfo `json:"sessions"`
}

// SessionStats are a session's numbers: those of its last request, and
// running counts.
type SessionStats struct {
	Tokens     int     `json:"tokens"`
	Limit      int     `json:"limit"`
	Usage      float64 `json:"usage"`
	Sent       int     `json:"sent"`
	NumCtx     int     `json:"num_ctx"`
	Dropped    int     `json:"dropped"`
	Summarized int     `json:"summarized"`
	// PromptTokens and CompletionTokens are the backend's report of the
	// last request; AllPromptTokens and AllCompletionTokens add up its
	// reports over every request.
	PromptTokens        int        `json:"prompt_tokens"`
	CompletionTokens    int        `json:"completion_tokens"`
	AllPromptTokens     int        `json:"all_prompt_tokens"`
	AllCompletionTokens int        `json:"all_completion_tokens"`
	Requests            int        `json:"requests"`
	Truncations         int        `json:"truncations"`
	LastTruncation      *time.Time `json:"last_truncation"`
	// Budget is how the last request's window was divided (the
	// X-Ctxproxy-Budget header's parts); absent before a counted request.
	Budget *BudgetReport `json:"budget,omitempty"`
	// PrefixKept is the share of the last forwarded prompt that the one
	// before it began with: what the backend's prompt cache could keep
	// (Ollama reads again only what follows the common prefix). Absent
	// until two requests were forwarded.
	PrefixKept *float64 `json:"prefix_kept,omitempty"`
	// CachedTokens are the prompt tokens the backend says it reused from
	// its prompt cache for the last request (Ollama 0.30 and later:
	// prompt_eval_cached_count): its own measure of what PrefixKept
	// estimates. Absent when the backend did not say.
	CachedTokens *int `json:"cached_tokens,omitempty"`
}

// BudgetReport is a session's Budget as the admin API shows it: the
// parts, and Free, what they leave (Budget.Available). Session records
// keep only the parts, as Free follows from them; the answer carries it
// so that no client has to work it out.
type BudgetReport struct {
	Budget
	Free int `json:"available"`
}

// SessionDetail is GET (and the answer of PUT) /ctxproxy/sessions/{id}.
type SessionDetail struct {
	SessionID string         `json:"session_id"`
	Model     string         `json:"model"`
	Created   time.Time      `json:"created"`
	Updated   time.Time      `json:"updated"`
	Metadata  map[string]any `json:"metadata"`
	Stats     SessionStats   `json:"stats"`
	Messages  int            `json:"messages"`
	Snapshots int            `json:"snapshots"`
	// Warning is the capacity warning from 80% usage ("Context at 80%
	// capacity. …"); absent below.
	Warning string `json:"warning,omitempty"`
	// Backend is the server of the session's last turn, with several.
	Backend string `json:"backend,omitempty"`
}

// SessionUpdate is the body of PUT /ctxproxy/sessions/{id}: metadata keys
// to set (a null value deletes the key) and the model to record.
type SessionUpdate struct {
	Metadata map[string]any `json:"metadata,omitempty"`
	Model    *string        `json:"model,omitempty"`
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

// Messages is GET /ctxproxy/sessions/{id}/messages.
type Messages struct {
	Messages []SessionMessage `json:"messages"`
}

// NewMessage is one message for POST /ctxproxy/sessions/{id}/messages
// (`ctxproxy context add`). Content is a pointer so that a missing content is
// told apart from an empty one.
type NewMessage struct {
	Role       string         `json:"role"`
	Content    *string        `json:"content"`
	Importance *float64       `json:"importance,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Preserve   bool           `json:"preserve,omitempty"`
}

// NewMessages is the body of POST /ctxproxy/sessions/{id}/messages.
type NewMessages struct {
	Messages []NewMessage `json:"messages"`
}

// Appended answers POST /ctxproxy/sessions/{id}/messages.
type Appended struct {
	Appended int `json:"appended"`
	Messages int `json:"messages"`
}

// Cleared answers DELETE /ctxproxy/sessions/{id}; Undo is the snapshot
// taken first.
type Cleared struct {
	Cleared bool          `json:"cleared"`
	Undo    *SnapshotInfo `json:"undo"`
}

// Purged answers DELETE /ctxproxy/sessions/{id}?purge=true.
type Purged struct {
	Purged bool `json:"purged"`
}

// Imported answers POST /ctxproxy/sessions/{id}/import.
type Imported struct {
	Imported int           `json:"imported"`
	Undo     *SnapshotInfo `json:"undo"`
}

// SnapshotInfo is one snapshot of GET /ctxproxy/sessions/{id}/snapshots,
// and the snapshot's entry in the session store's index, in the same
// shape.
type SnapshotInfo struct {
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	Created   time.Time `json:"created"`
	Model     string    `json:"model"`
	Tokens    int       `json:"tokens"`
	Usage     float64   `json:"usage"`
	Reason    string    `json:"reason"`
	Messages  int       `json:"messages"`
	// Bytes is the stored (compressed) size.
	Bytes int `json:"bytes"`
}

// Snapshots is GET /ctxproxy/sessions/{id}/snapshots.
type Snapshots struct {
	Snapshots []SnapshotInfo `json:"snapshots"`
}

// Restored answers POST /ctxproxy/sessions/{id}/snapshots/{snap}/restore.
type Restored struct {
	Restored string        `json:"restored"`
	Messages int           `json:"messages"`
	Undo     *SnapshotInfo `json:"undo"`
}

// Compressed answers POST /ctxproxy/sessions/{id}/compress: the token
// counts before and after, what went, and the snapshot taken first. With
// ?dry_run=1 it is what a compress would do, DryRun is set, and nothing
// was changed (Undo is nil).
type Compressed struct {
	Before     int           `json:"before"`
	After      int           `json:"after"`
	Dropped    int           `json:"dropped"`
	Summarized int           `json:"summarized"`
	Notice     string        `json:"notice"`
	Undo       *SnapshotInfo `json:"undo"`
	DryRun     bool          `json:"dry_run,omitempty"`
}

// CompressRequest is the optional body of POST
// /ctxproxy/sessions/{id}/compress: one-off instructions appended to the
// summary prompt (/compact <instructions>). They are used only when the
// strategy summarizes.
type CompressRequest struct {
	Instructions string `json:"instructions,omitempty"`
}

// ContextSize is GET and PUT /ctxproxy/context/size.
type ContextSize struct {
	Auto bool `json:"auto"`
	// Target is the fixed size when Auto is off; with Auto, the num_ctx
	// ctxproxy chose most recently (0 before any request).
	Target int `json:"target"`
}

// ContextSizeRequest is the body of PUT /ctxproxy/context/size: one of
// {"tokens": N} or {"auto": true}.
type ContextSizeRequest struct {
	Tokens *int  `json:"tokens,omitempty"`
	Auto   *bool `json:"auto,omitempty"`
}

// Error is the body of every error answer: {"error": "…"}.
type Error struct {
	Error string `json:"error"`
}
