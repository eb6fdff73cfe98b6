"""What a fleet run's folder says, in figures (pure): per builder, how often it was
sampled and how busy it was while builds ran; the slowest cells. Used by the command's
summary, its ``--json`` and the run's page."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class BuilderFigures:
    builder: str
    samples: int
    seconds: float
    """From the first sample to the last."""
    samples_per_second: float
    cpu_busy_mean: float | None
    """Mean CPU busy % over the samples taken while at least one build ran."""
    cpu_busy_max: float | None
    memory_peak_bytes: int | None
    disk_read_bytes: float
    disk_write_bytes: float
    net_rx_bytes: float
    net_tx_bytes: float
    cache_last: dict[str, int] | None


def _number(value: Any) -> float:
    """A figure from a run folder, which may come from anywhere: 0 unless a finite number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else 0.0
    return 0.0


def _section(sample: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = sample.get(name)
    return section if isinstance(section, dict) else {}


def builder_figures(
    samples: Sequence[Mapping[str, Any]], builds: Sequence[Mapping[str, Any]]
) -> list[BuilderFigures]:
    figures = []
    for builder in sorted({str(s.get("builder")) for s in samples}):
        mine = sorted((s for s in samples if str(s.get("builder")) == builder),
                      key=lambda s: _number(s.get("t")))
        times = [_number(s.get("t")) for s in mine]
        seconds = times[-1] - times[0] if len(times) > 1 else 0.0
        windows = [(_number(b.get("start")), _number(b.get("end"))) for b in builds
                   if str(b.get("builder")) == builder]
        busy = [
            _number(_section(s, "cpu").get("busy")) for s in mine
            if any(start <= _number(s.get("t")) <= end for start, end in windows)
        ]
        memory = [int(_number(_section(s, "memory").get("used_bytes"))) for s in mine]

        def total(section: str, key: str, samples: list[Mapping[str, Any]] = mine) -> float:
            return sum(_number(_section(s, section).get(key)) * _number(s.get("interval"))
                       for s in samples)

        caches = [s["cache"] for s in mine if isinstance(s.get("cache"), dict)]
        figures.append(BuilderFigures(
            builder=builder, samples=len(mine), seconds=round(seconds, 3),
            samples_per_second=round(len(mine) / seconds, 3) if seconds else 0.0,
            cpu_busy_mean=round(statistics.fmean(busy), 1) if busy else None,
            cpu_busy_max=max(busy) if busy else None,
            memory_peak_bytes=max(memory) if memory else None,
            disk_read_bytes=total("disk", "read_bytes_per_s"),
            disk_write_bytes=total("disk", "write_bytes_per_s"),
            net_rx_bytes=total("net", "rx_bytes_per_s"),
            net_tx_bytes=total("net", "tx_bytes_per_s"),
            cache_last=dict(caches[-1]) if caches else None,
        ))
    return figures


def slowest(builds: Sequence[Mapping[str, Any]], count: int = 10) -> list[Mapping[str, Any]]:
    return sorted(builds, key=lambda b: -_number(b.get("seconds")))[:count]


def run_summary(run: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    builds = list(run.get("builds", []))
    outcomes: dict[str, int] = {}
    for build in builds:
        outcome = str(build.get("outcome"))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "stamp": run.get("stamp"),
        "note": run.get("note"),
        "wall_seconds": run.get("wall_seconds"),
        "builds": len(builds),
        "outcomes": outcomes,
        "builders": [asdict(f) for f in builder_figures(samples, builds)],
        "slowest": [{"cell": b.get("cell"), "seconds": b.get("seconds"),
                     "outcome": b.get("outcome")} for b in slowest(builds)],
    }
