#!/usr/bin/env bash
# gofmt, go vet, staticcheck and Temporal's workflowcheck (determinism of
# workflow code). The two analysers run from their own modules, pinned, so
# they never change idemflow's dependency versions. Then ruff and mypy
# (strict) on the Python package, from its locked virtual environment
# (build_python makes it; scripts/test.sh runs that first).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_go
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.idemflow*'))
[ -z "$unformatted" ] || die "gofmt would change: $unformatted"
go vet ./...
# The production image's build: no embedded Temporal server, and none of
# the tools that drive a stack (dev, chaos, bench, the demo).
go vet -tags nodev ./internal/cli
nodev_bin=$(mktemp)
go build -tags nodev -o "$nodev_bin" ./cmd/idemflow
# A development command in that build says where it went, not "unknown".
nodev_dev=$("$nodev_bin" dev 2>&1 || true)
rm -f "$nodev_bin"
case "$nodev_dev" in
  *"left out of this production build"*) ;;
  *) die "the production build answers 'dev' without saying it was left out: $nodev_dev" ;;
esac
tooling=$(go list -deps -tags nodev ./cmd/idemflow | grep -E '^go\.temporal\.io/server|/internal/tooling/(devserver|chaos|bench|demo)' || true)
[ -z "$tooling" ] || die "the production build (-tags nodev) holds $(echo "$tooling" | wc -l) packages it must not, e.g. $(echo "$tooling" | head -3 | tr '\n' ' ')"
# No arrow runs back up: idemflow's tooling does not depend on the public
# test kit, which is built on what lies below both.
back=$(go list -deps ./internal/tooling/... | grep '/idemflow/idemflowtest' || true)
[ -z "$back" ] || die "internal/tooling depends on the public test kit: $(echo "$back" | tr '\n' ' ')"
# Built-ins are plug-ins: outside internal/ops/, no product file names a
# built-in's route or, in SQL, its table (what internal/ops/*/openapi.json
# and internal/ops/*/migrations declare). Tests, test data, docs, clients
# and examples may.
builtin_routes=$(cat internal/ops/*/openapi.json | grep -oE '^  "/v1/[a-z_]+' | tr -d ' "' | sort -u | paste -sd'|')
builtin_tables=$(cat internal/ops/*/migrations/*.sql | grep -oiE 'CREATE TABLE IF NOT EXISTS [a-z_]+' | awk '{print $6}' | sort -u | paste -sd'|')
[ -n "$builtin_routes" ] && [ -n "$builtin_tables" ] || die "found no built-in routes or tables under internal/ops"
named=$(git ls-files '*.go' '*.sql' '*.json' '*.py' '*.yaml' '*.yml' '*.ts' | grep -vE '^(internal/ops/|clients/|examples/|docs/)|_test\.go$|/testdata/|(^|/)tests?/' |
  xargs grep -nE "($builtin_routes)\b|\b(FROM|INTO|JOIN|UPDATE|TABLE|EXISTS|REFERENCES)\s+($builtin_tables)\b" || true)
[ -z "$named" ] || die "outside internal/ops/, a file names a built-in's route or table: $named"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
go run go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0 ./...
# A team's own module, beside idemflow's.
(cd examples/refund_request && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...)
# Go agent frameworks' integrations, each a module of its own.
for m in clients/go/*/go.mod; do
  (cd "$(dirname "$m")" && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...)
done
[ -x clients/python/.venv/bin/mypy ] || die "clients/python/.venv is missing: run scripts/test.sh, or (. scripts/lib.sh; build_python)"
[ -x clients/python/.venv-crewai/bin/mypy ] || die "clients/python/.venv-crewai is missing: run scripts/test.sh, or (. scripts/lib.sh; build_python)"
[ -x clients/python/.venv-strands/bin/mypy ] || die "clients/python/.venv-strands is missing: run scripts/test.sh, or (. scripts/lib.sh; build_python)"
(
  cd clients/python
  .venv/bin/ruff check src tests ../../examples/python ../../internal/tooling/schemathesis
  .venv/bin/ruff format --check src tests ../../examples/python ../../internal/tooling/schemathesis
  # The CrewAI and Strands modules are checked in their own environments
  # (requirements-crewai.lock, requirements-strands.lock).
  .venv/bin/mypy src --exclude 'src/idemflow/(crewai|strands)\.py$'
  .venv-crewai/bin/mypy src/idemflow/crewai.py
  .venv-strands/bin/mypy src/idemflow/strands.py
)
echo "lint: clean" >&2
