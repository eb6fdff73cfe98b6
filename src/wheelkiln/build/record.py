"""The build record: one JSON object per build, the unit the results store keeps."""

from __future__ import annotations

import datetime as dt
import json
import platform
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wheelkiln.build.cell import BuildOutcome

RECORD_SCHEMA = 1


def build_record(
    outcome: BuildOutcome, *, kind: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    stats = outcome.stats
    record: dict[str, Any] = {
        "schema": RECORD_SCHEMA,
        "kind": kind,
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "target": outcome.cell.package,
        "cell": outcome.cell.id,
        "axes": outcome.cell.axes(),
        "arch_list": list(outcome.cell.arch_list),
        "builder": socket.gethostname(),
        "arch": platform.machine(),
        "exit_code": outcome.exit_code,
        "wall_seconds": round(outcome.wall_seconds, 3),
        "cpu_seconds": round(outcome.cpu_seconds, 3),
        "peak_rss_bytes": outcome.peak_rss_bytes,
        "cache": {
            "backend": outcome.cache_name,
            **(stats.as_dict() if stats is not None else {}),
            "missed_tus": sorted({o.source for o in outcome.tu_outcomes if not o.hit}),
        },
        "wheel": None,
        "extensions": {},
        "source_digest": outcome.source_digest,
        "build_env": str(outcome.environment.path),
        "tool_versions": outcome.versions,
        "log": str(outcome.log_path),
    }
    if outcome.wheel is not None:
        record["wheel"] = {
            "name": outcome.wheel.path.name,
            "sha256": outcome.wheel.sha256,
            "size": outcome.wheel.size,
        }
        record["extensions"] = dict(outcome.wheel.extensions)
    record.update(extra or {})
    return record


def publish(outcome: BuildOutcome, record: dict[str, Any], out_dir: Path) -> Path:
    """Copy the wheel to ``out_dir`` (if any) and write the record beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if outcome.wheel is not None:
        target = out_dir / outcome.wheel.path.name
        shutil.copy2(outcome.wheel.path, target)
        record["wheel"]["path"] = str(target)
    path = out_dir / f"{record['cell']}.{record['kind']}.json"
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return path


def served_record(
    earlier: Mapping[str, Any],
    *,
    wheel_path: Path,
    input_digest: str,
    wall_seconds: float,
    cpu_seconds: float,
    backend: str,
) -> dict[str, Any]:
    """The record of a run that served a wheel from the wheel cache.

    It describes this run: kind ``wheel-cache``, its own wall and CPU time, and no
    compiles (every cache counter zero, total 0: the compiler cache was never consulted).
    The record of the build that made the wheel is kept whole under ``served_from``, so
    a script reading ``wall_seconds`` or ``cache.misses`` gets this run's figures.
    """
    wheel = dict(earlier.get("wheel") or {})
    wheel["path"] = str(wheel_path)
    return {
        "schema": RECORD_SCHEMA,
        "kind": "wheel-cache",
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "target": earlier.get("target"),
        "cell": earlier.get("cell"),
        "axes": earlier.get("axes"),
        "arch_list": earlier.get("arch_list"),
        "builder": socket.gethostname(),
        "arch": platform.machine(),
        "exit_code": 0,
        "wall_seconds": round(wall_seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "peak_rss_bytes": 0,
        "cache": {
            "backend": backend,
            "hits": 0,
            "misses": 0,
            "total": 0,
            "uncacheable": 0,
            "errors": 0,
            "missed_tus": [],
        },
        "wheel": wheel,
        "extensions": dict(earlier.get("extensions") or {}),
        "source_digest": earlier.get("source_digest"),
        "build_env": earlier.get("build_env"),
        "tool_versions": earlier.get("tool_versions"),
        "log": None,
        "input_digest": input_digest,
        "wheel_cache": {"hit": True, "input_digest": input_digest},
        "served_from": dict(earlier),
    }
