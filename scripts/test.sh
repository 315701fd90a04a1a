#!/usr/bin/env bash
# Runs idemflow's linters and whole test suite against a real PostgreSQL and
# the embedded Temporal server. On a fresh machine it installs PostgreSQL
# first; when no server is reachable on 127.0.0.1:5432 it starts a private
# one in .idemflow-test/ and stops it afterwards.
# Extra arguments go to 'go test' (e.g. scripts/test.sh -run Gateway -v).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

need_go
ensure_python3
ensure_chromium
if [ -z "${IDEMFLOW_TEST_DATABASE_URL:-}" ]; then
  ensure_postgres_installed
fi

echo "== build" >&2
build_idemflow
build_typescript

if [ -z "${IDEMFLOW_TEST_DATABASE_URL:-}" ]; then
  IDEMFLOW_TEST_DATABASE_URL=$(bin/idemflow postgres --data-dir .idemflow-test)
  export IDEMFLOW_TEST_DATABASE_URL
  if [ -d .idemflow-test/postgres ] && ! postgres_reachable 5432; then
    trap 'bin/idemflow postgres --data-dir .idemflow-test --stop >/dev/null 2>&1 || true' EXIT
  fi
fi

echo "== gofmt, go vet, staticcheck, workflowcheck" >&2
bash scripts/lint.sh

echo "== go test" >&2
go test -count=1 -timeout 20m "$@" ./...
