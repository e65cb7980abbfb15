# syntax=docker/dockerfile:1
# ctxproxy: multi-stage build. cgo stays on so the NVIDIA probe can dlopen
# libnvidia-ml.so.1 at run time (the NVIDIA container runtime mounts it when
# the container is given a GPU); without a GPU ctxproxy falls back to
# system RAM and cgroup limits.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ctxproxy ./cmd/ctxproxy

# distroless base has glibc (for cgo and dlopen) and runs as non-root.
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/ctxproxy /usr/local/bin/ctxproxy
USER nonroot:nonroot
WORKDIR /data
ENV CTXPROXY_LISTEN=0.0.0.0:11435 \
    CTXPROXY_SNAPSHOTS_DIR=/data
EXPOSE 11435
HEALTHCHECK --interval=15s --timeout=3s --start-period=5s CMD ["/usr/local/bin/ctxproxy", "health"]
ENTRYPOINT ["/usr/local/bin/ctxproxy"]
CMD ["serve"]
