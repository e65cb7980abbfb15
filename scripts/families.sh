#!/usr/bin/env bash
# Every generated model family against the real Ollama: one 32,000-token
# model per llama.cpp pre-tokenizer rule and per architecture Ollama's own
# engine runs, each counted on /api/chat (whole and streamed) and
# /v1/chat/completions and compared with prompt_eval_count
# (TestRealOllama_Families; CI runs the rows marked ci). About two minutes
# once Ollama is built. Arguments pick rows by name, architecture or
# pre-tokenizer instead of all of them:
#
#   scripts/families.sh
#   scripts/families.sh gemma3,falcon
set -euo pipefail
cd "$(dirname "$0")/.."
CTXPROXY_E2E_FAMILIES="${1:-all}" exec go test -tags e2e -count=1 -timeout 30m \
	-run 'TestRealOllama_Families$' -v ./e2e/
