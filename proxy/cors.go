package proxy

import (
	"net/http"
	"slices"
	"strings"
)

// Browsers ask before they send a cross-origin request with headers of
// their own (a preflight, OPTIONS with Access-Control-Request-Method), and
// show a page only the response headers it is told it may read. The
// backend keeps deciding which origins and methods it serves (Ollama's
// OLLAMA_ORIGINS): ctxproxy forwards the preflight without naming its own
// headers, which a backend does not know, and adds them to what the
// backend allowed; on its routes it exposes its X-Ctxproxy-* answers
// wherever the backend allowed the origin.

// ownRequestHeader reports whether a request header is ctxproxy's own:
// the session header and X-Ctxproxy-*.
func ownRequestHeader(sessionHeader, name string) bool {
	return strings.EqualFold(name, sessionHeader) || hasPrefixFold(name, "X-Ctxproxy-")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// allowOwn adds ctxproxy's own request headers to a preflight answer that
// allows the request.
type allowOwn struct {
	http.ResponseWriter
	own []string
}

func (a allowOwn) WriteHeader(code int) {
	h := a.Header()
	if code < 300 && h.Get("Access-Control-Allow-Origin") != "" {
		allowed := h.Values("Access-Control-Allow-Headers")
		if !slices.Contains(allowed, "*") {
			h.Set("Access-Control-Allow-Headers", strings.Join(append(allowed, a.own...), ", "))
		}
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a allowOwn) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// exposeOwn lets a page read ctxproxy's answers (its X-Ctxproxy-* headers
// in h) when the backend allowed the page's origin.
func exposeOwn(h http.Header) {
	if h.Get("Access-Control-Allow-Origin") == "" {
		return
	}
	var own []string
	for k := range h {
		if strings.HasPrefix(k, "X-Ctxproxy-") {
			own = append(own, k)
		}
	}
	if len(own) == 0 {
		return
	}
	slices.Sort(own)
	h.Set("Access-Control-Expose-Headers", strings.Join(append(h.Values("Access-Control-Expose-Headers"), own...), ", "))
}
