#!/usr/bin/env bash
# Runs the idemflow stack on this machine: embedded Temporal and its Web UI,
# the worker and the HTTP gateway, with PostgreSQL from DATABASE_URL, a
# local server, or a private one it starts (installing PostgreSQL first on a
# fresh Debian/Ubuntu machine); then the demo agent plays the seed incident
# against it (IDEMFLOW_DEMO=0 skips that). Flags go to 'idemflow dev'.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

need_go
if [ -z "${DATABASE_URL:-}" ]; then
  ensure_postgres_installed
fi
build_idemflow
demo=--demo
[ "${IDEMFLOW_DEMO:-1}" = 0 ] && demo=
exec bin/idemflow dev $demo "$@"
