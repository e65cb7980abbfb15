#!/usr/bin/env bash
# Validate ctxproxy's Docker files where Docker cannot run (CI runs this).
#
# scripts/composecheck loads docker-compose.yml (and docker-compose.cpu.yml
# over it) with compose-go, the loader behind `docker compose config`: the
# compose-spec JSON schema, interpolation, profiles and override merging;
# then it checks the structure the stack relies on and the Dockerfile's
# shape. The compose config ctxproxy mounts must pass check-config. Where the
# compose plugin is installed, `docker compose config` runs as well.
set -euo pipefail
cd "$(dirname "$0")/.."

(cd scripts/composecheck && go vet ./... && go test ./... && go run . -dir ../..)
go run ./cmd/ctxproxy check-config --config deploy/ctxproxy.yaml

if docker compose version >/dev/null 2>&1; then
  docker compose -f docker-compose.yml --profile redis --profile metrics config -q
  docker compose -f docker-compose.yml -f docker-compose.cpu.yml config -q
  docker compose -f docker-compose.yml -f docker-compose.replicas.yml config -q
  echo "check-compose: docker compose config: ok"
fi
