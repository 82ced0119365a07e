"""Commit ids: the one pattern every area and endpoint validates a SHA with."""
from __future__ import annotations

import re

SHA_RE = re.compile(r"^[0-9a-f]{40}$")


def is_sha(value: object) -> bool:
    return isinstance(value, str) and SHA_RE.match(value) is not None
