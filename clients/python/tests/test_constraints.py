"""constraints.txt is requirements.lock's pins without their hashes.

The documented install lines (docs/agents.md, this package's README) take
it with ``pip install -c``, so that an extra installs the versions the
tests ran with, not whatever PyPI has newest: ``[pydantic-ai]`` alone
gave pydantic-ai-slim 2.78.0 against the locked 2.68.0. The lock itself
cannot be the constraint: with hashes, pip checks every requirement's
hash, and refuses the package's own directory.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = """\
# requirements.lock's pins without their hashes, for
#   pip install -c clients/python/constraints.txt './clients/python[EXTRA]'
# (docs/agents.md): an extra then installs the versions the tests ran with.
# tests/test_constraints.py holds this file to the lock.
"""


def expected() -> str:
    pins = []
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+==[^\s\\]+(?: ; [^\\]+?)?)\s*\\?$", line)
        if m:
            pins.append(m.group(1).strip())
    assert pins, "requirements.lock pins nothing"
    return HEADER + "\n".join(pins) + "\n"


def test_the_constraints_are_the_locks_pins() -> None:
    want = expected()
    got = (ROOT / "constraints.txt").read_text()
    assert got == want, "constraints.txt is not requirements.lock's pins; write it as:\n" + want
