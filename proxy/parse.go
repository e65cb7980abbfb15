package proxy

import (
	"encoding/json"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// Chat is a chat request body as ctxproxy reads it, for tools outside the
// request path (`ctxproxy count`).
type Chat struct {
	Model    string
	Messages []rewrite.Message
	Tools    json.RawMessage
	// MaxOutput is the request's own output limit, 0 when unset.
	MaxOutput int
	// NumCtx is the request's options.num_ctx, 0 when unset.
	NumCtx int
}

// ParseChat reads a chat request body of either dialect; both carry
// "messages", and the fields ctxproxy reads have one meaning in each.
// The messages' text shares body's bytes: body must not change while the
// result is in use.
func ParseChat(body []byte) (Chat, error) {
	req, err := wire.DecodeChat(wire.Ollama, body)
	if err != nil {
		return Chat{}, err
	}
	return Chat{Model: req.Model, Messages: req.Messages, Tools: req.Tools, MaxOutput: req.MaxOutput, NumCtx: req.NumCtx}, nil
}
