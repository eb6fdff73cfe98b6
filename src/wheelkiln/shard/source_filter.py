"""The source partition: delete out-of-slice sources from a shard's private tree.

For packages whose build discovers its sources by globbing (``glob("csrc/**/*.cu")`` in
setup.py) the shard deletes the files it does not own before the build starts, and the
seat wrapper stays a pure pass-through. The slice is decided by the same partition
function as the seat (``wheelkiln.shard.partition``), keyed by the path relative to the
tree. Stdlib only.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wheelkiln.errors import SourceError
from wheelkiln.globs import glob_matches, glob_segments
from wheelkiln.shard.partition import is_mine


@dataclass(frozen=True)
class SourcePartitionResult:
    """What a source partition kept and deleted, as tree-relative POSIX keys, sorted."""

    kept: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def _glob_problem(pattern: str) -> str | None:
    if not pattern.strip():
        return "is empty"
    if pattern.startswith(("/", "\\")) or (len(pattern) > 1 and pattern[1] == ":"):
        return "is absolute"
    if ".." in re.split(r"[/\\]", pattern):
        return "contains '..'"
    return None


def _matching_files(tree: Path, globs: Sequence[str]) -> list[str]:
    """The tree-relative POSIX keys of the files under *tree* that match *globs*, sorted.

    The walk never follows a symlink to a directory: the tree is copied with its
    symlinks kept, and a glob such as ``dir/*/*.cpp`` that reached through one would
    name, and then delete, files outside the tree. A symlink to a file is listed as a
    file of its own (deleting it removes the link, not its target).
    """
    patterns = []
    for pattern in globs:
        problem = _glob_problem(pattern)
        if problem is not None:
            raise SourceError(
                f"source glob {pattern!r} {problem}: it must be a non-empty pattern relative "
                "to the package tree (no absolute paths, no '..'), like 'csrc/**/*.cu'",
                hint="Fix sharding.source_globs in the recipe.",
            )
        patterns.append(glob_segments(pattern))
    matched: list[str] = []
    for directory, _subdirectories, files in os.walk(tree, followlinks=False):
        relative = Path(directory).relative_to(tree).parts
        for name in files:
            parts = (*relative, name)
            if any(glob_matches(pattern, parts) for pattern in patterns):
                matched.append("/".join(parts))
    return sorted(matched)


def _unlink_inside(tree: Path, key: str) -> None:
    """Delete the file *key* names under *tree* (already resolved), after checking that
    the entry really lives there: its directory resolves under *tree* and it is not a
    directory. Only the entry is removed; a symlink's target is never touched."""
    path = tree / key
    parent = path.parent.resolve()
    if not parent.is_relative_to(tree):
        raise SourceError(
            f"Source partition: refusing to delete {path}: its directory resolves to "
            f"{parent}, outside the tree {tree}.",
            hint="Something changed the shard's tree during the partition; run the shard again.",
        )
    entry = parent / path.name
    if stat.S_ISDIR(entry.lstat().st_mode):
        raise SourceError(
            f"Source partition: refusing to delete {entry}: it is a directory.",
            hint="Something changed the shard's tree during the partition; run the shard again.",
        )
    entry.unlink()


def apply_source_partition(
    tree: Path,
    globs: Sequence[str],
    index: int,
    count: int,
    partition_map: Mapping[str, int] | None = None,
) -> SourcePartitionResult:
    """Delete the files under *tree* that match *globs* and that shard *index* of
    *count* does not own; files the globs do not match are never touched.

    A file is owned by the same rule as a TU in the seat wrapper: the partition key is
    its path relative to *tree* (POSIX separators), ``**`` works as in
    :meth:`pathlib.Path.glob`. Nothing outside *tree* is ever deleted: directory
    symlinks are not followed, every deleted path must resolve under the tree, and a
    symlink is removed, never its target.
    """
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1} ({count} shards)")
    tree = Path(tree)
    if not tree.is_dir():
        raise ValueError(f"source partition: {tree} is not a directory")
    tree = tree.resolve()
    kept: list[str] = []
    deleted: list[str] = []
    for key in _matching_files(tree, globs):
        if is_mine(key, index, count, partition_map):
            kept.append(key)
        else:
            _unlink_inside(tree, key)
            deleted.append(key)
    return SourcePartitionResult(kept=kept, deleted=deleted)
