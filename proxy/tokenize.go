package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy/edge"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	ollama "github.com/ollama/ollama/api"
)

// tokenizeRoutes serves POST /ctxproxy/tokenize and /ctxproxy/detokenize,
// and Ollama-style /api/tokenize and /api/detokenize, which Ollama itself
// does not serve (v0.17.4): a backend that does gets those requests, and
// ctxproxy answers them only after the backend said 404, remembering that
// for a while.
type tokenizeRoutes struct {
	// be is the first server's backend; fleet finds a model's.
	be      *backend.Backend
	fleet   *fleet.Router
	tokens  *budget.Registry // nil: counting is off
	noExact bool
	gate    *edge.Gate
	rp      http.Handler // the plain reverse proxy
	// missing is the unix ns until which the backend is taken to lack
	// the /api/ routes.
	missing atomic.Int64
}

// tokenizerFor returns the model's exact tokenizer when the backend is
// Ollama and exact counting is on.
func (tr *tokenizeRoutes) tokenizerFor(r *http.Request, model string) *exact.Tokenizer {
	be := tr.backendOf(model)
	if tr.noExact || be.Kind(r.Context()) != KindOllama {
		return nil
	}
	return be.Model(r.Context(), model).Tokenizer
}

// backendOf is the backend of the server a request for model goes to.
func (tr *tokenizeRoutes) backendOf(model string) *backend.Backend {
	if tr.fleet == nil || !tr.fleet.Several() {
		return tr.be
	}
	return tr.fleet.Order(model, "", "").Order[0].Backend
}

// tokenize counts req as the request path would.
func (tr *tokenizeRoutes) tokenize(r *http.Request, req adminapi.TokenizeRequest) (adminapi.TokenizeResponse, *wire.Error) {
	if req.Model == "" {
		return adminapi.TokenizeResponse{}, &wire.Error{Status: http.StatusBadRequest, Message: "model is required"}
	}
	if (req.Content == nil) == (req.Messages == nil) {
		return adminapi.TokenizeResponse{}, &wire.Error{Status: http.StatusBadRequest, Message: "give either content or messages"}
	}
	out := adminapi.TokenizeResponse{Model: req.Model}
	tok := tr.tokenizerFor(r, req.Model)
	if req.Content != nil {
		if tok != nil {
			n, err := tok.CountText(*req.Content)
			if err == nil {
				out.Count, out.Exact, out.Source = n, true, tok.Name()
				if tok.TokenizesAsServer() {
					out.Tokens, _ = tok.Tokenize(*req.Content, false)
				}
				return out, nil
			}
		}
		if tr.tokens == nil {
			return out, &wire.Error{Status: http.StatusNotImplemented, Message: "token counting is off"}
		}
		mc := tr.tokens.MessageCounter(req.Model).Frozen()
		out.Count, out.Source = mc.CountText(*req.Content), "estimate:"+mc.Name()
		return out, nil
	}
	body, _ := json.Marshal(map[string]json.RawMessage{"model": mustJSON(req.Model), "messages": req.Messages,
		"tools": nullIfEmpty(req.Tools), "think": nullIfEmpty(req.Think)})
	chat, err := wire.DecodeChat(wire.Ollama, body)
	if err != nil {
		return out, &wire.Error{Status: http.StatusBadRequest, Message: "messages: " + err.Error()}
	}
	var pc plan.Counter
	if be := tr.backendOf(req.Model); tok == nil && tr.tokens != nil && !tr.noExact && be.Kind(r.Context()) == KindOpenAI {
		if remote := be.Remote(r.Context(), req.Model); remote.API != "" {
			rc := plan.NewRemote(r.Context(), be, req.Model, tr.tokens.MessageCounter(req.Model).Frozen())
			if e := rc.Prompt(chat.Messages, chat.Tools); rc.Err() == nil {
				out.Count, out.Exact, out.Source = e.Tokens, true, "backend:"+remote.API
				pc = rc
			}
		}
	}
	if tok != nil {
		ec := plan.NewExact(tok, chat)
		if ec.Err() == nil {
			e := ec.Prompt(chat.Messages, nil)
			if ec.Err() == nil {
				p, _ := ec.Counted()
				out.Count, out.Exact, out.Source = e.Tokens, !ec.Approximate(), tok.Name()
				// A vision model's images are embeddings where their tags
				// were, not the tags' text: their count can be exact, the
				// rendered text's ids are not.
				images := slices.ContainsFunc(p.Messages, func(m ollama.Message) bool { return len(m.Images) > 0 })
				if text, err := tok.Render(p); err == nil && out.Exact && tok.TokenizesAsServer() && !(images && tok.Vision()) {
					out.Tokens, _ = tok.Tokenize(text, true)
				}
				pc = ec
			}
		}
	}
	if pc == nil {
		if tr.tokens == nil {
			return out, &wire.Error{Status: http.StatusNotImplemented, Message: "token counting is off"}
		}
		mc := tr.tokens.MessageCounter(req.Model).Frozen()
		out.Count, out.Source = mc.Prompt(chat.Messages, chat.Tools).Tokens, "estimate:"+mc.Name()
		pc = mc
	}
	for i := range chat.Messages {
		out.Messages = append(out.Messages, adminapi.MessageCount{Role: chat.Messages[i].Role, Tokens: pc.CountMessage(&chat.Messages[i])})
	}
	return out, nil
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func nullIfEmpty(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// readJSON reads a JSON body of at most max_body bytes into v, answering
// the client itself when it cannot.
func (tr *tokenizeRoutes) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	release, ok := tr.gate.BodyBudget(w, r)
	if !ok {
		return false
	}
	defer release()
	body, aerr := edge.ReadBody(r, tr.gate.MaxBody())
	if aerr != nil {
		wire.WriteError(w, wire.Ollama, *aerr)
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		wire.WriteError(w, wire.Ollama, wire.Error{Status: http.StatusBadRequest, Message: "invalid JSON: " + err.Error()})
		return false
	}
	return true
}

func (tr *tokenizeRoutes) postTokenize(w http.ResponseWriter, r *http.Request) {
	var req adminapi.TokenizeRequest
	if !tr.readJSON(w, r, &req) {
		return
	}
	out, aerr := tr.tokenize(r, req)
	if aerr != nil {
		wire.WriteError(w, wire.Ollama, *aerr)
		return
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

func (tr *tokenizeRoutes) postDetokenize(w http.ResponseWriter, r *http.Request) {
	var req adminapi.DetokenizeRequest
	if !tr.readJSON(w, r, &req) {
		return
	}
	tok := tr.tokenizerFor(r, req.Model)
	if tok == nil {
		wire.WriteError(w, wire.Ollama, wire.Error{Status: http.StatusNotImplemented,
			Message: fmt.Sprintf("ctxproxy has no tokenizer of its own for %q (only Ollama models with exact counting)", req.Model)})
		return
	}
	text, err := tok.Detokenize(req.Tokens)
	if err != nil {
		wire.WriteError(w, wire.Ollama, wire.Error{Status: http.StatusBadRequest, Message: err.Error()})
		return
	}
	wire.WriteJSON(w, http.StatusOK, adminapi.DetokenizeResponse{Model: req.Model, Content: text, Source: tok.Name()})
}

const tokenizeRecheck = 10 * time.Minute

func (tr *tokenizeRoutes) apiTokenize(own http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tr.be.Kind(r.Context()) != KindOllama {
			tr.rp.ServeHTTP(w, r)
			return
		}
		if time.Now().UnixNano() < tr.missing.Load() {
			own(w, r)
			return
		}
		body, aerr := edge.ReadBody(r, tr.gate.MaxBody())
		if aerr != nil {
			wire.WriteError(w, wire.Ollama, *aerr)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, tr.be.URL().JoinPath(r.URL.Path).String(), bytes.NewReader(body))
		if err != nil {
			wire.WriteError(w, wire.Ollama, wire.Error{Status: http.StatusInternalServerError, Message: err.Error()})
			return
		}
		req.Header = r.Header.Clone()
		req.Header.Del("Accept-Encoding")
		resp, err := tr.be.Client().Do(req)
		if err == nil && resp.StatusCode != http.StatusNotFound {
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
		if err == nil {
			resp.Body.Close()
			tr.missing.Store(time.Now().Add(tokenizeRecheck).UnixNano())
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		own(w, r)
	}
}
