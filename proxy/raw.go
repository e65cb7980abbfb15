package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/budget/exact"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ollama/ollama/api"
)

// raw handles a raw-prompt route. ctxproxy does not cut a raw prompt
// (there are no messages to choose from), but it counts it, sets the
// same headers as on chat routes, warns when the prompt is longer than
// the window, and checks the backend's count after the reply, so an
// overflow or a silent truncation is seen and reported there too. The
// body is forwarded as sent.
func (s *Server) raw(w http.ResponseWriter, r *http.Request, d wire.Dialect) {
	if r.Header.Get("X-Ctxproxy-Bypass") == "1" {
		s.rp.ServeHTTP(w, r)
		return
	}
	ex := newExchange(d, r.URL.Path)
	var p *plan
	defer func() { s.rec.logExchange(ex, p) }()
	body, release, status := s.gate.TakeBody(w, r, d)
	if status != 0 {
		ex.status = status
		return
	}
	defer release()
	req, prompt, ok := wire.DecodeRaw(body, s.cfg.MaxDepth)
	if !ok || s.tokens == nil {
		// A prompt array, or anything unusual: the backend decides.
		s.forward(w, r, ex, nil, nil, wire.PayloadOf(body), nil)
		return
	}
	ex.model = req.Model
	ex.stream = req.Stream == nil && d == wire.Ollama || req.Stream != nil && *req.Stream
	p = &plan{model: req.Model}

	toOllama := s.kind(r.Context()) == KindOllama
	var mi backend.Model
	if toOllama {
		mi = s.be.Model(r.Context(), req.Model)
	}
	lim := s.tokens.Limits(req.Model, mi.Facts.ContextLength)
	switch {
	case toOllama && d == wire.Ollama && req.Options.NumCtx > 0:
		p.numCtx = req.Options.NumCtx
		lim = lim.Cap(req.Options.NumCtx)
	case toOllama:
		// No num_ctx (or Ollama's /v1 layer, which ignores it): the
		// server's default window.
		lim = lim.Cap(ollamaDefaultCtx)
	}
	window := lim.MaxTokens
	p.limit, p.window = window, window

	if tok := mi.Tokenizer; toOllama && tok != nil && !s.cfg.NoExact && req.Suffix == "" && req.Template == "" && len(req.Context) == 0 {
		var n int
		var err error
		if req.Raw {
			n, err = tok.CountPrompt(prompt)
		} else {
			var msgs []api.Message
			if req.System != "" {
				msgs = append(msgs, api.Message{Role: "system", Content: req.System})
			}
			msgs = append(msgs, api.Message{Role: "user", Content: prompt, Images: make([]api.ImageData, len(req.Images))})
			var think *api.ThinkValue
			if len(req.Think) > 0 {
				think = &api.ThinkValue{}
				if json.Unmarshal(req.Think, think) != nil {
					think = nil
				}
			}
			n, _, err = tok.Count(exact.Prompt{Messages: msgs, Think: think})
		}
		if err == nil {
			p.before = budget.Estimate{Tokens: n, Raw: n, Chars: n, Exact: len(req.Images) == 0}
			p.counter = &exactCounter{model: tok}
			if p.before.Exact {
				p.exact = &mi
			}
		}
	}
	if p.counter == nil {
		mc := s.tokens.MessageCounter(req.Model).Frozen()
		p.counter = mc
		p.before = budget.Estimate{Tokens: mc.CountText(prompt) + len(req.Context)}
	}
	p.after = p.before
	h := ex.headers
	h.Set("X-Ctxproxy-Tokens", strconv.Itoa(p.after.Tokens))
	h.Set("X-Ctxproxy-Tokens-Before", strconv.Itoa(p.before.Tokens))
	h.Set("X-Ctxproxy-Limit", strconv.Itoa(window))
	h.Set("X-Ctxproxy-Usage", strconv.FormatFloat(float64(p.after.Tokens)*100/float64(max(1, window)), 'f', 1, 64))
	if p.numCtx > 0 {
		h.Set("X-Ctxproxy-Num-Ctx", strconv.Itoa(p.numCtx))
	}
	if p.after.Tokens > window {
		s.metrics.rawOverflows.Inc()
		what := "the backend will cut it or refuse it"
		if toOllama {
			what = "Ollama will cut it to fit without a word (or refuse it with \"truncate\": false)"
		}
		ex.warn(fmt.Sprintf("the prompt (%d tokens) is longer than the model's window (%d): %s; ctxproxy does not cut raw prompts",
			p.after.Tokens, window, what))
		s.log.Warn("raw prompt longer than the window", "route", ex.route, "model", req.Model, "tokens", p.after.Tokens,
			"window", window, "exact", p.exact != nil)
	}
	s.forward(w, r, ex, nil, p, wire.PayloadOf(body), nil)
}
