# idemflow: one static binary for every production role (serve, worker,
# gateway, migrate, ...). -tags nodev leaves out the development and
# proving tools (dev, temporal, postgres, chaos, bench, demo) and the
# embedded Temporal server: 52 MB instead of 225 MB (measured 2026-12-03;
# scripts/lint.sh fails if a go.temporal.io/server package creeps back).
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
# The cache mount keeps the Temporal server's compiled packages between
# builds: a cold build takes minutes, a warm one seconds.
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -tags nodev -o /out/idemflow ./cmd/idemflow

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/idemflow /usr/local/bin/idemflow
USER nonroot
ENTRYPOINT ["/usr/local/bin/idemflow"]
