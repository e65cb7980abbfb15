package adminapi

import (
	"net/http"
	"strconv"
	"strings"
)

// Headers are ctxproxy's X-Ctxproxy-* answer headers on a chat route.
type Headers struct {
	// Seen is whether any came: without them the proxy URL is not a
	// ctxproxy, and earlier turns are not sent along.
	Seen                 bool
	Session              string
	Tokens, TokensBefore int
	Limit                int
	// Usage is in percent, as the header carries it.
	Usage               float64
	Dropped, Summarized int
	NumCtx              int
	Warnings, Notices   []string
}

// ParseHeaders reads ctxproxy's answer headers.
func ParseHeaders(h http.Header) Headers {
	var a Headers
	for k := range h {
		if strings.HasPrefix(k, "X-Ctxproxy-") {
			a.Seen = true
			break
		}
	}
	num := func(k string) int {
		n, _ := strconv.Atoi(strings.TrimSpace(h.Get(k)))
		return n
	}
	a.Session = h.Get("X-Ctxproxy-Session")
	a.Tokens = num("X-Ctxproxy-Tokens")
	a.TokensBefore = num("X-Ctxproxy-Tokens-Before")
	a.Limit = num("X-Ctxproxy-Limit")
	a.Usage, _ = strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(h.Get("X-Ctxproxy-Usage")), "%"), 64)
	// What the model saw, when ctxproxy says: a conversation cut from
	// 514% to 60% is at 60% for the status bar, not 514%.
	if f := strings.TrimSpace(h.Get("X-Ctxproxy-Usage-Forwarded")); f != "" {
		if v, err := strconv.ParseFloat(strings.TrimSuffix(f, "%"), 64); err == nil {
			a.Usage = v
		}
	}
	a.Dropped = num("X-Ctxproxy-Dropped")
	a.Summarized = num("X-Ctxproxy-Summarized")
	a.NumCtx = num("X-Ctxproxy-Num-Ctx")
	for _, v := range h.Values("X-Ctxproxy-Warning") {
		if v = strings.TrimSpace(v); v != "" {
			a.Warnings = append(a.Warnings, v)
		}
	}
	for _, v := range h.Values("X-Ctxproxy-Notice") {
		if v = strings.TrimSpace(v); v != "" {
			a.Notices = append(a.Notices, v)
		}
	}
	return a
}
