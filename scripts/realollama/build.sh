#!/usr/bin/env bash
# Builds a real Ollama server (CPU only) for the end-to-end tests and the
# red-team probes; start.sh runs it once per version and caches it.
#
#   scripts/realollama/build.sh OUTDIR [VERSION]     # OUTDIR/bin/ollama
#
# Before 0.30 (v0.17.4, the default): Ollama and its llama.cpp runner are
# one Go binary, from the Go module proxy (about three minutes on two
# cores). From 0.30 Ollama runs models in llama.cpp's llama-server, which
# the module does not carry: it is built from the llama.cpp source that
# the npm package node-llama-cpp ships as a git bundle, patched and built
# by Ollama's own llama/server/CMakeLists.txt (about 7 minutes on two
# cores), and put in OUTDIR/lib/ollama, where OUTDIR/bin/ollama looks for
# it. NODE_LLAMA_CPP names the package's version (3.22.1 carries
# llama.cpp as of 2026-09-28, close to the b10969 Ollama 0.34.3 pins).
set -euo pipefail
out=${1:?usage: build.sh OUTDIR [VERSION]}
ver=${2:-v0.17.4}
nlc=${NODE_LLAMA_CPP:-3.22.1}
mkdir -p "$out/bin"
ldflags="-s -w -X github.com/ollama/ollama/version.Version=${ver#v}"

case "$ver" in
v0.[0-9].* | v0.[12][0-9].*)
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
    go install -ldflags "$ldflags" "github.com/ollama/ollama@$ver"
  ;;
*)
  command -v cmake >/dev/null || { apt-get update -qq && apt-get install -y -qq cmake >/dev/null; }
  command -v git >/dev/null || { apt-get update -qq && apt-get install -y -qq git >/dev/null; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  GOFLAGS=-buildvcs=false GOBIN="$out/bin" go install -ldflags "$ldflags" "github.com/ollama/ollama@$ver"
  # Ollama's source, for its llama-server build files and patch.
  src=$(cd "$work" && go mod init tmp >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go mod download -json "github.com/ollama/ollama@$ver" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  (cd "$work" && npm pack --silent "node-llama-cpp@$nlc" >/dev/null && tar -xzf node-llama-cpp-*.tgz package/llama/gitRelease.bundle)
  git clone -q "$work/package/llama/gitRelease.bundle" "$work/llama.cpp"
  cmake -S "$src/llama/server" -B "$work/build" -DFETCHCONTENT_SOURCE_DIR_LLAMA_CPP="$work/llama.cpp" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF >/dev/null
  cmake --build "$work/build" -j"$(nproc)" --target llama-server >/dev/null
  mkdir -p "$out/lib/ollama"
  cp -a "$work/build/bin/." "$out/lib/ollama/"
  ;;
esac
"$out/bin/ollama" --version 2>&1 | tail -1 || true
# start.sh builds again until this is here: a build cut short is no build.
touch "$out/.built"
