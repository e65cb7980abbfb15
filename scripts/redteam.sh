#!/usr/bin/env bash
# The red-team probes, replayed against the built ctxproxy: in front of a
# real Ollama (scripts/realollama/start.sh) for the probes of replies,
# names, scopes, corrupt records, idle connections, CORS and the profiler
# (scripts/redteam), and in front of the fake backend for the memory budget
# under 16 bodies of 30 MB at once (scripts/limits.sh, peak at most
# 768 MiB). Loopback only. PULLS sets how many "ollama pull"s go through.
#
#   scripts/redteam.sh              # 300 pulls, a few minutes
#   PULLS=40 scripts/redteam.sh     # the short version CI runs
set -euo pipefail
cd "$(dirname "$0")/.."
PULLS=${PULLS:-300}
tmp=$(mktemp -d)
pgid=""
trap '[ -n "$pgid" ] && kill -TERM -- -"$pgid" 2>/dev/null; rm -rf "$tmp"' EXIT
go build -o "$tmp/ctxproxy" ./cmd/ctxproxy
go build -o "$tmp/redteam" ./scripts/redteam
port=$(( 20000 + RANDOM % 20000 ))
eval "$(scripts/realollama/start.sh "$port" "$tmp/ollama")"
pgid=$OLLAMA_PGID
"$tmp/redteam" -ctxproxy "$tmp/ctxproxy" -ollama "$OLLAMA_URL" -ollama-bin "$OLLAMA_BIN" -pulls "$PULLS"
BODIES=16 SIZE=30 SLOW=0 HOLD=1s MAX_RSS_MIB=768 PROXY_PORT=11633 BACKEND_PORT=11632 scripts/limits.sh
