package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// Forwarding an intercepted request: the chat routes do not go through
// httputil.ReverseProxy (the other routes do), because ctxproxy must look
// at the backend's answer before the client sees a byte of it, to cut
// harder and send again when the backend refuses the prompt as too long.
// The round trip is the transport's, the outbound request is shaped as
// ReverseProxy shapes it (hop-by-hop headers removed, X-Forwarded-*
// added), and relay writes the answer as ReverseProxy does, each piece
// flushed as it arrives.

// send forwards out, the body of p, and returns the backend's answer and
// the plan it answers. When the backend refuses the prompt as longer than
// its window, send cuts the conversation harder (a new plan) and sends it
// again, up to maxOverflowRetries times, before the client has seen
// anything: a loop around the round trip, so that each resend reads like
// the first send. A server that cannot be reached, or refuses the request
// as unable to serve it, before its answer began, is left for the next
// of the plan's servers (Planner.Move, a plan made for that server). A
// refusal that cutting or moving cannot answer is returned as the
// backend sent it; a retry ctxproxy gives up on is a *wire.Error for the
// client. p is nil for a request ctxproxy forwards as it came, which is
// never resent.
func (s *Server) send(ctx context.Context, r *http.Request, ex *exchange, p *plan.Plan, out wire.Payload) (*http.Response, *plan.Plan, *wire.Error, error) {
	shrink, attempt := 0, 0
	for {
		srv := s.fleet.First()
		outPath := ""
		if p != nil {
			srv = p.Server
			if p.Translate {
				outPath = "/api/chat"
			}
		}
		resp, err := s.roundTrip(r, srv, outPath, out, p == nil)
		why := ""
		if ctx.Err() == nil {
			why = refusedBy(srv, resp, err)
		}
		if why != "" && p != nil {
			moved, ok, aerr := s.plan.Move(ctx, *p, why)
			if aerr != nil {
				closeBody(resp)
				return nil, p, aerr, nil
			}
			if ok {
				closeBody(resp)
				srv.End()
				moved.Server.Begin()
				s.log.Warn("backend could not serve the request; sent to the next", "backend", srv.Name, "why", why,
					"to", moved.Server.Name, "model", moved.Model, "session", ex.session)
				s.metrics.moved.WithLabelValues(srv.Name).Inc()
				p, out = &moved, moved.Body
				ex.tell(moved)
				if !moved.Uncounted() {
					setPlanHeaders(ex, moved) // the new server's count and num_ctx
				}
				continue
			}
		}
		if err != nil {
			return nil, p, nil, atServer{srv.URL, err}
		}
		if p == nil || !p.Resend {
			return resp, p, nil, nil
		}
		o, refused, resp := overflowOf(resp)
		if !refused {
			if attempt > 0 {
				ex.warn(fmt.Sprintf("the backend refused the prompt as longer than its window; ctxproxy cut it by %d tokens more and retried (%d)", shrink, attempt))
			}
			return resp, p, nil, nil
		}
		if attempt == maxOverflowRetries {
			s.metrics.overflowFailures.Inc()
			return nil, p, &wire.Error{Status: http.StatusBadRequest, Code: "context_length_exceeded",
				Message: fmt.Sprintf("the backend refused the prompt as longer than its context window %d times; ctxproxy counted %d tokens "+
					"for a limit of %d and cut it by up to %d tokens more without success (the model's window may be smaller than configured: "+
					"see models: in the config)", maxOverflowRetries+1, p.Before.Tokens, p.Limit, shrink)}, nil
		}
		// A prompt forwarded uncounted is counted before it is cut.
		if p.Uncounted() {
			settled := s.plan.Settle(ctx, *p)
			s.status.Note(seen(settled))
			p = &settled
		}
		shrink = o.shrink(p.Limit, attempt, shrink)
		cut, aerr := s.plan.Cut(ctx, *p, shrink)
		if aerr != nil {
			return nil, p, aerr, nil
		}
		attempt++
		cut.Retries = attempt
		p, out = &cut, cut.Body
		ex.tell(cut)
		s.metrics.overflowRetries.Inc()
		s.log.Info("the backend refused the prompt as too long; cut harder and sent again",
			"model", p.Model, "session", ex.session, "attempt", p.Retries, "sent", p.After.Tokens, "limit", p.Limit-shrink)
	}
}

// refusedBy says why srv did not serve a request, when its answer (resp,
// or err) is one the next server may serve: it could not be reached or
// went away before answering, or it answered that it cannot serve the
// request now (502, 503, 504, 429) or lacks the model (404). "" when it
// served it. A server that could not be reached is taken out for a while.
func refusedBy(srv *fleet.Node, resp *http.Response, err error) string {
	switch {
	case err != nil:
		srv.Failed(err.Error())
		if isDialError(err) {
			return "could not be reached"
		}
		return "went away before answering"
	case resp.StatusCode == http.StatusNotFound:
		return "does not have the model"
	case resp.StatusCode == http.StatusBadGateway, resp.StatusCode == http.StatusServiceUnavailable,
		resp.StatusCode == http.StatusGatewayTimeout, resp.StatusCode == http.StatusTooManyRequests:
		return "answered " + resp.Status
	}
	return ""
}

// closeBody closes resp's body, when there is one.
func closeBody(resp *http.Response) {
	if resp != nil {
		resp.Body.Close()
	}
}

// roundTrip sends body to srv in place of in's body, at outPath when it
// is set (a request translated to Ollama's /api/chat). With count (a
// request without a plan, whose server did not count it when chosen), the
// request is in flight on srv until its answer's body is closed.
func (s *Server) roundTrip(in *http.Request, srv *fleet.Node, outPath string, body wire.Payload, count bool) (*http.Response, error) {
	out := in.Clone(in.Context())
	out.RequestURI = ""
	out.Body = body.Body()
	out.ContentLength = int64(body.Size())
	out.TransferEncoding = nil
	out.GetBody = func() (io.ReadCloser, error) { return body.Body(), nil }
	removeHopByHop(out.Header)
	pr := &httputil.ProxyRequest{In: in, Out: out}
	shaper{s.cfg.SessionHeader}.to(pr, srv.URL)
	if outPath != "" {
		out.URL.Path = path.Join("/", srv.URL.Path, outPath)
		out.URL.RawPath = ""
	}
	// ctxproxy has read the whole body already: waiting for the backend's
	// 100 Continue would only add latency.
	out.Header.Del("Expect")
	// ctxproxy reads intercepted answers (the counts, the reply), so it
	// asks for them uncompressed; only the transfer encoding changes.
	out.Header.Del("Accept-Encoding")
	if count {
		srv.Begin()
	}
	tr := srv.Transport
	if tr == nil {
		tr = s.transport
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		if count {
			srv.End()
		}
		return nil, err
	}
	srv.Backend.Answered()
	srv.Answered()
	if count {
		resp.Body = &inFlight{ReadCloser: resp.Body, srv: srv}
	}
	return resp, nil
}

// inFlight is an answer's body that ends its request's time in flight on
// its server when first closed.
type inFlight struct {
	io.ReadCloser
	srv    *fleet.Node
	closed atomic.Bool
}

func (b *inFlight) Close() error {
	if !b.closed.Swap(true) {
		b.srv.End()
	}
	return b.ReadCloser.Close()
}

// shaper shapes an outbound request as every route does: to the server
// at target, with the client's X-Forwarded-For chain and this hop, and
// without ctxproxy's own request headers (those named X-Ctxproxy-* and
// the session header), which never reach a server.
type shaper struct{ sessionHeader string }

// to shapes pr for the server at target.
func (sh shaper) to(pr *httputil.ProxyRequest, target *url.URL) {
	pr.SetURL(target)
	pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
	pr.SetXForwarded()
	for k := range pr.Out.Header {
		if strings.HasPrefix(k, "X-Ctxproxy-") {
			delete(pr.Out.Header, k)
		}
	}
	pr.Out.Header.Del(sh.sessionHeader)
}

// hopByHop are the headers of one connection, not of the message
// (RFC 9110, 7.6.1): a proxy does not pass them on.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHop removes h's hop-by-hop headers, those its Connection
// header names among them.
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// answer readies the backend's answer for the client: ctxproxy's headers
// added, a compressed body inflated, the tap that reads the counts and the
// reply put on the body, and an answer to a translated request carried
// back into the client's dialect. It returns the answer and its tap.
func (s *Server) answer(resp *http.Response, ex *exchange, p *plan.Plan) (*http.Response, *wire.Tap, error) {
	ex.status = resp.StatusCode
	if p != nil && resp.StatusCode == http.StatusNotFound {
		s.modelNotFound(ex, p)
	}
	if p != nil && resp.StatusCode >= http.StatusInternalServerError {
		s.loadFailed(resp, ex, p)
	}
	for k, v := range ex.headers {
		resp.Header[k] = v
	}
	exposeOwn(resp.Header)
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		// ctxproxy asked for identity; a backend that compresses anyway
		// is inflated, so that the tap and the translation read text and
		// the client gets what ctxproxy asked for on its behalf.
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			resp.Body.Close()
			return nil, nil, err
		}
		resp.Body = gzipBody{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	d := ex.dialect
	if p != nil && p.Translate {
		d = wire.Ollama // the backend answered in Ollama's dialect
	}
	tap := wire.NewTap(resp.Body, d, resp.StatusCode, resp.Header.Get("Content-Type"), int(s.cfg.MaxBody))
	resp.Body = tap
	if p != nil && p.Translate {
		if err := wire.TranslateAnswer(resp, p.Reply); err != nil {
			tap.Close()
			return nil, nil, err
		}
	}
	return resp, tap, nil
}

// modelNotFound undoes what a chat request for a model the backend does
// not have left behind (a chat route answers 404 for nothing else): its
// row under "Models in use" and what the sizer held for it. Its turn is
// not recorded (recorder.record), and the headers that described the
// plan, a num_ctx "guess" among them, give way to one notice.
func (s *Server) modelNotFound(ex *exchange, p *plan.Plan) {
	s.status.Forget(p.Model)
	if s.sizer != nil {
		s.sizer.Forget(p.Model)
	}
	ex.headers = http.Header{"X-Ctxproxy-Notice": {"the backend does not have model " + strconv.Quote(p.Model) + "; nothing was recorded"}}
}

// loadFailed says, once per model, that the backend could not load it: a
// model its runner cannot read (an architecture its llama.cpp lacks, a
// tensor it finds of another shape) fails on every request with a 500
// whose words are the runner's. The answer passes on as it came.
func (s *Server) loadFailed(resp *http.Response, ex *exchange, p *plan.Plan) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	if err != nil || !bytes.Contains(body, []byte("error loading model")) && !bytes.Contains(body, []byte("process has terminated")) {
		return
	}
	why := string(body)
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		why = e.Error
	}
	ex.warn("the backend could not load " + strconv.Quote(p.Model) + "; its runner said: " + firstLine(why))
	s.once.Warn("load:"+p.Model, "the backend could not load the model; its requests fail until it can",
		"model", p.Model, "error", why)
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// gzipBody inflates a compressed response body and closes the original.
type gzipBody struct {
	*gzip.Reader
	body io.Closer
}

func (g gzipBody) Close() error { return g.body.Close() }

// relay writes resp to the client: its status and headers (hop-by-hop
// ones removed), then its body as it arrives. A stream (an answer of
// unknown length) is flushed piece by piece, so that a chunk reaches the
// client before the next is read; an answer of known length is flushed
// once, whole, so that it leaves in as few writes as the bare reverse
// proxy's. An answer the backend stops sending midway aborts the client
// connection, as httputil.ReverseProxy does, so that the client sees it
// cut, not ended.
//
// ended runs once, when the reply is over and before the client has all
// of it: when the tap has read the whole reply (a stream's end marker,
// or an answer's known length), before the piece that ends it is
// written; else at the body's end, before its held last byte; else when
// the client or the backend went away. With holdLast (a turn other
// replicas build on, which ended stores), the last byte of each piece is
// held back once the tap says the reply is over, so that an answer whose
// end only EOF tells still leaves its last byte after ended.
func relay(w http.ResponseWriter, resp *http.Response, tap *wire.Tap, holdLast bool, ended func()) {
	defer resp.Body.Close()
	removeHopByHop(resp.Header)
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	stream := resp.ContentLength < 0
	written := int64(0)
	buf := copyBuffers.Get()
	defer copyBuffers.Put(buf)
	over := false
	end := func() {
		if !over {
			over = true
			ended()
		}
	}
	defer end()     // the client went away
	var held []byte // the last byte, held back
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			piece := buf[:n]
			if held != nil {
				piece = append(held, piece...)
				held = nil
			}
			written += int64(n)
			if holdLast && (tap.Ended() || written == resp.ContentLength) {
				held = []byte{piece[len(piece)-1]}
				piece = piece[:len(piece)-1]
			}
			if written == resp.ContentLength || stream && tap.Complete() {
				end()
			}
			if _, werr := w.Write(piece); werr != nil {
				return // the client went away
			}
			if stream || written == resp.ContentLength {
				_ = rc.Flush()
			}
		}
		if err == io.EOF {
			end()
			if held != nil {
				if _, werr := w.Write(held); werr == nil {
					_ = rc.Flush()
				}
			}
			return
		}
		if err != nil {
			resp.Body.Close()
			end() // what came is recorded
			panic(http.ErrAbortHandler)
		}
	}
}

// backendError answers a request the backend could not serve, in the
// client's dialect, and returns the status it gave (499: the client went
// away first, and nobody is answered).
func (s *Server) backendError(w http.ResponseWriter, r *http.Request, d wire.Dialect, err error) int {
	if r.Context().Err() != nil {
		s.log.Debug("client gone before the backend answered", "path", r.URL.Path)
		return 499
	}
	target := s.backend
	if at := (atServer{}); errors.As(err, &at) {
		target = at.url
	}
	e := wire.Error{Status: http.StatusBadGateway,
		Message: fmt.Sprintf("ctxproxy could not reach the backend at %s", target.Redacted())}
	var bad badAnswer
	if errors.As(err, &bad) {
		e.Message = fmt.Sprintf("ctxproxy could not read the answer of the backend at %s", target.Redacted())
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !isDialError(err) {
		e = wire.Error{Status: http.StatusGatewayTimeout,
			Message: fmt.Sprintf("the backend at %s sent no response headers within %s (backend.response_header_timeout)",
				target.Redacted(), s.cfg.ResponseHeaderTimeout)}
	}
	if isDialError(err) {
		s.be.Forget()
	}
	s.log.Warn("backend request failed", "path", r.URL.Path, "status", e.Status, "err", err)
	wire.WriteError(w, d, e)
	return e.Status
}

// atServer is an error in reaching the server at url.
type atServer struct {
	url *url.URL
	err error
}

func (a atServer) Error() string { return a.err.Error() }

func (a atServer) Unwrap() error { return a.err }

// badAnswer wraps an error in reading the backend's answer (as opposed to
// reaching the backend), so the client is told which it was.
type badAnswer struct{ err error }

func (b badAnswer) Error() string { return "reading the backend's answer: " + b.err.Error() }

func (b badAnswer) Unwrap() error { return b.err }

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
