#!/usr/bin/env bash
# Every image size of every vision test against the real Ollama: each
# generated vision model (Gemma 3, Qwen 2.5 VL, Qwen 3 VL, Mistral 3,
# Llama 4, Llama 3.2 Vision, LFM2-VL, GLM-OCR, DeepSeek-OCR) costs its
# images what ctxproxy's rule says, straight to Ollama and through
# ctxproxy (TestRealOllama_*Vision; CI runs representative sizes). A
# test name pattern picks some instead of all:
#
#   scripts/vision.sh
#   scripts/vision.sh 'Qwen25VL|Mistral3'
set -euo pipefail
cd "$(dirname "$0")/.."
CTXPROXY_E2E_VISION=all exec go test -tags e2e -count=1 -timeout 60m \
	-run "TestRealOllama_(${1:-.*})Vision\$" -v ./e2e/
