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
# {lock}'s pins without their hashes, for
#   pip install -c clients/python/{name} './clients/python[EXTRA]'
# ({doc}): an extra then installs the versions the tests ran with.
# tests/test_constraints.py holds this file to the lock.
"""

#: Each constraints file, the lock it is made from, and where its install
#: line is documented.
FILES = [
    ("constraints.txt", "requirements.lock", "docs/agents/"),
    ("constraints-crewai.txt", "requirements-crewai.lock", "docs/agents/crewai.md"),
    ("constraints-strands.txt", "requirements-strands.lock", "docs/agents/strands.md"),
]


def expected(name: str, lock: str, doc: str) -> str:
    pins = []
    for line in (ROOT / lock).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+==[^\s\\]+(?: ; [^\\]+?)?)\s*\\?$", line)
        if m:
            pins.append(m.group(1).strip())
    assert pins, f"{lock} pins nothing"
    return HEADER.format(lock=lock, name=name, doc=doc) + "\n".join(pins) + "\n"


def test_the_constraints_are_the_locks_pins() -> None:
    for name, lock, doc in FILES:
        want = expected(name, lock, doc)
        got = (ROOT / name).read_text()
        assert got == want, f"{name} is not {lock}'s pins; write it as:\n" + want
