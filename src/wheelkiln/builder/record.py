"""The build record: one JSON object per build, the unit the results store keeps."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wheelkiln.builder.cell import BuildOutcome

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
        "cython": dict(outcome.cython),
        # CMake builds: the kept identification and check results the configure was
        # seeded with (None: found anew), for a result that looks stale.
        "cmake": outcome.cmake,
        "wheel": None,
        "extensions": {},
        "source_digest": outcome.source_digest,
        "build_env": str(outcome.environment.path),
        "tool_versions": outcome.versions,
        "log": str(outcome.log_path),
    }
    if outcome.remote is not None:
        record["cache"]["remote"] = [status.as_dict() for status in outcome.remote.statuses]
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


BUILDS_DIR = "builds"
"""Under :func:`~wheelkiln.paths.state_home`: the last and the last cold record of each
cell's build, by input digest, so that every command finds them whatever its ``--out``."""


def is_cold(record: Mapping[str, Any]) -> bool:
    """Whether a build record measured a cold build (every TU compiled).

    ``--recache`` compiles everything; without it, a build with no hits was cold too (a
    package whose probes repeat, like pycryptodome's, hits even when cold).
    """
    cache = record.get("cache") or {}
    return bool(record.get("recache")) or (cache.get("hits", 1) == 0 and cache.get("misses", 0) > 0)


def _remembered_path(input_digest: str) -> Path:
    from wheelkiln.paths import state_home

    if len(input_digest) < 8 or not all(c in "0123456789abcdef" for c in input_digest):
        raise ValueError(f"not an input digest: {input_digest!r}")
    return state_home() / BUILDS_DIR / input_digest[:2] / f"{input_digest}.json"


def _read_remembered(path: Path, cell_id: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        # Absent, or torn by a crash: the state home holds only what a rebuild restores.
        return {}
    if not isinstance(data, dict) or data.get("cell") != cell_id:
        return {}
    return data


def remember(record: Mapping[str, Any], input_digest: str) -> Path:
    """Keep a build's record in the state home under its cell and input digest.

    The one writer of that store (:func:`recall_cold` is its one reader). A cold build
    is kept as the cell's cold reference too; a later warm build of the same inputs does
    not replace it.
    """
    cell_id = str(record["cell"])
    path = _remembered_path(input_digest)
    entry = _read_remembered(path, cell_id) or {"cell": cell_id, "input_digest": input_digest}
    entry["last"] = dict(record)
    if is_cold(record):
        entry["cold"] = dict(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(entry, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


def recall_cold(cell_id: str, input_digest: str) -> dict[str, Any] | None:
    """The cold build record remembered for this cell and input digest, if any."""
    cold = _read_remembered(_remembered_path(input_digest), cell_id).get("cold")
    if not isinstance(cold, dict) or not isinstance(cold.get("wall_seconds"), int | float):
        return None
    return cold
