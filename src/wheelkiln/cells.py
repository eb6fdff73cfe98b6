"""Cells and their names: the shared nouns every part of kiln speaks of (pure, a leaf).

A **cell** is one point of a recipe's build matrix; :mod:`wheelkiln.matrix.cells` expands
and selects them. This module imports nothing else from wheelkiln, so the matrix, the
shard and link jobs, the executors and the bench can all use it without importing
each other.

It is also the one home of the names a sharded build hands between jobs. What machines
read is 0-based (``--index 1``, the archive of shard index 1 of 4), what people read is
1-based (:func:`shard_label` says ``shard 2/4`` for it), so a CI job named ``... 2/4``
is the one whose gate error says ``shard 2/4``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NO_CUDA = "none"
NO_TORCH = "none"


@dataclass(frozen=True, order=True)
class Cell:
    """One point of the matrix: package × python × cuda lane × torch × platform."""

    package: str
    python: str
    cuda: str
    torch: str
    platform: str
    arch_list: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        parts = [self.package, f"py{self.python}"]
        if self.cuda != NO_CUDA:
            parts.append(f"cu{self.cuda}")
        if self.torch != NO_TORCH:
            parts.append(f"torch{self.torch}")
        parts.append(self.platform)
        return "-".join(parts)

    def axes(self) -> dict[str, str]:
        return {
            "python": self.python,
            "cuda": self.cuda,
            "torch": self.torch,
            "platform": self.platform,
        }


def shard_label(index: int, count: int) -> str:
    """``shard 2/4`` for index 1 of 4: 1-based, for people."""
    return f"shard {index + 1}/{count}"


# --------------------------------------------------------------------------- shard files
# One shard's files share the stem ``<cell>-shard-<i>-of-<N>`` (0-based i): its job
# directory, its cache archive, its record. The link job finds archives by this stem.


def shard_job_suffix(index: int, count: int) -> str:
    """``shard-1-of-4``: the shard's part of its job directory's name and file stem."""
    return f"shard-{index}-of-{count}"


def shard_stem(cell_id: str, index: int, count: int) -> str:
    """``<cell>-shard-<i>-of-<N>``: the stem of every file one shard job writes."""
    return f"{cell_id}-{shard_job_suffix(index, count)}"


def shard_archive(cell_id: str, index: int, count: int) -> str:
    """The cache archive ``kiln shard`` writes: ``<cell>-shard-<i>-of-<N>.tar.gz``."""
    return shard_stem(cell_id, index, count) + ".tar.gz"


def shard_record(cell_id: str, index: int, count: int) -> str:
    """The shard's build record beside its archive: ``<cell>-shard-<i>-of-<N>.shard.json``."""
    return shard_stem(cell_id, index, count) + ".shard.json"


def shard_handoff(cell_id: str, index: int, count: int) -> str:
    """What a shard that hands over through remote storage writes instead of its archive
    (its manifest and wrapper log): ``<cell>-shard-<i>-of-<N>.handoff.json``."""
    return shard_stem(cell_id, index, count) + HANDOFF_SUFFIX


HANDOFF_SUFFIX = ".handoff.json"
SHARD_ARCHIVE_FORM = "CELL-shard-I-of-N.tar.gz"
"""How an archive's name reads, for messages."""
SHARD_ARCHIVE_GLOB = "*-shard-*-of-*.tar.gz"
"""Every shard archive, of any cell."""
_SHARD_ARCHIVE = re.compile(r"^(?P<cell>.+)-shard-(?P<index>\d+)-of-(?P<count>\d+)\.tar\.gz$")


def parse_shard_archive(name: str) -> tuple[str, int, int] | None:
    """``(cell id, index, count)`` from an archive's file name; None when it is not one."""
    match = _SHARD_ARCHIVE.match(name)
    if match is None:
        return None
    return match["cell"], int(match["index"]), int(match["count"])


def parse_shard_handoff(name: str) -> tuple[str, int, int] | None:
    """``(cell id, index, count)`` from a handoff file's name; None when it is not one."""
    if not name.endswith(HANDOFF_SUFFIX):
        return None
    return parse_shard_archive(name.removesuffix(HANDOFF_SUFFIX) + ".tar.gz")


def shard_artifact(cell_id: str, index: int, count: int) -> str:
    """The CI artifact holding one shard's archive: ``shard-<cell>-<i>-of-<N>``."""
    return f"shard-{cell_id}-{index}-of-{count}"


def shard_artifact_pattern(cell_id: str, count: int) -> str:
    """The download pattern a link job uses to fetch every shard of its cell."""
    return f"shard-{cell_id}-*-of-{count}"
