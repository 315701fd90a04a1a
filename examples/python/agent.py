#!/usr/bin/env python3
"""An idemflow agent in plain Python, on the idemflow package
(clients/python): a command that creates a ticket and cannot lose its key.

The one thing an agent must get right is the key: make it ONCE per intent,
store it before the first call, and send the SAME key on every retry, also
after the agent itself is killed and restarted. idemflow.SQLiteStore keeps
the intents, and Client.run sends one until it has a final answer, by the
rules every idemflow client shares (README, "Agents").

    pip install ./clients/python    # or: scripts/test.sh's clients/python/.venv
    python agent.py --url http://127.0.0.1:8080 --token "$TOKEN" \\
        ticket --id step-1 --customer c-1 --title "Printer on fire"

Run it again with the same --id (after a crash, say): it resumes the same
intent with the same key, and prints the first answer. The intents are kept
in .idemflow/intents.db under the working directory (--db to choose).

After a 400 (or 413, 415) nothing was recorded, so running it again with the
same --id and corrected arguments sends them under the same key. Any other
change under a used --id is refused: use a new --id for a new intent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import idemflow


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="An idemflow agent that cannot lose its key.")
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--db", default=os.path.join(".idemflow", "intents.db"), help="the SQLite file that keeps the intents (default: .idemflow/intents.db)")
    p.add_argument("--attempt-timeout", type=float, default=10.0)
    sub = p.add_subparsers(dest="kind", required=True)
    t = sub.add_parser("ticket", help="create a support ticket")
    t.add_argument("--id", required=True, help="this intent's own name: the same id resumes it")
    t.add_argument("--customer", required=True)
    t.add_argument("--title", required=True)
    t.add_argument("--priority", default="normal")
    args = p.parse_args(argv)

    body = {"customer_id": args.customer, "title": args.title, "priority": args.priority}
    with idemflow.SQLiteStore(args.db) as store:
        try:
            intent = store.open(args.id, "POST", "/v1/tickets", body)
        except idemflow.IntentMismatchError as e:
            print(f"refused: {e}", flush=True)
            return 2
        if intent.revised:
            print(f"revising intent {args.id} key={intent.key}: its last answer recorded nothing ({intent.revised})", flush=True)
        else:
            print(f"{'resuming' if intent.resumed else 'new'} intent {args.id} key={intent.key}", flush=True)

        def attempt(n: int, i: idemflow.Intent) -> None:
            print(f"attempt {n} key={i.key}", flush=True)

        with idemflow.Client(args.url, args.token, attempt_timeout=args.attempt_timeout, on_attempt=attempt) as client:
            try:
                r = client.run(store, args.id, "POST", "/v1/tickets", body)
            except idemflow.ProblemError as e:
                print(f"rejected: HTTP {e.status}: {e}", flush=True)
                return 2
    print(f"done {r.status} {json.dumps(r.body, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
