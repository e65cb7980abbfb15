#!/usr/bin/env bash
# Starts a real Ollama server on loopback with two tiny generated models,
# for the end-to-end tests and the red-team probes:
#
#   eval "$(scripts/realollama/start.sh 11500)"   # OLLAMA_URL, OLLAMA_PGID, OLLAMA_LOG, OLLAMA_MODELS
#   ...
#   kill -TERM -- -"$OLLAMA_PGID"                  # serve and its runners
#
# Models: "tiny" (a ChatML template) and "tiny-tools" (a template that takes
# tools, tool calls and tool results), both a 2-layer llama with random
# weights, a byte-level BPE vocabulary of 276 tokens and an 8192-token
# window, stopping after 16 output tokens. Their text is printable noise:
# they test plumbing, never answers. The first run builds Ollama (build.sh)
# into $REALOLLAMA_CACHE (default ~/.cache/realollama); REALOLLAMA_VERSION
# picks it (v0.17.4 by default; v0.34.3 is the llama-server era).
#
#   scripts/realollama/start.sh PORT [WORKDIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
port=${1:?usage: start.sh PORT [WORKDIR]}
work=${2:-$(mktemp -d)}
ver=${REALOLLAMA_VERSION:-v0.17.4}
cache=${REALOLLAMA_CACHE:-$HOME/.cache/realollama}
bin=$cache/$ver/bin/ollama

[ -x "$bin" ] && [ -e "$cache/$ver/.built" ] || "$here/build.sh" "$cache/$ver" "$ver" >&2
mkdir -p "$work/models"
(cd "$repo" && GOFLAGS=-buildvcs=false go run ./scripts/realollama/mkmodel -o "$work/tiny.gguf") >&2
cat > "$work/Modelfile.tiny" <<'MF'
FROM ./tiny.gguf
TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""
PARAMETER stop <|im_end|>
PARAMETER num_predict 16
MF
cat > "$work/Modelfile.tiny-tools" <<'MF'
FROM ./tiny.gguf
TEMPLATE """{{- if .Tools }}<|im_start|>system
tools:{{ range .Tools }} {{ .Function.Name }}{{ end }}<|im_end|>
{{ end }}{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}{{ range .ToolCalls }} call:{{ .Function.Name }}{{ end }}<|im_end|>
{{ end }}<|im_start|>assistant
"""
PARAMETER stop <|im_end|>
PARAMETER num_predict 16
MF

export OLLAMA_HOST=127.0.0.1:$port OLLAMA_MODELS=$work/models
setsid "$bin" serve >"$work/serve.log" 2>&1 </dev/null &
pgid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/api/version" >/dev/null 2>&1 && break
  sleep 0.1
done
if ! curl -sf "http://127.0.0.1:$port/api/version" >/dev/null; then
  echo "ollama did not start; see $work/serve.log" >&2
  kill -TERM -- -"$pgid" 2>/dev/null || true
  exit 1
fi
(cd "$work" && "$bin" create tiny -f Modelfile.tiny >/dev/null && "$bin" create tiny-tools -f Modelfile.tiny-tools >/dev/null)
echo "OLLAMA_URL=http://127.0.0.1:$port"
echo "OLLAMA_PGID=$pgid"
echo "OLLAMA_LOG=$work/serve.log"
echo "OLLAMA_MODELS=$work/models"
echo "OLLAMA_BIN=$bin"
