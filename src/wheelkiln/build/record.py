"""The build record: one JSON object per build, the unit the results store keeps."""

from __future__ import annotations

import datetime as dt
import json
import platform
import shutil
import socket
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
