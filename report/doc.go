// Package report renders what ctxproxy reports to people as text: the context
// status (model, tokens, memory, KV cache, snapshots, auto-compression), a
// session's stats, memory stats, the proxy's status, and the session and
// snapshot tables. The CLI ("ctxproxy context"), the REPL ("ctxproxy chat") and the in-band commands a chat
// client sends (/context, /stats) all render through it, so a field looks
// the same wherever it is shown.
//
// Text from the network (session ids, model names, metadata) is cleaned
// of control characters so that none can drive a terminal.
package report
