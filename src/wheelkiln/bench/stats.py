"""Bench statistics (pure): medians with n and min–max per key, and ratios within a key.

The key is everything that dominates the number: (target, builder, arch, jobs, shards,
scenario). The same cold build is several times faster at 32 jobs than at 5, so a ratio
across jobs, builders, architectures or shard counts is not a ratio; ratios are taken
only between scenarios of one (target, builder, arch, jobs, shards).

``target`` is the cell id where the record has one (package, python, CUDA lane, torch,
platform: the CUDA lane fixes the arch list), so two cells of one package never share a
median. Wall time is the harness's whole step (``step_wall_seconds``), falling back to
the build command's ``wall_seconds`` for records written without it.

Failed runs (a build that failed, a warm run that missed the cache) are counted but
left out of every median. ``frozen*`` (a cache could not be emptied) is shown and never
used in a ratio.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WHEEL_CACHE_HOT = "hot (wheel cache)"
SCENARIO_ORDER = ("frozen", "frozen*", "cold", "warm", "hot", WHEEL_CACHE_HOT)
RATIO_PAIRS: tuple[tuple[str, str], ...] = (
    ("frozen", "cold"),
    ("cold", "warm"),
    ("cold", "hot"),
    ("warm", "hot"),
    ("cold", WHEEL_CACHE_HOT),
)
"""(numerator, denominator) scenarios. ``hot`` is the all-hits compile; a hot run that
skipped the build through the wheel cache is its own scenario, never mixed into it."""


@dataclass(frozen=True, order=True)
class RatioKey:
    """What must be equal for two medians to be divided."""

    target: str
    builder: str
    arch: str
    jobs: int
    shards: int


@dataclass(frozen=True)
class GroupKey:
    condition: RatioKey
    scenario: str

    def sort_key(self) -> tuple[RatioKey, int, str]:
        order = SCENARIO_ORDER.index(self.scenario) if self.scenario in SCENARIO_ORDER else 99
        return (self.condition, order, self.scenario)


@dataclass(frozen=True)
class GroupStats:
    key: GroupKey
    n: int
    """Successful runs: the ones the median is taken over."""
    failed: int
    median_wall: float | None
    min_wall: float | None
    max_wall: float | None
    median_cpu: float | None
    median_hits: float | None
    median_misses: float | None
    walls: tuple[float, ...] = ()
    """Every successful run's wall time, in store order (the points of a plot)."""

    @property
    def in_ratios(self) -> bool:
        return self.n > 0 and not self.key.scenario.endswith("*")


@dataclass(frozen=True)
class Ratio:
    condition: RatioKey
    numerator: str
    denominator: str
    value: float
    numerator_n: int
    denominator_n: int

    @property
    def name(self) -> str:
        return f"{self.numerator}/{self.denominator}"


@dataclass(frozen=True)
class Summary:
    groups: list[GroupStats]
    ratios: list[Ratio]
    records: int


def scenario_label(record: Mapping[str, Any]) -> str:
    scenario = str(record.get("scenario", "?"))
    if scenario == "hot" and record.get("hot_kind") == "wheel-cache":
        return WHEEL_CACHE_HOT
    return scenario


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _float(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _raw_key(record: Mapping[str, Any]) -> tuple[str, str, str, int, int, str]:
    """The group key as a plain tuple: cheap to hash for 100,000 records."""
    target = record.get("cell") or record.get("target", "?")
    builder = record.get("builder", "?")
    arch = record.get("arch", "?")
    jobs = record.get("jobs")
    shards = record.get("shards", 1)
    scenario = record.get("scenario", "?")
    if scenario == "hot" and record.get("hot_kind") == "wheel-cache":
        scenario = WHEEL_CACHE_HOT
    return (
        target if type(target) is str else str(target),
        builder if type(builder) is str else str(builder),
        arch if type(arch) is str else str(arch),
        jobs if type(jobs) is int else _int(jobs, 0),
        shards if type(shards) is int else _int(shards, 1),
        scenario if type(scenario) is str else str(scenario),
    )


def _key_of(raw: tuple[str, str, str, int, int, str]) -> GroupKey:
    return GroupKey(RatioKey(*raw[:5]), raw[5])


def group_key(record: Mapping[str, Any]) -> GroupKey:
    return _key_of(_raw_key(record))


def wall_of(record: Mapping[str, Any]) -> float | None:
    wall = record.get("step_wall_seconds")
    if type(wall) is float:
        return wall
    wall = _float(wall)
    return wall if wall is not None else _float(record.get("wall_seconds"))


def usable_wall(wall: float) -> bool:
    """A wall time a ratio can divide by: finite and above zero."""
    return math.isfinite(wall) and wall > 0


def recordable_wall(wall: float) -> bool:
    """A wall time a median can use: finite and not below zero (a step shorter than the
    record's millisecond is 0.0). The reader of the store leaves other records out, with
    a warning naming the line."""
    return math.isfinite(wall) and wall >= 0


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


class _Accumulator:
    __slots__ = ("cpus", "failed", "hits", "misses", "walls")

    def __init__(self) -> None:
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.hits: list[float] = []
        self.misses: list[float] = []
        self.failed = 0


def _number(value: Any) -> float | None:
    if type(value) is int or type(value) is float:
        return value
    return _float(value)


def summarize(records: Iterable[Mapping[str, Any]]) -> Summary:
    accumulators: dict[tuple[str, str, str, int, int, str], _Accumulator] = {}
    count = 0
    for record in records:
        count += 1
        key = _raw_key(record)
        acc = accumulators.get(key)
        if acc is None:
            acc = accumulators[key] = _Accumulator()
        wall = wall_of(record)
        if wall is None or record.get("status", "ok") != "ok":
            acc.failed += 1
            continue
        acc.walls.append(wall)
        cpu = _number(record.get("cpu_seconds"))
        if cpu is not None:
            acc.cpus.append(cpu)
        cache = record.get("cache")
        if type(cache) is dict:
            hit, miss = _number(cache.get("hits")), _number(cache.get("misses"))
            if hit is not None:
                acc.hits.append(hit)
            if miss is not None:
                acc.misses.append(miss)
    groups = [
        GroupStats(
            key=_key_of(key),
            n=len(acc.walls),
            failed=acc.failed,
            median_wall=_median(acc.walls),
            min_wall=min(acc.walls) if acc.walls else None,
            max_wall=max(acc.walls) if acc.walls else None,
            median_cpu=_median(acc.cpus),
            median_hits=_median(acc.hits),
            median_misses=_median(acc.misses),
            walls=tuple(acc.walls),
        )
        for key, acc in accumulators.items()
    ]
    groups.sort(key=lambda group: group.key.sort_key())
    return Summary(groups=groups, ratios=ratios(groups), records=count)


def ratios(groups: Iterable[GroupStats]) -> list[Ratio]:
    """Ratios of medians between scenarios of one condition, never across conditions."""
    by_condition: dict[RatioKey, dict[str, GroupStats]] = {}
    for group in groups:
        if group.in_ratios:
            by_condition.setdefault(group.key.condition, {})[group.key.scenario] = group
    found: list[Ratio] = []
    for condition in sorted(by_condition):
        scenarios = by_condition[condition]
        for numerator, denominator in RATIO_PAIRS:
            top, bottom = scenarios.get(numerator), scenarios.get(denominator)
            if top is None or bottom is None:
                continue
            assert top.median_wall is not None and bottom.median_wall is not None
            if not (usable_wall(top.median_wall) and usable_wall(bottom.median_wall)):
                continue
            found.append(
                Ratio(condition, numerator, denominator, top.median_wall / bottom.median_wall,
                      top.n, bottom.n)
            )
    return found


def select(records: Iterable[dict[str, Any]], targets: Sequence[str]) -> list[dict[str, Any]]:
    """Records whose target (package) or cell id is one of ``targets`` (all when empty)."""
    if not targets:
        return list(records)
    wanted = set(targets)
    # A hand-edited record may hold a list or an object there, which no set can look up.
    return [r for r in records
            if any(isinstance(value, str) and value in wanted
                   for value in (r.get("target"), r.get("cell")))]
