package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
)

// Backend kinds (see package backend).
const (
	KindAuto   = backend.KindAuto
	KindOllama = backend.KindOllama
	KindOpenAI = backend.KindOpenAI
)

// NewTransport returns the transport ctxproxy uses to reach the backend,
// for forwarded requests and its own calls alike: one pool sized for
// cfg.MaxIdleConns, the dial and response-header timeouts, and no
// transparent compression (bytes pass through as sent).
func NewTransport(cfg Config) *http.Transport {
	cfg = cfg.withDefaults()
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           pooledDial((&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          cfg.MaxIdleConns,
		MaxIdleConnsPerHost:   cfg.MaxIdleConns,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		// Never let the transport add Accept-Encoding and inflate the
		// answer behind the client's back: bytes pass through as sent.
		DisableCompression: true,
	}
}

// kind returns the backend's kind: ollama, openai, or unknown.
func (s *Server) kind(ctx context.Context) string { return s.be.Kind(ctx) }

// Backend returns the backend the server forwards to.
func (s *Server) Backend() *backend.Backend { return s.be }

// pooledDial wraps dial's connections in pooledConn.
func pooledDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return pooledConn{c}, nil
	}
}

// pooledConn is a backend connection that copies a request body through
// a pooled buffer. The transport hands a body with a Content-Length to
// the connection's ReadFrom behind an io.LimitedReader, and a TCP
// connection's ReadFrom then allocates a 32 KiB buffer for every request
// (the largest allocation of a forwarded 100 KB chat after the body).
type pooledConn struct{ net.Conn }

func (c pooledConn) ReadFrom(r io.Reader) (int64, error) {
	buf := copyBuffers.Get()
	defer copyBuffers.Put(buf)
	return io.CopyBuffer(writerOnly{c.Conn}, r, buf)
}

// writerOnly hides a writer's ReadFrom, so that io.CopyBuffer uses the
// buffer it is given.
type writerOnly struct{ io.Writer }
