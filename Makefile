# ctxproxy's make targets. `go test -race ./...` stays the everyday suite;
# these are the ones that need more than Go.

.PHONY: e2e

# The end-to-end suite against a real Ollama (e2e/README.md). The first run
# on a fresh machine builds Ollama (several minutes, cached in
# ~/.cache/realollama), hence the long timeout. CI=1 turns a missing real
# Ollama into a failure instead of a skip.
e2e:
	go test -tags e2e -count=1 -timeout 30m -v ./e2e/
