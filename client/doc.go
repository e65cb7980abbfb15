// Package client talks to a running ctxproxy: its admin API under
// /ctxproxy/ (sessions, snapshots, context size, status) with the adminapi
// package's types, and its chat routes, one streamed turn at a time
// (Ollama's NDJSON or OpenAI's SSE). ctxproxy's CLI and REPL use it; any
// Go program can.
package client
