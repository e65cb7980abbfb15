package proxy

import (
	"context"
	"errors"
	"io"
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
		DialContext:            dialer(&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}),
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

// dialer returns d's DialContext with each connection wrapped in a
// bodyConn.
func dialer(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return bodyConn{c}, nil
	}
}

// bodyConn lets http.Transport write a request body held in memory in one
// system call. The transport copies a body of known length through an
// io.LimitedReader, which hides the body's WriteTo, so a 100 KB chat went
// out in 32 KiB writes, each waking the backend; bodyConn looks through
// the LimitedReader and hands the body to the connection whole. Any other
// reader is copied as before.
type bodyConn struct{ net.Conn }

// inMemory is a body that knows its length and writes itself
// (*bytes.Reader, the payload's reader).
type inMemory interface {
	io.WriterTo
	Len() int
}

// ReadFrom is called by the transport's writer with the rest of the body.
func (c bodyConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if body, ok := lr.R.(inMemory); ok && int64(body.Len()) <= lr.N {
			n, err := body.WriteTo(c.Conn)
			lr.N -= n
			return n, err
		}
	}
	return io.Copy(c.Conn, r)
}

// CloseWrite half-closes the connection, as the transport does for a
// protocol upgrade's body.
func (c bodyConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
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
