"""Files an integration's keys rest on, written so that a crash leaves
the old one or the new one."""

from __future__ import annotations

import os
from pathlib import Path


def write_durably(path: Path, text: str) -> None:
    """Replaces path with text so that a crash, of the process or the
    machine, leaves the old file or the new one, and the new one is on disk
    when this returns (as the TypeScript client's writeDurably): the keys
    of the calls about to act rest on it."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    # The rename is durable once the folder's entry is.
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
