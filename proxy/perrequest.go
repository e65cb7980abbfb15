package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// What a client may ask of ctxproxy for one request (README, Per-request
// control).

// maxMessagesHeader is the request header that caps the non-system
// messages forwarded.
const maxMessagesHeader = "X-Ctxproxy-Max-Messages"

// clientNoTruncate reports whether the client itself sent Ollama's
// "truncate": false: it asks that nothing of its prompt be cut, so
// ctxproxy drops no message either. ctxproxy also sets truncate: false on
// the requests it manages, but only after this is read, from the body as
// the client sent it.
func clientNoTruncate(req *wire.Request) bool {
	return req.Dialect == wire.Ollama && req.NoTruncate
}

// maxMessages reads X-Ctxproxy-Max-Messages: 0 when absent.
func maxMessages(r *http.Request) (int, *wire.Error) {
	v := strings.TrimSpace(r.Header.Get(maxMessagesHeader))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, &wire.Error{Status: http.StatusBadRequest,
			Message: fmt.Sprintf("%s: %q is not a whole number of messages of at least 1", maxMessagesHeader, v)}
	}
	return n, nil
}

// checkUncut is the answer to a request forwarded uncut because its client
// sent truncate: false: an overflow error when the conversation cannot fit
// the window at all, a warning when it leaves the reply less than its
// reserve.
func checkUncut(ex *exchange, p *plan) *wire.Error {
	if p.counter == nil || p.lim.MaxTokens <= 0 {
		return nil
	}
	switch {
	case p.before.Tokens > p.lim.MaxTokens:
		return &wire.Error{Status: http.StatusBadRequest, Code: "context_length_exceeded",
			Message: fmt.Sprintf("the conversation needs about %d tokens and the model's context window is %d; "+
				"the request sets \"truncate\": false, so ctxproxy drops no message: shorten the conversation, "+
				"or leave truncate unset to let ctxproxy cut it", p.before.Tokens, p.lim.MaxTokens)}
	case p.limit > 0 && p.before.Tokens > p.limit:
		ex.warn(fmt.Sprintf("forwarded uncut (\"truncate\": false): the conversation uses %d of the %d-token window, "+
			"leaving the reply less than its reserve", p.before.Tokens, p.lim.MaxTokens))
	}
	return nil
}
