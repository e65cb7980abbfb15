#!/usr/bin/env bash
# The long kill -9 test of the session store: a writer appending turns,
# replacing conversations and saving snapshots is killed with SIGKILL
# ROUNDS times (default 1,000); after each kill the store must reopen
# with no corrupt record and every acknowledged change kept. `go test`
# runs the same test with 100 kills (30 with -short).
#
#   scripts/killtest.sh            # 1,000 kills
#   ROUNDS=5000 scripts/killtest.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CTXPROXY_KILL_ROUNDS="${ROUNDS:-1000}" exec go test -count=1 -timeout 60m -v \
  -run '^TestAtomicWriteSurvivesKill9$' ./snapshots/
