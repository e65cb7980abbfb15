#!/usr/bin/env bash
# Builds a real Ollama server (CPU only) from the Go module proxy, for the
# end-to-end tests and the red-team probes. About three minutes on two
# cores; start.sh runs it once and caches the binary.
#
#   scripts/realollama/build.sh OUTDIR [VERSION]     # OUTDIR/bin/ollama
set -euo pipefail
out=${1:?usage: build.sh OUTDIR [VERSION]}
ver=${2:-v0.17.4}
mkdir -p "$out/include/miniaudio"
# The module's zip leaves out llama.cpp's vendor/ directory. Its headers
# come from elsewhere: nlohmann/json and stb_image from Debian, and
# miniaudio.h from the Go module github.com/gen2brain/malgo, which ships it.
if [ ! -f /usr/include/nlohmann/json_fwd.hpp ] || [ ! -f /usr/include/stb/stb_image.h ]; then
  apt-get update -qq
  apt-get install -y -qq nlohmann-json3-dev libstb-dev >/dev/null
fi
malgo=$(cd "$out" && go mod download -json github.com/gen2brain/malgo@v0.11.24 | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
cp -f "$malgo/miniaudio.h" "$out/include/miniaudio/miniaudio.h"
CGO_CPPFLAGS="-I$out/include" GOFLAGS=-buildvcs=false GOBIN="$out/bin" \
  go install -ldflags "-s -w -X github.com/ollama/ollama/version.Version=${ver#v}" "github.com/ollama/ollama@$ver"
"$out/bin/ollama" --version 2>&1 | tail -1 || true
