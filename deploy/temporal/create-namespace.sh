#!/bin/sh
# Creates the namespace, or resets its retention, so that the retention is
# always the one configured here: past it Temporal forgets closed workflows
# and only PostgreSQL's constraints guard an intent.
set -eu
ns="${NAMESPACE:-default}"
retention="${RETENTION:-72h}"
until temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; do sleep 1; done
if temporal operator namespace describe --address "$TEMPORAL_ADDRESS" -n "$ns" >/dev/null 2>&1; then
  temporal operator namespace update --address "$TEMPORAL_ADDRESS" -n "$ns" --retention "$retention"
else
  temporal operator namespace create --address "$TEMPORAL_ADDRESS" -n "$ns" --retention "$retention"
fi
