package admin

import (
	"net/http"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

func (s *adminAPI) getContextSize(w http.ResponseWriter, r *http.Request) {
	wire.WriteJSON(w, http.StatusOK, s.status.ContextSize())
}

func (s *adminAPI) putContextSize(w http.ResponseWriter, r *http.Request) {
	var body adminapi.ContextSizeRequest
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	var err error
	switch {
	case body.Tokens != nil && body.Auto != nil && *body.Auto:
		err = sessions.Errorf(http.StatusBadRequest, `give {"tokens": N} or {"auto": true}, not both`)
	case body.Auto != nil && *body.Auto:
		err = s.status.SetContextSize(0)
	case body.Tokens != nil && *body.Tokens > 0:
		err = s.status.SetContextSize(*body.Tokens)
	case body.Tokens != nil:
		err = sessions.Errorf(http.StatusBadRequest, "context size %d: want a positive number of tokens", *body.Tokens)
	default:
		err = sessions.Errorf(http.StatusBadRequest, `want {"tokens": N} or {"auto": true}`)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, s.status.ContextSize())
}

func (s *adminAPI) getStatus(w http.ResponseWriter, r *http.Request) {
	s.sessions.Flush(r.Context()) // the session count includes the last turn
	wire.WriteJSON(w, http.StatusOK, s.status.Report(r.Context()))
}
