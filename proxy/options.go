package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// maxMessagesHeader is the request header that caps the non-system
// messages forwarded.
const maxMessagesHeader = plan.MaxMessagesHeader

// options reads what a client asks of ctxproxy for one request (README,
// Per-request control) from r's headers, once, for the planner: the
// session it goes to (named: the client named it in sessionHeader),
// the strategy, accumulation, a cap on messages, and the credential a
// summarizer on the same backend is called with.
func options(r *http.Request, sessionHeader, session string) (plan.Options, *wire.Error) {
	opt := plan.Options{Session: session, Named: r.Header.Get(sessionHeader) != "",
		Strategy: r.Header.Get("X-Ctxproxy-Strategy"), Accumulate: r.Header.Get("X-Ctxproxy-Accumulate") == "1",
		Credential: r.Header.Get("Authorization"), Backend: r.Header.Get("X-Ctxproxy-Backend")}
	if v := strings.TrimSpace(r.Header.Get(maxMessagesHeader)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return plan.Options{}, wire.BadRequest("", fmt.Sprintf("%s: %q is not a whole number of messages of at least 1", maxMessagesHeader, v))
		}
		opt.MaxMessages = n
	}
	return opt, nil
}
