"""Names for jobs and artifacts: stable, within GitHub's limits, and saying what they are.

Two kinds of name, with different rules:

- a **job id** is a key (``jobs.<id>``, a matrix entry's ``id``): ``[A-Za-z0-9_-]`` only,
  starting with a letter. Every other character becomes ``_``; an id longer than
  :data:`MAX_NAME` keeps its head and ends in 8 hex digits of the full id's sha256, so it
  stays unique and stable.
- a **display name** is what a person reads in the run's job list: package, platform,
  py, cu, torch and the shard, at most :data:`MAX_NAME` characters. When it would be
  longer, the package name (the only unbounded part) is shortened with ``...``.

Shard numbering follows :mod:`wheelkiln.cells`, which also names the shard archives and
their CI artifacts: job ids are 0-based like them (``...-1-of-4``), display names are
1-based like :func:`~wheelkiln.cells.shard_label` (the job named ``shard pkg ... 2/4`` is
the one whose gate error says ``shard 2/4``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from wheelkiln.cells import NO_CUDA, NO_TORCH, Cell, shard_label

MAX_NAME: Final = 100
"""GitHub shows job names up to this length; ids are kept to it too."""

_NOT_ID = re.compile(r"[^A-Za-z0-9_-]")
_ELLIPSIS: Final = "..."


def job_id(kind: str, cell_id: str, shard_index: int | None = None,
           shard_count: int | None = None) -> str:
    """A stable job id: ``<kind>-<cell>``, and for a shard ``-<i>-of-<N>`` after it
    (``link-<cell>``, ``build-<cell>``)."""
    raw = f"{kind}-{cell_id}"
    if shard_index is not None and shard_count is not None:
        raw += f"-{shard_index}-of-{shard_count}"
    cleaned = _NOT_ID.sub("_", raw)
    if len(cleaned) <= MAX_NAME:
        return cleaned
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{cleaned[: MAX_NAME - 9]}-{digest}"


def display_name(kind: str, cell: Cell, shard_index: int | None = None,
                 shard_count: int | None = None) -> str:
    """``shard flash-attn linux-x86_64 py3.11 cu13.0 torch2.9 4/8`` for index 3 (at most
    100 characters)."""
    tail = [cell.platform, f"py{cell.python}"]
    if cell.cuda != NO_CUDA:
        tail.append(f"cu{cell.cuda}")
    if cell.torch != NO_TORCH:
        tail.append(f"torch{cell.torch}")
    if shard_index is not None and shard_count is not None:
        tail.append(shard_label(shard_index, shard_count).removeprefix("shard "))
    suffix = " " + " ".join(tail)
    package = cell.package
    room = MAX_NAME - len(kind) - 1 - len(suffix)
    if len(package) > room:
        package = package[: max(room - len(_ELLIPSIS), 1)] + _ELLIPSIS
    name = f"{kind} {package}{suffix}"
    return name[:MAX_NAME]


def wheel_artifact(cell_id: str) -> str:
    """The CI artifact holding a cell's wheel and build record."""
    return f"wheel-{cell_id}"
