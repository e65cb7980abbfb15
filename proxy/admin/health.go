package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// health answers /ctxproxy/healthz and /ctxproxy/readyz.
type health struct {
	backend *url.URL
	be      *backend.Backend
	store   sessions.Store
	writer  sessions.Writer
}

func (s *health) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// readyz answers 200 when the backend answered recently, asking it (GET /)
// when it has not. Corrupt records the store set aside since start are
// told on a line of their own after the status, whatever it is: the
// sessions they were in still load, so they do not make ctxproxy
// unready, but someone should look at the copies.
func (s *health) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	defer s.corrupt(w)
	if p, ok := s.store.(interface{ Ping(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		err := p.Ping(ctx)
		cancel()
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "degraded: the session store does not answer: %v\n", err)
			return
		}
	}
	if since, err := sessions.Health(s.writer); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "degraded: the session store fails since %s: %v\n", since.UTC().Format(time.RFC3339), err)
		return
	}
	if s.be.Ready(r.Context()) {
		_, _ = io.WriteString(w, "ready\n")
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, "backend %s is not answering\n", s.backend.Redacted())
}

// corrupt writes the line that says how many corrupt records the store
// set aside since start, and where their copies are; nothing when none.
func (s *health) corrupt(w io.Writer) {
	c, ok := s.store.(interface{ Counters() snapshots.Counters })
	if !ok {
		return
	}
	n := c.Counters()
	switch {
	case n.Corrupt == 1:
		_, _ = fmt.Fprintf(w, "1 corrupt session record set aside since start; copies in %s\n", n.CorruptCopies)
	case n.Corrupt > 1:
		_, _ = fmt.Fprintf(w, "%d corrupt session records set aside since start; copies in %s\n", n.Corrupt, n.CorruptCopies)
	}
}
