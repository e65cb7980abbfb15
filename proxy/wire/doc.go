// Package wire reads and writes what crosses the wire on the chat routes,
// in each dialect ctxproxy serves (Ollama's /api/chat, OpenAI's chat
// completions, OpenAI's Responses, Anthropic's Messages): a request decoded
// into the dialect-neutral messages ctxproxy counts and cuts, its member
// names read by the backend's rules (Decode, KeyRules); the request
// written back with only what changed, every other byte as sent
// (Request.Rebuild, Payload); raw prompts (DecodeRaw); errors in each
// dialect's shape (Error, WriteError); and the tap that reads an answer's
// counts and text as it streams past to the client (NewTap, Reply).
//
// JSON is read with internal/jsonscan, which validates a body once and
// hands out sub-slices of it, and written by splicing: decoding a 100 KB
// chat into maps and encoding it again costs about 1 ms, and would reorder
// keys and reformat numbers the client sent.
package wire
