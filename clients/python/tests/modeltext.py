"""The rule every client's tests hold the texts a model reads to
(clients/testdata/modeltexts.json): none, after a refusal or a pending
answer, invites the model to make the call again as a new one."""

from __future__ import annotations

import json
import pathlib
import re

RULE = json.loads((pathlib.Path(__file__).resolve().parents[2] / "testdata" / "modeltexts.json").read_text())
_SPLIT = re.compile(RULE["split"])
_INVITATIONS = [re.compile(p, re.IGNORECASE) for p in RULE["invitations"]]
_NEGATION = re.compile(RULE["negation"], re.IGNORECASE)
_SAME = re.compile(RULE["same"], re.IGNORECASE)


def invitation(text: str) -> str:
    """The first sentence of text that invites a new call, or ""."""
    for s in _SPLIT.split(text):
        if not s or _NEGATION.search(s) or _SAME.search(s):
            continue
        if any(p.search(s) for p in _INVITATIONS):
            return s
    return ""
