# syntax=docker/dockerfile:1
# ctxproxy image: a multi-stage build into distroless, running as non-root.
#
#   docker build -t ctxproxy --build-arg VERSION=$(git describe --tags --always) .
#
# cgo stays on: ctxproxy reads live GPU memory through NVML, which it
# dlopens (libnvidia-ml.so.1) at run time. The NVIDIA container runtime
# mounts that library when the container is given a GPU (compose:
# capabilities [gpu, utility]); without one ctxproxy falls back to system
# memory and cgroup limits. Check the stack with scripts/check-compose.sh.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ctxproxy ./cmd/ctxproxy \
 && mkdir -p /out/data

# distroless/base has glibc (cgo, dlopen) and no shell or package manager;
# its nonroot user is uid 65532.
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/ctxproxy /usr/local/bin/ctxproxy
# /data holds sessions and snapshots. It must belong to the nonroot user
# before a volume is mounted there: a new named volume takes the owner of
# the directory it covers.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
WORKDIR /data
ENV CTXPROXY_LISTEN=0.0.0.0:11435 \
    CTXPROXY_SNAPSHOTS_DIR=/data
EXPOSE 11435
VOLUME ["/data"]
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s --retries=3 CMD ["/usr/local/bin/ctxproxy", "health"]
ENTRYPOINT ["/usr/local/bin/ctxproxy"]
CMD ["serve"]
