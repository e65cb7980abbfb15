#!/usr/bin/env bash
# Benchmark harness: ctxproxy against a bare httputil.ReverseProxy with Go's
# default transport, both in front of the fake backend, driven by wrk in
# interleaved rounds; prints one table of ratios ctxproxy/bare.
#
#   scripts/bench.sh                          # 5 rounds, 3 s per run (about 6 minutes)
#   ROUNDS=1 DURATION=1s STREAM=5 LATENCY=20 scripts/bench.sh   # the short check CI runs
#   scripts/bench.sh -scale 10,100,1000       # the scale curve (scale.go)
#   CTXPROXY_BIN=/tmp/old/ctxproxy scripts/bench.sh   # another build of ctxproxy
#
# Needs wrk (apt-get install wrk). Everything listens on loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "bench: needs wrk (apt-get install wrk)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# CTXPROXY_BIN measures a ctxproxy built elsewhere (another commit's, to
# compare before and after) against the same baseline.
if [ -n "${CTXPROXY_BIN:-}" ]; then
  mkdir -p "$tmp/bin" && cp "$CTXPROXY_BIN" "$tmp/bin/ctxproxy"
else
  go build -o "$tmp/bin/ctxproxy" ./cmd/ctxproxy
fi
go build -o "$tmp/bin/bare" ./scripts/bench/bare
go build -o "$tmp/bin/fakeserver" ./testkit/fakebackend/fakeserver
go build -o "$tmp/bin/bench" ./scripts/bench
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ {print $2}') GiB," \
  "$(go version | cut -d' ' -f3), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/bin/bench" -bin "$tmp/bin" -dir "$tmp" -rounds "${ROUNDS:-5}" -duration "${DURATION:-3s}" \
  -stream "${STREAM:-50}" -latency "${LATENCY:-300}" -conns "${CONNS:-10}" "$@"
