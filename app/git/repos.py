"""Repository names and URLs."""
from __future__ import annotations

import re
from pathlib import Path


def derive_name(url: str) -> str:
    """owner/name for GitHub-style URLs, else the last path component (without .git)."""
    match = re.search(r"github\.com[:/]+([^/]+)/([^/]+?)(?:\.git)?/?$", url)
    if match:
        return f"{match.group(1)}/{match.group(2)}"
    path = url[len("file://"):] if url.startswith("file://") else url
    name = Path(path.rstrip("/")).name
    return name[:-4] if name.endswith(".git") else name
