// Package translate carries OpenAI chat completion, Responses and
// Anthropic Messages traffic to Ollama's native chat API and back, so that
// clients of those APIs in front of an Ollama backend get ctxproxy's
// context control: Ollama's own /v1 layer cannot set num_ctx, /api/chat
// can.
//
// It is pure functions and a stream converter over bytes; the proxy does
// the HTTP. For a POST /v1/chat/completions bound for Ollama:
//
//	body, info, err := translate.Request(openaiBody, translate.RequestOptions{NumCtx: n})
//	// err is a *translate.Error: answer err.Status with err.JSON().
//	// forward body to /api/chat; log info.Dropped at debug level.
//
// then, for a non-2xx answer, translate.BackendError(status, body); for a
// whole answer, translate.Response(body, info, opts); for a stream,
// translate.NewStream(info, opts) and Append per NDJSON line (or Copy),
// then Finish.
//
// The Responses API (POST /v1/responses) and the Anthropic Messages API
// (POST /v1/messages) have the same three directions: ResponsesRequest,
// ResponsesResponse and NewResponsesStream; MessagesRequest,
// MessagesResponse and NewMessagesStream (errors in Anthropic's shape with
// Error.AnthropicJSON). DecodeResponses and DecodeMessages show either
// request as a Conversation of chat.Messages with tool units, and
// Conversation.Encode writes back what a strategy kept, for any backend.
//
// The decoder reads only what it maps and moves everything else (message
// text, tool definitions, schemas) as the original bytes, read with
// internal/jsonscan.
// FIELDS.md lists every OpenAI field and what happens to it.
package translate
