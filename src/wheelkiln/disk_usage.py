"""What the stores' list and prune commands read of a path: the bytes a directory tree
holds, and when a path last changed."""

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


def modified(path: Path) -> float:
    """*path*'s own modification time (a symlink's, not its target's); 0 when it is gone."""
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0
