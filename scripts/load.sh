#!/usr/bin/env bash
# Load test: wrk against the fake backend directly and through the built
# ctxproxy binary, on loopback only. Bounded: each run lasts DURATION.
#
#   scripts/load.sh                 # 10 connections, 10 s per run
#   CONNS=50 DURATION=20s scripts/load.sh
#
# Needs wrk (apt-get install wrk). Prints one summary line per run.
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${CONNS:-10}
DURATION=${DURATION:-10s}
BACKEND=127.0.0.1:${BACKEND_PORT:-11590}
PROXY=127.0.0.1:${PROXY_PORT:-11591}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

go build -o "$tmp/ctxproxy" ./cmd/ctxproxy
go build -o "$tmp/fakeserver" ./testkit/fakebackend/fakeserver
"$tmp/fakeserver" -listen "$BACKEND" &
"$tmp/ctxproxy" serve --listen "$PROXY" --backend "http://$BACKEND" --log-level error --log-format json 2>"$tmp/proxy.log" &
for _ in $(seq 50); do curl -sf "http://$PROXY/ctxproxy/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

# A 100-message, ~100 KB chat body (what a long conversation resends).
python3 - "$tmp/body.json" <<'PY'
import json, sys
msgs = [{"role": "system", "content": "You are a helpful assistant."}]
for i in range(100):
    msgs.append({"role": "user" if i % 2 == 0 else "assistant",
                 "content": ("message %d says something useful. " % i) * 30})
json.dump({"model": "llama3.1:8b", "stream": False, "messages": msgs}, open(sys.argv[1], "w"))
PY
cat > "$tmp/post.lua" <<LUA
local f = io.open("$tmp/body.json", "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
LUA
small='{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}'
cat > "$tmp/small.lua" <<LUA
wrk.method = "POST"
wrk.body = '$small'
wrk.headers["Content-Type"] = "application/json"
LUA

bench() { # name url script
  out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$3" "$2")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  printf '%-28s %10s req/s   p50 %8s   p99 %8s\n' "$1" "$rps" "$p50" "$p99"
}
echo "wrk -t2 -c$CONNS -d$DURATION, fake Ollama on $BACKEND, ctxproxy on $PROXY"
bench "direct, small chat" "http://$BACKEND/api/chat" "$tmp/small.lua"
bench "ctxproxy, small chat" "http://$PROXY/api/chat" "$tmp/small.lua"
bench "direct, 100 KB chat" "http://$BACKEND/api/chat" "$tmp/post.lua"
bench "ctxproxy, 100 KB chat" "http://$PROXY/api/chat" "$tmp/post.lua"
