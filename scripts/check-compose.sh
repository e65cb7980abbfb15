#!/usr/bin/env bash
# Validate ctxproxy's Docker files where Docker cannot run (CI runs this).
#
# scripts/composecheck loads docker-compose.yml (and docker-compose.cpu.yml
# over it) with compose-go, the loader behind `docker compose config`: the
# compose-spec JSON schema, interpolation, profiles and override merging;
# then it checks the structure the stack relies on and the Dockerfile's
# shape; docker-compose.backends.yml (two Ollama servers behind one
# ctxproxy) is loaded on its own. The compose config ctxproxy mounts must
# pass check-config, with the backends stack's environment too. Where the
# compose plugin is installed, `docker compose config` runs as well.
set -euo pipefail
cd "$(dirname "$0")/.."

(cd scripts/composecheck && go vet ./... && go test ./... && go run . -dir ../..)
go run ./cmd/ctxproxy check-config --config deploy/ctxproxy.yaml
CTXPROXY_BACKENDS=a=http://ollama-a:11434,b=http://ollama-b:11434 CTXPROXY_BACKEND_ROUTING=sessions \
  CTXPROXY_CONTEXT_NUM_PARALLEL=4 go run ./cmd/ctxproxy check-config --config deploy/ctxproxy.yaml

if docker compose version >/dev/null 2>&1; then
  docker compose -f docker-compose.yml --profile redis --profile metrics config -q
  docker compose -f docker-compose.yml -f docker-compose.cpu.yml config -q
  docker compose -f docker-compose.yml -f docker-compose.replicas.yml config -q
  docker compose -f docker-compose.backends.yml config -q
  echo "check-compose: docker compose config: ok"
fi
