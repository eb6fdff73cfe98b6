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
import math
import os
import stat
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
MAX_SECONDS = 1e11
"""Bound on a trace's times (epoch seconds; microseconds for ts and dur): the year 5138,
and far enough from a float's limits that no sum of them overflows."""
MAX_NESTING = 16
"""Deepest nesting of a trace's JSON: kiln writes 4 (an event's args)."""


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


def _real(value: Any, low: float, high: float) -> bool:
    """*value* is a JSON number (not a boolean) from *low* to *high*."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


def _nesting(value: Any) -> int:
    """How deep *value* nests (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest


def _event_problem(event: Any) -> str | None:
    """What makes *event* no trace event kiln writes, or None."""
    if not isinstance(event, dict) or event.get("ph") not in ("X", "M"):
        return "is not a trace event kiln writes"
    if "args" in event and not isinstance(event["args"], dict):
        return "has args that are not an object"
    if "tid" in event and (type(event["tid"]) is not int or event["tid"] < 0):
        return "has a tid that is not a job slot (a whole number from 0)"
    if event["ph"] == "M":
        return None
    if not isinstance(event.get("name"), str):
        return "lacks ts, dur or name"
    if not _real(event.get("ts"), 0, MAX_SECONDS * 1e6):
        return "lacks ts, dur or name" if "ts" not in event else "has a ts out of range"
    if not _real(event.get("dur"), 0, MAX_SECONDS * 1e6):
        return "lacks ts, dur or name" if "dur" not in event else "has a dur out of range"
    if "cat" in event and not isinstance(event["cat"], str):
        return "has a cat that is not a string"
    return None


def _read_regular(path: Path) -> bytes:
    """*path*'s bytes, where it is a regular file of at most MAX_TRACE_BYTES: a fifo is
    not waited on, and a link to a device is not read without end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(
                f"{path}: not a regular file; not a kiln trace.",
                hint="Pass the .trace.json files kiln build, shard and link write beside "
                "their records.",
            )
        data = handle.read(MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise UsageError(f"{path}: larger than {MAX_TRACE_BYTES // 1024**2} MiB; not a kiln trace.")
    return data


def read_trace(path: Path) -> dict[str, Any]:
    """A trace written by :func:`build_trace`, checked for the fields the timeline reads:
    each event's types and ranges, finite numbers only (a timeline's JSON has no NaN)."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not a number JSON allows")

    try:
        data = json.loads(_read_regular(path).decode("utf-8"), parse_constant=refuse)
    except (OSError, ValueError, RecursionError) as exc:
        why = "nested too deep" if isinstance(exc, RecursionError) else exc
        raise UsageError(
            f"{path}: not a readable trace ({why}).",
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
    if _nesting(data) > MAX_NESTING:
        raise UsageError(f"{path}: nested deeper than {MAX_NESTING} levels; not a kiln trace.")
    for number, event in enumerate(events):
        problem = _event_problem(event)
        if problem is not None:
            raise UsageError(f"{path}: event {number} {problem}.")
    for key in ("start", "end", "wall_seconds"):
        if not _real(other.get(key), 0, MAX_SECONDS):
            raise UsageError(f"{path}: otherData.{key} is not a number of seconds.")
    if other["end"] < other["start"]:
        raise UsageError(f"{path}: otherData.end is before otherData.start.")
    for key in ("cell", "kind", "job"):
        if not isinstance(other.get(key), str):
            raise UsageError(f"{path}: otherData.{key} is not a string.")
    if other.get("index") is not None and type(other["index"]) is not int:
        raise UsageError(f"{path}: otherData.index is not a shard's index.")
    checked: dict[str, Any] = data
    return checked
