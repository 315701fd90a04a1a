#!/usr/bin/env bash
# Runs Schemathesis against an idemflow gateway's served contract, with
# idemflow's own checks (internal/tooling/schemathesis/hooks.py) beside every
# built-in one. It installs Schemathesis from its lock first.
#
#   scripts/schemathesis.sh --url URL --token TOKEN [--token-b TOKEN] [--database-url URL]
#                           [--read-only] [--max-examples N] [--seed N] [-- schemathesis run flags]
#
# --token-b, a second tenant's token, enables the tenant-isolation check;
# --database-url (read access is enough) the nothing-recorded check. The
# other checks need only the gateway.
# --read-only sends nothing but GETs (examples, coverage and fuzzing of the
# reads, no stateful run): safe against a deployment that must not change.
# Without it the run creates tickets, orders and tool calls under the
# token's tenant, and calls the HTTP tools' downstreams.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

url="" token="" token_b="" database_url="" read_only=0 max_examples=50 seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --url) url=$2; shift 2 ;;
    --token) token=$2; shift 2 ;;
    --token-b) token_b=$2; shift 2 ;;
    --database-url) database_url=$2; shift 2 ;;
    --read-only) read_only=1; shift ;;
    --max-examples) max_examples=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument $1 (see the comment at the top of $0)" ;;
  esac
done
[ -n "$url" ] && [ -n "$token" ] || die "--url and --token are required"
url=${url%/}
seed=${seed:-$(( (RANDOM << 15) | RANDOM ))}

[ -x internal/tooling/schemathesis/.venv/bin/schemathesis ] || build_schemathesis

args=(run "$url/openapi.json" --checks all --max-examples "$max_examples" --seed "$seed" --workers 1
  --request-timeout 60 --header "Authorization: Bearer $token")
if [ "$read_only" = 1 ]; then
  args+=(--include-method GET --phases examples,coverage,fuzzing)
else
  args+=(--phases examples,coverage,fuzzing,stateful)
  export SCHEMATHESIS_HOOKS=hooks PYTHONPATH=. IDEMFLOW_URL="$url" IDEMFLOW_TOKEN_B="$token_b" DATABASE_URL="$database_url"
  export IDEMFLOW_RUN_ID="$seed"
fi
echo "schemathesis: seed $seed, $max_examples examples per operation$([ "$read_only" = 1 ] && echo ", read-only (GET)") (--seed $seed reproduces this run)" >&2
cd internal/tooling/schemathesis
NO_COLOR=1 exec .venv/bin/schemathesis "${args[@]}" "$@"
