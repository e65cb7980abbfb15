// Package repl is ctxproxy's terminal side. Chat is "ctxproxy chat": a
// chat in the terminal through a running ctxproxy, with the context
// commands as slash commands. Commands runs those commands over the admin
// API for one session, for the chat and for "ctxproxy context" alike.
// Lines are edited, with a history file (DefaultHistory), when the input
// is a terminal, and read as they come from a pipe.
package repl
