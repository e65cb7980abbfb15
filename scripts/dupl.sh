#!/usr/bin/env bash
# Copied code, found by github.com/mibk/dupl (syntax trees, not text) in
# the non-test Go files outside the test harnesses (testkit/, e2e/):
#   - any two stretches of ANY tokens or more alike fail (default 100);
#   - any two stretches of CROSS tokens or more alike in different
#     directories fail (default 35): code two packages share belongs in
#     one place. At 35 it finds the shapes that were declared twice
#     (an admin row and the store's index entry, field by field); at 30
#     it also matches structs of unrelated scalar fields (a num_ctx
#     decision, a store's counters, a model's status), which are alike
#     in shape only.
# Stretches alike inside one package under ANY tokens are reported by
# `dupl -t 50` and left to review: a few lines of parallel code for two
# dialects read better than a helper with a switch.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"
ANY=${ANY:-100}
CROSS=${CROSS:-35}
command -v dupl >/dev/null 2>&1 || go install github.com/mibk/dupl@v1.1.0

files=$(find . -name '*.go' ! -name '*_test.go' \
  ! -path './.git/*' ! -path '*/testdata/*' ! -path '*/node_modules/*' \
  ! -path './testkit/*' ! -path './e2e/*' | sort)

fail=0
any=$(echo "$files" | dupl -files -t "$ANY" -plumbing)
if [ -n "$any" ]; then
  echo "dupl: stretches of $ANY tokens or more alike:"
  echo "$any"
  fail=1
fi
# -plumbing prints "a.go:1-9: duplicate of b.go:3-11", once from each side.
cross=$(echo "$files" | dupl -files -t "$CROSS" -plumbing |
  awk '{a=$1; b=$4; sub(/:.*/, "", a); sub(/:.*/, "", b);
        da=a; db=b; sub(/\/[^\/]*$/, "", da); sub(/\/[^\/]*$/, "", db);
        if (da != db) print}')
if [ -n "$cross" ]; then
  echo "dupl: stretches of $CROSS tokens or more alike in two packages:"
  echo "$cross"
  fail=1
fi
if [ "$fail" = 0 ]; then
  echo "dupl: no copies ($ANY tokens anywhere, $CROSS across packages)"
fi
exit "$fail"
