//go:build e2e

// Package e2e proves ctxproxy against a real Ollama server: it builds the
// ctxproxy binary, starts Ollama with two tiny generated models through
// scripts/realollama/start.sh, puts ctxproxy in front of it and asserts on
// what the real server reports (prompt_eval_count, load_duration, its debug
// log), not on what a fake believes a backend does.
//
// The tests sit behind the e2e build tag so that `go test ./...` stays fast:
//
//	make e2e    # go test -tags e2e -count=1 -v ./e2e/
//
// The first run on a fresh machine builds Ollama (a few minutes); later runs
// reuse the cache in $REALOLLAMA_CACHE (default ~/.cache/realollama). When
// Ollama cannot be built, the tests skip, unless CI is set, where they fail.
package e2e
