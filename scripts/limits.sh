#!/usr/bin/env bash
# What ctxproxy's limits hold under load: BODIES chat requests of SIZE MB
# at once, then SLOW clients sending a byte every 2 s for HOLD; prints what
# each got and ctxproxy's peak memory (VmHWM). Loopback only, bounded.
#
#   scripts/limits.sh                              # 64 × 30 MB, 2000 slow clients, 30 s
#   BODIES=8 SIZE=8 SLOW=100 HOLD=15s scripts/limits.sh   # the short version CI runs
#   MAX_RSS_MIB=768 fails the run when ctxproxy's peak memory is over it.
set -euo pipefail
cd "$(dirname "$0")/.."
BODIES=${BODIES:-64}; SIZE=${SIZE:-30}; SLOW=${SLOW:-2000}; HOLD=${HOLD:-30s}
BACKEND=127.0.0.1:${BACKEND_PORT:-11592}
PROXY=127.0.0.1:${PROXY_PORT:-11593}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
ulimit -n 65536 2>/dev/null || true

go build -o "$tmp/ctxproxy" ./cmd/ctxproxy
go build -o "$tmp/fakeserver" ./testkit/fakebackend/fakeserver
go build -o "$tmp/limitsload" ./scripts/limitsload
"$tmp/fakeserver" -listen "$BACKEND" &
CTXPROXY_SNAPSHOTS_DIR="$tmp/data" "$tmp/ctxproxy" serve --listen "$PROXY" --backend "http://$BACKEND" \
  --log-level error --log-format json 2>"$tmp/proxy.log" &
pid=$!
for _ in $(seq 50); do curl -sf "http://$PROXY/ctxproxy/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
"$tmp/limitsload" -proxy "http://$PROXY" -bodies "$BODIES" -size "$SIZE" -slow "$SLOW" -hold "$HOLD"
peak=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' /proc/$pid/status)
echo "ctxproxy peak memory: $peak MiB (limits.body_memory ${CTXPROXY_LIMITS_BODY_MEMORY:-512MiB})"
if [ -n "${MAX_RSS_MIB:-}" ] && [ "$peak" -gt "$MAX_RSS_MIB" ]; then
  echo "FAIL: peak memory $peak MiB is over $MAX_RSS_MIB MiB"
  exit 1
fi
