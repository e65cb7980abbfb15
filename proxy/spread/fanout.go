package spread

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

// manage sends a model-management request to the server it names, else
// to every server that is up (all), else (push) to the first that lists
// the model.
func (h *Handler) manage(w http.ResponseWriter, r *http.Request, all bool) {
	if name := r.Header.Get(BackendHeader); name != "" {
		s := h.cfg.Fleet.Named(name)
		if s == nil {
			names := make([]string, 0, len(h.cfg.Fleet.Servers()))
			for _, s := range h.cfg.Fleet.Servers() {
				names = append(names, s.Name)
			}
			h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%s names no backend of ctxproxy: %q is none of %s",
				BackendHeader, name, strings.Join(names, ", ")))
			return
		}
		h.forward(w, r, []*fleet.Node{s}, nil)
		return
	}
	if all {
		h.fanOut(w, r, h.up())
		return
	}
	body, whole, err := readUpTo(r.Body, h.cfg.MaxBody)
	if err != nil || !whole {
		h.fail(w, r, http.StatusBadRequest, "the request body is not a model's name")
		return
	}
	order := h.upFirst()
	model := modelOf(body)
	for _, s := range order {
		if has, known := s.Has(model); has && known {
			order = []*fleet.Node{s}
			break
		}
	}
	h.forward(w, r, order[:1], body)
}

// target is one server a fanned-out request goes to.
type target struct {
	s    *fleet.Node
	body *io.PipeReader // its request's body; nil for none
	resp *http.Response
	err  error
	// what it failed with ("" when it did not), and the status it
	// failed with (0 when it answered none), once its answer is read
	status int
	failed string
	over   chan struct{}
}

// fanOut sends r to every target at once, its body streamed to all of
// them as it arrives. The client reads the first target's answer; a
// failure of any other is told after it: an extra NDJSON line
// {"error":"backend <name>: …"} at the end of a streamed answer, a
// failing status in place of a successful one that is not streamed.
func (h *Handler) fanOut(w http.ResponseWriter, r *http.Request, targets []*fleet.Node) {
	if len(targets) == 1 {
		h.forward(w, r, targets, nil)
		return
	}
	ctx := r.Context()
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	ts := make([]*target, len(targets))
	pipes := make([]*io.PipeWriter, len(targets))
	for i, s := range targets {
		t := &target{s: s, over: make(chan struct{})}
		ts[i] = t
		var body io.ReadCloser
		if hasBody {
			t.body, pipes[i] = io.Pipe()
			body = t.body
		}
		out := h.outbound(ctx, r, s, body)
		s.Begin()
		go func() {
			defer s.End()
			defer close(t.over)
			t.resp, t.err = s.Transport.RoundTrip(out)
			if t.err == nil {
				s.Answered()
			} else if isDialError(t.err) {
				s.Failed(t.err.Error())
			}
			if i > 0 {
				t.status, t.failed = outcome(t.resp, t.err)
				t.stop()
			}
		}()
	}
	var fed sync.WaitGroup
	if hasBody {
		fed.Go(func() { feed(r.Body, pipes) })
	}
	defer fed.Wait()
	lead := ts[0]
	<-lead.over
	others := func() []string {
		lead.stop()
		var msgs []string
		for _, t := range ts[1:] {
			<-t.over
			if t.failed == "" || t.status == http.StatusNotFound && tolerates404(r) && lead.err == nil && lead.resp.StatusCode < 400 {
				continue
			}
			h.cfg.Log.Warn("a backend failed a model-management request", "backend", t.s.Name, "path", r.URL.Path, "error", t.failed)
			msgs = append(msgs, failure(t.s, t.failed))
		}
		return msgs
	}
	if lead.err != nil {
		msgs := append([]string{failure(lead.s, "could not be reached: "+lead.err.Error())}, others()...)
		h.fail(w, r, http.StatusBadGateway, strings.Join(msgs, "; "))
		return
	}
	if strings.Contains(lead.resp.Header.Get("Content-Type"), "ndjson") {
		relayStream(w, lead.resp, h.cfg.Hop, others)
		return
	}
	h.relayWhole(w, r, lead, others, ts)
}

// tolerates404 reports whether a server answering r with 404 did no
// harm: a model deleted, or copied, where it was not.
func tolerates404(r *http.Request) bool {
	return r.URL.Path == "/api/delete" || r.URL.Path == "/api/copy"
}

// stop ends t's share of the request body: its answer is read.
func (t *target) stop() {
	if t.body != nil {
		t.body.CloseWithError(errAnswered)
	}
}

var errAnswered = errors.New("the backend answered")

// feed copies src to every writer of dst as it arrives, a writer whose
// reader went away dropped, until src ends or every writer is dropped.
func feed(src io.Reader, dst []*io.PipeWriter) {
	buf := make([]byte, 256<<10)
	for {
		n, err := src.Read(buf)
		alive := 0
		for i, pw := range dst {
			if pw == nil {
				continue
			}
			if n > 0 {
				if _, werr := pw.Write(buf[:n]); werr != nil {
					dst[i] = nil
					continue
				}
			}
			alive++
		}
		if err != nil || alive == 0 {
			for _, pw := range dst {
				if pw == nil {
					continue
				}
				if err == io.EOF {
					pw.Close()
				} else {
					pw.CloseWithError(err)
				}
			}
			return
		}
	}
}

// outcome reads a server's whole answer and returns the status and
// message it failed with, "" when it did not: no answer, an error
// status, or an NDJSON line that is an error.
func outcome(resp *http.Response, err error) (int, string) {
	if err != nil {
		return 0, "could not be reached: " + err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		what := translate.ErrorText(body)
		if what == "" {
			what = resp.Status
		}
		return resp.StatusCode, what
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadSlice('\n')
		if what := errorLine(line); what != "" {
			_, _ = io.Copy(io.Discard, br)
			return resp.StatusCode, what
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
		}
		if err == io.EOF {
			return 0, ""
		}
		if err != nil {
			return 0, "its answer broke off: " + err.Error()
		}
	}
}

// errorLine is the error an NDJSON line says, "" when it says none.
func errorLine(line []byte) string {
	if !bytes.Contains(line, []byte(`"error"`)) {
		return ""
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(line, &e) != nil {
		return ""
	}
	return e.Error
}

// relayStream relays a streamed answer as it arrives, then one error
// line for each failure others returns when it is over.
func relayStream(w http.ResponseWriter, resp *http.Response, hop func(http.Header), others func() []string) {
	defer resp.Body.Close()
	hd := w.Header()
	for k, v := range resp.Header {
		hd[k] = v
	}
	hop(hd)
	hd.Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, 32<<10)
	endsLine := true
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			endsLine = buf[n-1] == '\n'
			if _, werr := w.Write(buf[:n]); werr != nil {
				others()
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			break
		}
	}
	msgs := others()
	if len(msgs) == 0 {
		return
	}
	var b bytes.Buffer
	if !endsLine {
		b.WriteByte('\n')
	}
	for _, m := range msgs {
		line, _ := json.Marshal(map[string]string{"error": m})
		b.Write(append(line, '\n'))
	}
	_, _ = w.Write(b.Bytes())
	_ = rc.Flush()
}

// relayWhole relays an answer that is not streamed once every target
// has answered: the lead's, unless it succeeded and another failed;
// then the failure.
func (h *Handler) relayWhole(w http.ResponseWriter, r *http.Request, lead *target, others func() []string, ts []*target) {
	resp := lead.resp
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListing))
	resp.Body.Close()
	msgs := others()
	if err != nil {
		msgs = append([]string{failure(lead.s, "its answer broke off: "+err.Error())}, msgs...)
	}
	if resp.StatusCode < 400 && len(msgs) > 0 {
		status := http.StatusBadGateway
		for _, t := range ts[1:] {
			if t.status >= 400 && t.failed != "" {
				status = t.status
				break
			}
		}
		if r.Method == http.MethodHead {
			w.WriteHeader(status)
			return
		}
		h.fail(w, r, status, strings.Join(msgs, "; "))
		return
	}
	hd := w.Header()
	for k, v := range resp.Header {
		hd[k] = v
	}
	h.cfg.Hop(hd)
	if r.Method != http.MethodHead {
		hd.Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}
