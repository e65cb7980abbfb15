package proxy

import (
	"time"

	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/edge"
)

// Config is what the proxy needs to run. The zero value works: every zero
// field takes the default named in its comment (docs/configuration.md).
type Config struct {
	// Backend is the root URL of the Ollama or OpenAI-compatible server
	// (default http://127.0.0.1:11434). Request paths are appended to it.
	Backend string
	// MaxBody is the largest chat request body accepted, in bytes
	// (default 32 MiB). Larger bodies get 413 before they are read whole.
	// Routes ctxproxy does not intercept (model uploads) are not limited.
	MaxBody int64
	// MaxDepth is the deepest JSON nesting accepted in a chat request
	// (default 256); deeper bodies get 400 before decoding.
	MaxDepth int
	// ResponseHeaderTimeout bounds the wait for the backend's response
	// headers (default 5m: a cold model load can take minutes); past it the
	// client gets 504.
	ResponseHeaderTimeout time.Duration
	// DialTimeout bounds connecting to the backend (default 10s).
	DialTimeout time.Duration
	// MaxIdleConns is the idle connection pool kept to the backend
	// (default 256). Go's default of 2 per host cost 38% of throughput at
	// 10 concurrent clients (docs/benchmarks.md).
	MaxIdleConns int

	// SessionHeader names the request header carrying the session id
	// (default X-Session-ID).
	SessionHeader string
	// ScopeHeaders name the request headers whose values are a caller's
	// credential (Authorization, an SDK's X-Api-Key or Api-Key): a
	// request that carries one gets the session "<id>~<16 hex digits of
	// a hash of the credential>", so one caller can never read or extend
	// another's session by naming or guessing its id. Empty leaves
	// sessions global.
	ScopeHeaders []string
	// NoFingerprint turns off the session fingerprint used when a request
	// has no session header.
	NoFingerprint bool
	// NoClientIDs turns off naming a session after the id a coding agent
	// sends of its own (session.client_ids).
	NoClientIDs bool

	// BackendKind is ollama, openai or auto (default: ask the backend).
	BackendKind string
	// Hosts are the Host and Origin checks against DNS rebinding.
	Hosts edge.HostPolicy
	// Limits bound requests in flight, body memory and slow bodies.
	Limits edge.Limits

	// Version is reported by /ctxproxy/status.
	Version string

	// AdminToken, when set, is the bearer token every admin route but
	// healthz and readyz wants (admin.token).
	AdminToken string
	// AdminOff turns the admin API off (403): serve sets it when ctxproxy
	// listens beyond loopback without admin.token (see Loopback), so that
	// sessions are not open to the network.
	AdminOff bool
	// Planning is how each request is planned: translation, num_ctx,
	// exact counting, accumulation, the in-band commands.
	Planning plan.Config
	// Status is configuration other packages act on, which
	// /ctxproxy/status reports.
	Status admin.StatusInfo
}

func (c Config) withDefaults() Config {
	if c.Backend == "" {
		c.Backend = "http://127.0.0.1:11434"
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 32 << 20
	}
	if c.MaxDepth <= 0 {
		c.MaxDepth = 256
	}
	if c.ResponseHeaderTimeout <= 0 {
		c.ResponseHeaderTimeout = 5 * time.Minute
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.MaxIdleConns <= 0 {
		c.MaxIdleConns = 256
	}
	if c.BackendKind == "" {
		c.BackendKind = KindAuto
	}
	if c.SessionHeader == "" {
		c.SessionHeader = "X-Session-ID"
	}
	return c
}
