package proxy

import (
	"net"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// Backend kinds (see package backend).
const (
	KindAuto   = backend.KindAuto
	KindOllama = backend.KindOllama
	KindOpenAI = backend.KindOpenAI
)

// maxResponseHeader bounds the response headers ctxproxy reads from the
// backend (Go's default is 10 MB a response; chat backends send a few
// hundred bytes).
const maxResponseHeader = 1 << 20

// idleConnTimeout is how long an idle backend connection is kept.
const idleConnTimeout = 90 * time.Second

// NewTransport returns the transport ctxproxy uses to reach the backend,
// for forwarded requests and its own calls alike: one idle pool sized for
// cfg.MaxIdleConns (Go's default keeps 2 a host, and a busy proxy then
// opens and closes a connection per request), the dial and
// response-header timeouts, a bound on response headers, and no
// transparent compression (bytes pass through as sent).
func NewTransport(cfg Config) *http.Transport {
	cfg = cfg.withDefaults()
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxResponseHeaderBytes: maxResponseHeader,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           cfg.MaxIdleConns,
		MaxIdleConnsPerHost:    cfg.MaxIdleConns,
		IdleConnTimeout:        idleConnTimeout,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  cfg.ResponseHeaderTimeout,
		ExpectContinueTimeout:  time.Second,
		// Never let the transport add Accept-Encoding and inflate the
		// answer behind the client's back: bytes pass through as sent.
		DisableCompression: true,
	}
}

// keyRulesOf are how a backend of kind reads a request's member names:
// Ollama's encoding/json, or, for any other backend, rules ctxproxy
// cannot know.
func keyRulesOf(kind string) wire.KeyRules {
	if kind == KindOllama {
		return wire.JSONKeys
	}
	return wire.ExactKeys
}
