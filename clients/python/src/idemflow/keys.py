"""The one derivation of a key from a durable identity, shared with the Go
and TypeScript clients through clients/testdata/keys.json."""

from __future__ import annotations

import base64
import hashlib

__all__ = ["derive_key"]


def derive_key(scheme: str, *parts: str) -> str:
    """The key of the identity named by parts (a framework's thread,
    namespace and call IDs, and the tool's name): the same parts give the
    same key in any process and any language, other parts another key.
    47 characters, within idemflow's rules."""
    h = hashlib.sha256()
    for p in (scheme, *parts):
        h.update(p.encode("utf-8"))
        h.update(b"\0")
    digest = base64.urlsafe_b64encode(h.digest()).decode("ascii").rstrip("=")
    return f"{scheme}_{digest[:42]}"
