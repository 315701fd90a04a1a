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
  if postgres_reachable 5432 || have_postgres_binaries; then
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

# ensure_python3 installs the distribution's python3 when it is missing: the
# Python agent example (examples/python) is tested against the real stack.
ensure_python3() {
  command -v python3 >/dev/null 2>&1 && return 0
  echo "python3 is not installed; installing the distribution's package..." >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  command -v apt-get >/dev/null 2>&1 || die "python3 is missing: install it with your package manager"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 >/dev/null
}

# ensure_chromium installs Debian's Chromium for the Web UI browser test
# (TestWebUIFindsAnIntentByItsKey) when it is missing: no browser is
# downloaded by the test itself.
ensure_chromium() {
  command -v chromium >/dev/null 2>&1 && return 0
  echo "chromium is not installed; installing the distribution's package (for the Web UI test)..." >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  command -v apt-get >/dev/null 2>&1 || die "chromium is missing: install it with your package manager (the Web UI test needs it)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
}

# build_idemflow builds the binary into bin/. The Go build cache makes every
# build after the first (which compiles the Temporal server, ~9 min on two
# cores) take seconds: never clean it.
build_idemflow() {
  mkdir -p bin
  go build -o bin/idemflow ./cmd/idemflow
}
