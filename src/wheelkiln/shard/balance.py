"""Cost-balanced partition maps from the compile times of an earlier sharded build.

The hash partition spreads TUs evenly by count, not by cost: with 26 TUs in 4 shards it
can hand one shard 11 and another 3, and when one family's TUs take minutes the slowest
shard sets the critical path. Every shard logs each compile's seconds, and every shard
archive carries that log, so a later run can place the TUs by cost: longest first, each
onto the shard with the least work so far (the LPT rule, within 4/3 of the optimum).
TUs that no log has timed keep their hash shard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wheelkiln.cells import SHARD_ARCHIVE_GLOB
from wheelkiln.errors import UsageError
from wheelkiln.shard.partition import shard_of
from wheelkiln.shard.wrapper_log import WRAPPER_LOG, parse_wrapper_log, read_wrapper_log

if TYPE_CHECKING:
    from wheelkiln.cache.archive import ArchiveLimits

TIMED_ACTIONS = ("compile", "ahead")
"""A TU compiled ahead (shard/ahead.py) is timed there; ninja's own call of it is a cache hit."""


def tu_costs(records: Iterable[Mapping[str, object]]) -> dict[str, float]:
    """Seconds per TU key from wrapper records (the slowest compile of each key)."""
    costs: dict[str, float] = {}
    for record in records:
        tu, seconds = record.get("tu"), record.get("seconds")
        if (
            record.get("action") in TIMED_ACTIONS
            and isinstance(tu, str)
            and isinstance(seconds, int | float)
        ):
            costs[tu] = max(costs.get(tu, 0.0), float(seconds))
    return costs


def read_costs(sources: Iterable[Path], limits: ArchiveLimits | None = None) -> dict[str, float]:
    """TU costs from wrapper logs, shard job directories, or shard archives.

    An archive is checked whole (members, sizes, manifest) before its log is read, and
    a log that is not one names the archive, the member and the line."""
    sources = list(sources)
    # Here: every job remembers its TUs' seconds (remember_seconds) after its build,
    # and the archive's manifest models cost that 25 ms to import.
    from wheelkiln.cache.archive import EXTRA_PREFIX, ArchiveLimits, member_label, open_member

    limits = limits or ArchiveLimits.resolve()
    records: list[Mapping[str, object]] = []
    for source in sources:
        if source.is_dir():
            for log in sorted(source.rglob(WRAPPER_LOG)):
                records.extend(read_wrapper_log(log))
            archives = sorted(source.rglob(SHARD_ARCHIVE_GLOB))
        elif source.name.endswith(".tar.gz"):
            archives = [source]
        else:
            records.extend(read_wrapper_log(source))
            archives = []
        for archive in archives:
            member = f"{EXTRA_PREFIX}/{WRAPPER_LOG}"
            with open_member(archive, member, limits) as handle:
                if handle is not None:
                    records.extend(parse_wrapper_log(handle, member_label(archive, member)))
    costs = tu_costs(records)
    if not costs:
        raise UsageError(
            "No timed compiles found in " + ", ".join(str(s) for s in sources) + ".",
            hint="Point at shard archives, shard job directories or wrapper.jsonl logs "
            "from an earlier sharded build.",
        )
    return costs


@dataclass(frozen=True)
class BalancePlan:
    mapping: dict[str, int]
    loads: list[float]
    """Predicted compile seconds per shard under the map."""
    hash_loads: list[float]
    """The same TUs under the plain hash partition, for comparison."""

    @staticmethod
    def imbalance(loads: list[float]) -> float:
        """Slowest shard over the mean: 1.0 is perfect balance."""
        mean = sum(loads) / len(loads) if loads else 0.0
        return max(loads) / mean if mean else 1.0


def balance(costs: Mapping[str, float], count: int) -> BalancePlan:
    """Longest TU first, each onto the least-loaded shard; ties broken by key, so the
    same costs always give the same map."""
    loads = [0.0] * count
    mapping: dict[str, int] = {}
    for tu, seconds in sorted(costs.items(), key=lambda item: (-item[1], item[0])):
        index = min(range(count), key=lambda i: (loads[i], i))
        mapping[tu] = index
        loads[index] += seconds
    hash_loads = [0.0] * count
    for tu, seconds in costs.items():
        hash_loads[shard_of(tu, count)] += seconds
    return BalancePlan(dict(sorted(mapping.items())), loads, hash_loads)


TU_SECONDS_DIR = "tu-seconds"
"""Under the state home: what each TU of a cell cost to compile, as this builder last
timed it (:func:`remember_seconds`), which orders the TUs a shard compiles ahead."""
_SECONDS_CAP = 4096
"""TUs kept per cell: a record is read by every shard job of the cell."""


def _seconds_path(cell_id: str) -> Path:
    from wheelkiln.paths import state_home

    if not cell_id or "/" in cell_id or cell_id.startswith("."):
        raise ValueError(f"not a cell id: {cell_id!r}")
    return state_home() / TU_SECONDS_DIR / f"{cell_id}.json"


def recall_seconds(cell_id: str) -> dict[str, float]:
    """The seconds each TU of *cell_id* took when this builder last compiled it; empty
    when none was timed (or the record is damaged: it only orders work)."""
    import json

    try:  # a cell id no file can be named after is one without a record
        data = json.loads(_seconds_path(cell_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(tu): float(seconds)
        for tu, seconds in data.items()
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0
    }


def remember_seconds(cell_id: str, seconds: Mapping[str, float]) -> None:
    """Keep what this job timed for *cell_id*'s TUs, over what was kept before (a TU's
    last compile is the best guess at its next)."""
    import json
    import os

    if not seconds:
        return
    path = _seconds_path(cell_id)
    merged = {**recall_seconds(cell_id), **{tu: round(s, 3) for tu, s in seconds.items()}}
    if len(merged) > _SECONDS_CAP:
        merged = dict(sorted(merged.items(), key=lambda item: -item[1])[:_SECONDS_CAP])
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staged.write_text(json.dumps(merged, sort_keys=True) + "\n", encoding="utf-8")
    staged.replace(path)
