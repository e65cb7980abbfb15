package proxy

import (
	"net/http"

	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
)

func (s *adminAPI) getContextSize(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.status.contextSize())
}

func (s *adminAPI) putContextSize(w http.ResponseWriter, r *http.Request) {
	var body api.ContextSizeRequest
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	var err error
	switch {
	case body.Tokens != nil && body.Auto != nil && *body.Auto:
		err = sessions.Errorf(http.StatusBadRequest, `give {"tokens": N} or {"auto": true}, not both`)
	case body.Auto != nil && *body.Auto:
		err = s.status.setContextSize(0)
	case body.Tokens != nil && *body.Tokens > 0:
		err = s.status.setContextSize(*body.Tokens)
	case body.Tokens != nil:
		err = sessions.Errorf(http.StatusBadRequest, "context size %d: want a positive number of tokens", *body.Tokens)
	default:
		err = sessions.Errorf(http.StatusBadRequest, `want {"tokens": N} or {"auto": true}`)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.status.contextSize())
}

func (s *adminAPI) getStatus(w http.ResponseWriter, r *http.Request) {
	s.sessions.Flush(r.Context()) // the session count includes the last turn
	writeJSON(w, http.StatusOK, s.status.status(r.Context()))
}
