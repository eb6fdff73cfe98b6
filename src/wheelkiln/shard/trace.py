"""The per-TU trace of one job: ``<record>.trace.json`` beside its build record.

Chrome's trace-event format (JSON object form), which Perfetto and ``chrome://tracing``
open: one complete event (``ph: "X"``) per TU the build compiled, on the job's track
(``pid``) and the job slot that ran it (``tid``), labelled with its action:

- in a shard job, the seat wrapper's: ``compile``, ``stub`` or ``probe``;
- in an unsharded build or a link job, the cache's: ``hit`` or ``miss``
  (``compile`` where the cache could not say).

Times come from the build's own ``.ninja_log`` (every ninja-driven backend: CMake,
scikit-build-core, meson-python), joined to the TUs through the compile database. The
log's times are relative to ninja's start; each output's modification time (the log's
third column, in nanoseconds) anchors them to the wall clock, so traces of separate jobs
share one time axis. A build without a ninja log (setuptools) gets a trace only in a
shard job, from the wrapper's seconds laid end to end per compiler process, marked
``approximate``.

This module writes the format and reads it back (:func:`read_trace`); ``kiln timeline``
(:mod:`wheelkiln.plan.timeline`) merges traces.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln.cache.backend import TUOutcome
from wheelkiln.errors import GateError, UsageError
from wheelkiln.shard.gate import read_compile_database
from wheelkiln.shard.partition import tu_key
from wheelkiln.shard.wrapper_log import WRAPPER_LOG, WrapperRecord, read_wrapper_log

TRACE_SCHEMA = 1
TRACE_SUFFIX = ".trace.json"
ACTIONS = ("compile", "stub", "probe", "hit", "miss")
MAX_TRACE_BYTES = 256 * 1024**2


def trace_path(record_path: Path) -> Path:
    """``<cell>.build.json`` → ``<cell>.build.trace.json`` (and so for shard and link)."""
    return record_path.with_name(record_path.name.removesuffix(".json") + TRACE_SUFFIX)


@dataclass(frozen=True)
class Span:
    tu: str
    action: str
    start: float
    """Wall-clock seconds (epoch)."""
    seconds: float


def ninja_spans(build_dir: Path, package_root: Path) -> list[tuple[str, float, float]] | None:
    """(TU key, start epoch seconds, seconds) per compile of the last ninja run, or None
    without a ninja log or a compile database."""
    log = build_dir / ".ninja_log"
    database = read_compile_database(build_dir / "compile_commands.json", package_root, build_dir)
    if database is None or not log.is_file():
        return None
    by_output = {os.path.realpath(c.output): c.tu for c in database if c.output}
    last: dict[str, tuple[int, int, int]] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#"):
            last.clear()  # a new log header: only the lines after it count
            continue
        parts = line.split("\t")
        if len(parts) < 4 or not all(p.isdigit() for p in parts[:3]):
            continue
        last[parts[3]] = (int(parts[0]), int(parts[1]), int(parts[2]))  # a rerun replaces
    # The build directory is fresh in every job, so the log holds one ninja run.
    anchors = [mtime / 1e9 - end / 1000 for _start, end, mtime in last.values() if mtime > 0]
    origin = statistics.median(anchors) if anchors else time.time()
    spans = []
    for output, (start, end, _mtime) in last.items():
        key = by_output.get(os.path.realpath(build_dir / output))
        if key is not None:
            spans.append((key, origin + start / 1000, (end - start) / 1000))
    return spans


def _cache_actions(
    outcomes: Iterable[TUOutcome], package_root: Path, build_dir: Path
) -> dict[str, str]:
    actions: dict[str, str] = {}
    for outcome in outcomes:
        key = tu_key(outcome.source, package_root, cwd=build_dir, build_dir=build_dir)
        # A TU both missed and hit (compiled twice) is a miss: it cost a compile.
        if actions.get(key) != "miss":
            actions[key] = "hit" if outcome.hit else "miss"
    return actions


def _wrapper_actions(records: Sequence[WrapperRecord]) -> dict[str, str]:
    actions: dict[str, str] = {}
    for record in records:
        tu, action = record.get("tu"), record["action"]
        if tu and action in ("compile", "stub", "probe"):
            actions[tu] = action
    return actions


def _wrapper_spans(records: Sequence[WrapperRecord], end: float) -> list[Span]:
    """Spans laid end to end per compiler process's parent slot, ending at ``end``:
    the wrapper logs durations, not start times."""
    timed = [r for r in records if r.get("tu") and r["action"] in ("compile", "stub", "probe")]
    total = sum(float(r.get("seconds", 0.0)) for r in timed)
    clock = end - total
    spans = []
    for record in timed:
        seconds = float(record.get("seconds", 0.0))
        spans.append(Span(str(record["tu"]), record["action"], clock, seconds))
        clock += seconds
    return spans


def assign_slots(spans: Sequence[Span]) -> list[int]:
    """The job slot of each span: the lowest slot free when it starts (interval
    colouring), so concurrent compiles sit on separate tracks."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i].start, spans[i].tu))
    free_at: list[float] = []
    slots = [0] * len(spans)
    for index in order:
        span = spans[index]
        for slot, free in enumerate(free_at):
            if free <= span.start + 1e-6:
                slots[index] = slot
                free_at[slot] = span.start + span.seconds
                break
        else:
            slots[index] = len(free_at)
            free_at.append(span.start + span.seconds)
    return slots


def job_spans(
    job_dir: Path,
    outcomes: Sequence[TUOutcome],
    *,
    shard: bool,
    records: Sequence[WrapperRecord] | None = None,
) -> tuple[list[Span], str]:
    """The TU spans of a finished job and how they were timed (a shard's from its wrapper
    log's *records*, read here when not given)."""
    build_dir, tree = job_dir / "build", job_dir / "src"
    if records is None:
        records = read_wrapper_log(job_dir / WRAPPER_LOG) if shard else []
    actions = _wrapper_actions(records) if shard else _cache_actions(outcomes, tree, build_dir)
    ninja = ninja_spans(build_dir, tree)
    if ninja is not None:
        default = "compile"
        return [
            Span(key, actions.get(key, default), start, seconds) for key, start, seconds in ninja
        ], "ninja log"
    if shard:
        return _wrapper_spans(records, time.time()), "approximate (wrapper seconds, end to end)"
    return [], "none (no ninja log)"


def build_trace(
    spans: Sequence[Span],
    *,
    cell: str,
    kind: str,
    label: str,
    index: int | None,
    count: int | None,
    wall_seconds: float,
    timing: str,
    end: float | None = None,
) -> dict[str, Any]:
    end = time.time() if end is None else end
    start = min([end - wall_seconds, *(s.start for s in spans)])
    pid = (index + 1) if index is not None else 0
    slots = assign_slots(spans)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}}
    ]
    for slot in sorted(set(slots)):
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": slot,
                "args": {"name": f"slot {slot + 1}"},
            }
        )
    for span, slot in zip(spans, slots, strict=True):
        events.append(
            {
                "ph": "X",
                "name": span.tu,
                "cat": span.action,
                "ts": round(span.start * 1e6),
                "dur": max(round(span.seconds * 1e6), 1),
                "pid": pid,
                "tid": slot,
                "args": {"tu": span.tu, "action": span.action, "shard": label},
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "schema": TRACE_SCHEMA,
            "cell": cell,
            "kind": kind,
            "job": label,
            "index": index,
            "count": count,
            "start": round(start, 6),
            "end": round(end, 6),
            "wall_seconds": round(wall_seconds, 3),
            "timing": timing,
            "tus": len(spans),
        },
    }


def write_job_trace(
    record_path: Path,
    job_dir: Path,
    outcomes: Sequence[TUOutcome],
    record: Mapping[str, Any],
    records: Sequence[WrapperRecord] | None = None,
) -> Path | None:
    """Write the trace of the job whose record is at ``record_path``; None when the
    build left nothing to time it by. A trace is an aid: failing to write one never
    fails the job. A shard job passes its wrapper log's *records*, read once."""
    shard_info = record.get("shard") or {}
    kind = str(record.get("kind", "build"))
    index = shard_info.get("index") if kind == "shard" else None
    count = shard_info.get("count") if kind == "shard" else None
    label = f"shard {index + 1}/{count}" if index is not None else kind
    try:
        if kind == "shard" and records is None:
            records = read_wrapper_log(job_dir / WRAPPER_LOG)
        spans, timing = job_spans(job_dir, outcomes, shard=kind == "shard", records=records)
        if not spans:
            return None
        trace = build_trace(
            spans,
            cell=str(record.get("cell")),
            kind=kind,
            label=label,
            index=index,
            count=count,
            wall_seconds=float(record.get("wall_seconds") or 0.0),
            timing=timing,
        )
        path = trace_path(record_path)
        path.write_text(json.dumps(trace) + "\n", encoding="utf-8")
        with contextlib.suppress(OSError, ValueError, GateError):  # it only orders work
            _remember_compile_seconds(str(record.get("cell")), spans, records or [], kind)
        return path
    except Exception as exc:  # the job's result stands whatever happens here
        from wheelkiln import ui

        ui.warn(f"No trace written beside {record_path}: {exc}")
        return None


def _remember_compile_seconds(
    cell: str, spans: Sequence[Span], records: Sequence[WrapperRecord], kind: str
) -> None:
    """What this job's real compiles took, for the next shard of the cell to compile its
    longest TUs ahead first (:mod:`wheelkiln.shard.ahead`): a build's or link job's
    misses; a shard's compiles from its wrapper log, where a TU compiled ahead is timed
    (ninja's call of it was a cache hit)."""
    from wheelkiln.shard.balance import remember_seconds, tu_costs

    if kind == "shard":
        seconds = tu_costs(records)
    else:
        seconds = {span.tu: span.seconds for span in spans if span.action == "miss"}
    remember_seconds(cell, seconds)


def read_trace(path: Path) -> dict[str, Any]:
    """A trace written by :func:`build_trace`, checked for the fields the timeline reads."""
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise UsageError(
                f"{path}: larger than {MAX_TRACE_BYTES // 1024**2} MiB; not a kiln trace."
            )
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{path}: not a readable trace ({exc}).",
            hint="Pass the .trace.json files kiln build, shard and link write beside their records.",
        ) from None
    other = data.get("otherData") if isinstance(data, dict) else None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if (
        not isinstance(other, dict)
        or other.get("schema") != TRACE_SCHEMA
        or not isinstance(events, list)
    ):
        raise UsageError(
            f"{path}: not a kiln trace (no otherData.schema {TRACE_SCHEMA} or traceEvents).",
            hint="Pass the .trace.json files kiln build, shard and link write beside their records.",
        )
    for number, event in enumerate(events):
        if not isinstance(event, dict) or event.get("ph") not in ("X", "M"):
            raise UsageError(f"{path}: event {number} is not a trace event kiln writes.")
        if event["ph"] == "X" and not (
            isinstance(event.get("ts"), int | float)
            and isinstance(event.get("dur"), int | float)
            and isinstance(event.get("name"), str)
        ):
            raise UsageError(f"{path}: event {number} lacks ts, dur or name.")
    for key in ("start", "end", "wall_seconds"):
        if not isinstance(other.get(key), int | float):
            raise UsageError(f"{path}: otherData.{key} is not a number.")
    checked: dict[str, Any] = data
    return checked
