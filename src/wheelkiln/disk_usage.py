"""How many bytes a directory tree holds, for the stores' list and prune commands."""

from __future__ import annotations

import os
from pathlib import Path


def tree_size(path: Path) -> int:
    """The bytes of every file under *path*; symlinks count as themselves, never
    followed, and a file that goes away while it is walked counts as nothing."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                continue
    return total
