# idemflow: one static binary for every role (worker, gateway, migrate, ...).
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
# The cache mount keeps the Temporal server's compiled packages between
# builds: a cold build takes minutes, a warm one seconds.
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -o /out/idemflow ./cmd/idemflow

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/idemflow /usr/local/bin/idemflow
USER nonroot
ENTRYPOINT ["/usr/local/bin/idemflow"]
