"""The results store: JSON lines, one bench record per build, append-only.

Appends take an exclusive ``flock`` on the store file, write the whole line with one
``write`` and ``fsync`` before unlocking, so concurrent writers never interleave and a
record that was reported written survives a crash. A writer killed mid-line leaves a
torn last line (no newline). Reading skips it with a warning that names the line; the
next append first ends the torn line with a newline, so its own record starts on a
line of its own and the fragment stays a single skipped line in the middle.

A file in which no line is a bench record is not a store at all (a wrong ``--store``
path, binary garbage): reading it raises :class:`~wheelkiln.errors.UsageError` (exit 2) and never touches it.
Nor is anything but a regular file (a fifo would never end, ``/dev/zero`` never stop).
A record whose wall time is zero, negative or not finite is skipped with a warning
naming its line: it would otherwise enter medians and ratios (``warm/hot -inf×``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import json
import math
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from wheelkiln.bench.stats import recordable_wall, wall_of
from wheelkiln.errors import KilnError, UsageError
from wheelkiln.paths import state_home

BENCH_SCHEMA = 1
"""Version of the bench fields added on top of the build record's own ``schema``."""

STORE_NAME = "results.jsonl"
SCENARIOS = ("frozen", "cold", "warm", "hot")
HOT_KINDS = ("all-hits", "wheel-cache")
REQUIRED = ("target", "scenario")
MAX_WARNINGS = 20
MAX_MISSED_TUS = 200
"""Missed-TU names kept per warm/hot record (the count of the rest is kept too)."""


def default_store_path() -> Path:
    return state_home() / STORE_NAME


def bench_record(
    build: Mapping[str, Any],
    *,
    run_id: str,
    repeat: int,
    scenario: str,
    hot_kind: str | None,
    jobs: int,
    shards: int,
    namespace: str | None,
    source_date_epoch: int,
    step_wall_seconds: float,
    user_seconds: float,
    sys_seconds: float,
    problems: Iterable[str] = (),
    builder: str | None = None,
) -> dict[str, Any]:
    """A build record (:func:`wheelkiln.builder.record.build_record`) plus the bench fields.

    ``wall_seconds``/``cpu_seconds`` stay the build command's own; ``step_wall_seconds``
    and ``user_seconds``/``sys_seconds`` cover the whole step as the harness timed it
    (source copy, build environment, build), which is what separates frozen from cold
    and what a wheel-cache hit costs.
    """
    problems = list(problems)
    record = dict(build)
    record["cache"] = _trim_missed(dict(record.get("cache") or {}), scenario)
    record.update(
        {
            "kind": "bench",
            "bench_schema": BENCH_SCHEMA,
            "run_id": run_id,
            "repeat": repeat,
            "scenario": scenario,
            "hot_kind": hot_kind,
            "status": "failed" if problems else "ok",
            "problems": problems,
            "jobs": jobs,
            "shards": shards,
            "namespace": namespace,
            "source_date_epoch": source_date_epoch,
            "step_wall_seconds": round(step_wall_seconds, 3),
            "user_seconds": round(user_seconds, 3),
            "sys_seconds": round(sys_seconds, 3),
        }
    )
    if builder:
        record["builder"] = builder
    return record


def _trim_missed(cache: dict[str, Any], scenario: str) -> dict[str, Any]:
    """Keep the missed-TU names where they are a finding (warm, hot), not where every TU
    misses by design (cold, frozen): a big package's list would fill the store."""
    missed = list(cache.get("missed_tus") or [])
    keep = 0 if scenario.startswith(("cold", "frozen")) else MAX_MISSED_TUS
    if len(missed) > keep:
        cache["missed_tus"] = missed[:keep]
        cache["missed_tus_omitted"] = len(missed) - keep
    return cache


def _store_error(path: Path, exc: OSError) -> KilnError:
    if exc.errno == errno.EISDIR:
        return UsageError(
            f"The results store {path} is a directory.",
            hint="Give --store the path of a .jsonl file (it is created if missing).",
        )
    if exc.errno == errno.ENXIO:  # a fifo nobody reads, opened to write without waiting
        return _not_regular(path)
    return UsageError(
        f"Cannot use the results store {path}: {exc.strerror or exc}.",
        hint="Check the path and its permissions, or give another one with --store.",
    )


def _not_regular(path: Path) -> KilnError:
    return UsageError(
        f"The results store {path} is not a regular file (a fifo, a device or a socket).",
        hint="Give --store the path of a .jsonl file (it is created if missing).",
    )


def _open_regular(path: Path, flags: int) -> int:
    """A descriptor of ``path`` once it is a regular file; never waits on a fifo."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _store_error(path, exc) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise _store_error(path, IsADirectoryError(errno.EISDIR, "Is a directory"))
        raise _not_regular(path)
    return fd


def append(record: Mapping[str, Any], path: Path | None = None) -> Path:
    """Append one record as one line: locked, flushed and fsynced before returning."""
    path = path or default_store_path()
    line = json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":")) + "\n"
    data = line.encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _store_error(path, exc) from None
    try:
        fd = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except OSError as exc:
        raise _store_error(path, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and _last_byte(path, size) != b"\n":
            # A writer died mid-line; end its fragment so this record stands alone.
            data = b"\n" + data
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)  # closing drops the flock
    return path


def _last_byte(path: Path, size: int) -> bytes:
    with path.open("rb") as handle:
        handle.seek(size - 1)
        return handle.read(1)


def _looks_torn(raw: bytes) -> bool:
    """A fragment our own writer could have left: the start of a JSON object, as text."""
    if not raw.lstrip().startswith(b"{"):
        return False
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


@contextlib.contextmanager
def paused_gc(*, freeze: bool = False) -> Iterator[None]:
    """Pause the cyclic GC while parsing: 100,000 fresh records would otherwise trigger
    it hundreds of times over objects that cannot be garbage yet (about halves the
    parse). JSON makes no reference cycles, and refcounting still frees the records.

    The scan is only deferred: re-enabling it makes the next collection walk every new
    record once (~0.2 s per 100,000). ``freeze=True`` moves everything alive into the
    permanent generation instead (:func:`gc.freeze`); that is for a short-lived command
    about to exit (``kiln bench report``), not for a library caller, since cyclic garbage
    alive at that moment would then never be collected.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if freeze:
                gc.freeze()
            gc.enable()


def _is_record(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("target"), str)
        and isinstance(value.get("scenario"), str)
    )


def _parse_fast(body: bytes, line_count: int) -> list[dict[str, Any]] | None:
    """The common case in one ``json.loads``: every line is a record. ``None`` sends
    the caller to the line-by-line path, which names each bad line."""
    if b"\n\n" in body or body.startswith(b"\n"):
        return None
    # "[" + lines joined by "," + "]", built with two copies of the store, not four.
    payload = bytearray(b"[")
    payload += body
    payload[-1] = ord("]")  # the body's final newline
    payload = payload.replace(b"\n", b",")
    with paused_gc():
        try:
            values: list[Any] = orjson.loads(payload)
        except ValueError:
            return None
        finally:
            del payload
    if len(values) != line_count or not all(map(_is_record, values)):
        return None
    return values


def _parse_line(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except ValueError:
        return None


def _parse_each(body: bytes) -> tuple[list[dict[str, Any]], list[int], list[str]]:
    records: list[dict[str, Any]] = []
    numbers: list[int] = []
    problems: list[str] = []
    with paused_gc():
        for number, raw in enumerate(body.split(b"\n")[:-1], 1):
            if not raw.strip():
                continue
            value = _parse_line(raw)
            if not isinstance(value, dict):
                kind = (
                    "not JSON" if value is None else f"JSON {type(value).__name__}, not an object"
                )
                problems.append(f"line {number}: {kind} ({_preview(raw)}), skipped")
            elif not _is_record(value):
                problems.append(
                    f"line {number}: a JSON object without "
                    f"{' and '.join(repr(k) for k in REQUIRED)}, not a bench record, skipped"
                )
            else:
                records.append(value)
                numbers.append(number)
    return records, numbers, problems


def read(path: Path | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """All records in the store, and warnings about the lines that were skipped.

    A missing or empty store has no records. A torn last line (a writer killed
    mid-line: no newline and not a whole record) and invalid lines in the middle are
    skipped with a warning naming their line number; a whole record that only lacks its
    newline is kept, with a warning. A file with no bench record in it, only lines that
    are not records, is not a store: :class:`KilnError`, and the file is left as it is.
    """
    path = path or default_store_path()
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return [], []
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise _store_error(path, exc) from None
    if not data or data.isspace():
        return [], []
    end = data.rfind(b"\n") + 1
    body, torn_tail = data[:end], data[end:]  # torn_tail is b"" in a healthy store
    del data
    line_count = body.count(b"\n")
    fast = _parse_fast(body, line_count) if body else None
    problems: list[str] = []
    numbers: Iterable[int]
    if fast is not None:
        records, numbers = fast, range(1, len(fast) + 1)
    else:
        records, numbers, problems = _parse_each(body)
    warnings: list[str] = []
    torn_number = line_count + 1
    if torn_tail and not torn_tail.isspace():
        complete = _parse_line(torn_tail)
        if _is_record(complete):
            # The whole record is there; only its newline is missing (an edit by hand).
            records.append(complete)
            numbers = [*numbers, torn_number]
            warnings.append(f"{path}: line {torn_number} has no newline at the end; kept")
        elif not records and not problems and not _looks_torn(torn_tail):
            problems.append(f"line {torn_number}: not JSON ({_preview(torn_tail)})")
        else:
            warnings.append(
                f"{path}: line {torn_number} is a torn last line (no newline at the end of "
                "the file; a writer was interrupted), skipped"
            )
    if not records and problems:
        shown = "; ".join(problems[:3])
        raise UsageError(
            f"corrupt store: {path} is not a JSON-lines results store (no line is a bench "
            f"record; {shown}).",
            hint="It was left untouched. Check the --store path; if this is the store, move "
            "it aside (the next bench run starts a new one) and recover what you can by hand.",
        )
    for problem in problems[:MAX_WARNINGS]:
        warnings.append(f"{path}: {problem}")
    if len(problems) > MAX_WARNINGS:
        warnings.append(f"{path}: {len(problems) - MAX_WARNINGS} more invalid line(s) skipped")
    return _without_bad_walls(records, numbers, path, warnings)


def _without_bad_walls(
    records: list[dict[str, Any]], numbers: Iterable[int], path: Path, warnings: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The records whose wall time a median can use (or that have none: those count as
    failed runs), and a warning for each line left out."""
    bad: list[tuple[int, int, float]] = []
    with paused_gc():  # allocation here would otherwise make the GC walk every record
        for index, (record, number) in enumerate(zip(records, numbers, strict=True)):
            wall = record.get("step_wall_seconds")
            if type(wall) is float and 0.0 <= wall < math.inf:
                continue  # what kiln bench writes: decided without a call
            wall = wall_of(record)
            if wall is not None and not recordable_wall(wall):
                bad.append((index, number, wall))
    if not bad:
        return records, warnings
    for _, number, wall in bad[:MAX_WARNINGS]:
        warnings.append(f"{path}: line {number}: wall time {wall} s is not a finite "
                        "number of seconds at or above 0, skipped")
    if len(bad) > MAX_WARNINGS:
        warnings.append(f"{path}: {len(bad) - MAX_WARNINGS} more record(s) with such a wall "
                        "time skipped")
    skipped = {index for index, _, _ in bad}
    return [r for index, r in enumerate(records) if index not in skipped], warnings


def _preview(raw: bytes) -> str:
    text = raw[:40].decode(errors="replace")
    return repr(text + ("…" if len(raw) > 40 else ""))
