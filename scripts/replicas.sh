#!/usr/bin/env bash
# Three replicas of the built ctxproxy on one real redis-server, in front of
# the fake Ollama (scripts/replicas): back-to-back turns round robin, a
# replica killed by SIGKILL mid-run, concurrent turns on one session,
# summaries against the same chat on one replica, and calibrated counts
# alike on every replica. Loopback only; needs redis-server. About ten
# seconds.
#
#   scripts/replicas.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/ctxproxy" ./cmd/ctxproxy
go run ./scripts/replicas -ctxproxy "$tmp/ctxproxy" "$@"
