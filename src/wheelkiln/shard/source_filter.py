"""The source partition: delete out-of-slice sources from a shard's private tree.

For packages whose build discovers its sources by globbing (``glob("csrc/**/*.cu")`` in
setup.py) the shard deletes the files it does not own before the build starts, and the
seat wrapper stays a pure pass-through. The slice is decided by the same partition
function as the seat (``wheelkiln.shard.partition``), keyed by the path relative to the
tree. Stdlib only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wheelkiln.shard.partition import is_mine, tu_key


@dataclass(frozen=True)
class SourcePartitionResult:
    """What a source partition kept and deleted, as tree-relative POSIX keys, sorted."""

    kept: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def _matching_files(tree: Path, globs: Sequence[str]) -> list[Path]:
    matched: dict[str, Path] = {}
    for pattern in globs:
        if not pattern or Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise ValueError(
                f"source glob {pattern!r} must be a non-empty pattern relative to the "
                f"package tree (no absolute paths, no '..'), like 'csrc/**/*.cu'"
            )
        for path in tree.glob(pattern):
            if path.is_file() or path.is_symlink():
                matched[tu_key(path, tree)] = path
    return [matched[key] for key in sorted(matched)]


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
    :meth:`pathlib.Path.glob`. A symlink is removed, never its target.
    """
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1} ({count} shards)")
    tree = Path(tree)
    if not tree.is_dir():
        raise ValueError(f"source partition: {tree} is not a directory")
    kept: list[str] = []
    deleted: list[str] = []
    for path in _matching_files(tree, globs):
        key = tu_key(path, tree)
        if is_mine(key, index, count, partition_map):
            kept.append(key)
        else:
            path.unlink()
            deleted.append(key)
    return SourcePartitionResult(kept=kept, deleted=deleted)


def refuse_double_partition(
    *, shard_count: int, seat_active: bool, source_globs: Sequence[str]
) -> None:
    """Raise ValueError when the seat and the source partition would both act.

    Each mechanism gives a shard a 1/N slice. The two agree only when the build compiles
    every source from exactly the path the source filter saw, relative to the same root;
    a package root below the tree, sources copied into a build directory or renamed by
    a generator make the two slices independent, and then a shard compiles only the TUs
    both put in it: about 1/N² of the build, about 1/N over all N shards. Every shard
    still goes green (stubs link), and the loss shows only as misses in the link job.
    """
    if not seat_active or not source_globs:
        return
    count = max(shard_count, 1)
    raise ValueError(
        f"both partitions are active for {count} shards: the seat wrapper "
        f"(KILN_SHARD_COUNT is set) and the source partition (globs "
        f"{list(source_globs)!r}). Each shard would compile about 1/{count * count} of "
        f"the TUs and the {count} shards together only about 1/{count} of the build, "
        "while every shard still passes its gate. Use one mechanism: sharding.filter = "
        "'seat' without source globs, or 'source' with the wrapper as a pure "
        "pass-through (KILN_SHARD_COUNT unset)."
    )


def seat_active_in(environ: Mapping[str, str] | None = None) -> bool:
    """True when *environ* (default: this process's) configures the seat partition."""
    env = os.environ if environ is None else environ
    return bool(env.get("KILN_SHARD_COUNT", "").strip())
