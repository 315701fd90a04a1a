#!/usr/bin/env bash
# Runs idemflow's linters and whole test suite against a real PostgreSQL and
# the embedded Temporal server. On a fresh machine it installs PostgreSQL
# first; it starts a private server of its own in .idemflow-test/ (port
# 54339), whatever else runs, and stops it afterwards.
# Extra arguments go to 'go test' (e.g. scripts/test.sh -run Gateway -v).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

need_go
ensure_python3
ensure_chromium
ensure_pgbouncer
ensure_patroni
if [ -z "${IDEMFLOW_TEST_DATABASE_URL:-}" ]; then
  ensure_postgres_binaries
fi

echo "== build" >&2
build_idemflow
build_typescript
build_python
build_schemathesis
build_kube_tools
build_hydra

if [ -z "${IDEMFLOW_TEST_DATABASE_URL:-}" ]; then
  # A private server of the tests' own, never the machine's on 5432: a
  # user's server (max_connections 100 by default, a dev stack on it) must
  # not decide whether the tests pass. It allows 300 connections.
  IDEMFLOW_TEST_DATABASE_URL=$(bin/idemflow postgres --data-dir .idemflow-test --private --port 54339)
  export IDEMFLOW_TEST_DATABASE_URL
  trap 'bin/idemflow postgres --data-dir .idemflow-test --stop >/dev/null 2>&1 || true' EXIT
fi

echo "== gofmt, go vet, staticcheck, workflowcheck" >&2
bash scripts/lint.sh

echo "== go test" >&2
# A package's binary may run 30 minutes: internal/cli's suite (every
# command line the docs show, chaos, the soak and its control, processes
# started in every order) took 20 on two cores, past the old bound.
go test -count=1 -timeout 30m "$@" ./...

echo "== go test, a team's own module (examples/refund_request)" >&2
# A module of its own that depends on idemflow as the README tells a team
# to (a replace of the checkout): a private import, or a step the README
# does not give, fails here.
(cd examples/refund_request && go test -count=1 -timeout 10m ./...)
