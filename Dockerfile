# idemflow: one static binary for every production role (serve, worker,
# gateway, migrate, ...). -tags nodev leaves out the development and
# proving tools (dev, temporal, postgres, chaos, bench, demo) and the
# embedded Temporal server: 52 MB instead of 225 MB (measured 2026-12-03;
# scripts/lint.sh fails if a go.temporal.io/server package creeps back).
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# The golang image's GOPATH is /go: its module cache is /go/pkg/mod.
RUN --mount=type=cache,target=/go/pkg/mod go mod download
# .git comes along (see .dockerignore), so that the build stamps its
# revision and 'idemflow version' names it.
COPY . .
# The cache mounts keep the downloaded modules and the compiled packages
# between builds, so a rebuild after a code change compiles only what it
# touched.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -tags nodev -o /out/idemflow ./cmd/idemflow

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/idemflow /usr/local/bin/idemflow
USER nonroot
ENTRYPOINT ["/usr/local/bin/idemflow"]
