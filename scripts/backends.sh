#!/usr/bin/env bash
# ctxproxy's session routing over three real Ollama servers against round
# robin (scripts/backends, docs/backends.md): builds ctxproxy, starts the
# servers on loopback (the first run builds Ollama, as the e2e suite does),
# replays concurrent chat sessions through ctxproxy with each routing and
# prints a Markdown table. Flags go to scripts/backends:
#
#   scripts/backends.sh                    # 12 sessions × 20 turns (about 9 minutes on two cores)
#   scripts/backends.sh -sessions 36       # 36 sessions, 12 at a time (about 20 minutes)
#   scripts/backends.sh -kill -routing sessions       # a server SIGKILLed after turn 10 (about 4 minutes)
#   scripts/backends.sh -replicas 3 -routing sessions # three replicas on one redis-server (about 3 minutes)
#   REALOLLAMA_VERSION=v0.34.3 scripts/backends.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/ctxproxy" ./cmd/ctxproxy
go build -o "$tmp/backends" ./scripts/backends
"$tmp/backends" -ctxproxy "$tmp/ctxproxy" "$@"
