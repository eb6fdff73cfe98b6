"""The run folder, ``runs/<stamp>/``: its one writer and its one reader.

::

    runs/<stamp>/
      run.json          what was built, on which builders, with which kiln and tools,
                        and one entry per build (start, end, outcome, its record's file)
      samples.jsonl     one sample per builder per second (see fleet.sampler)
      index.html        the run's page (fleet.page)
      records/<cell>.json   every build record, as ``kiln build`` wrote it
      logs/<cell>.log   every build's output
      out/<cell>/       what each build wrote (wheel, record)

A stamp is the UTC start time, ``YYYYMMDDTHHMMSSZ``, so stamps sort in time order; a
second run started within the same second gets ``-2``, ``-3``... A folder read back is
checked (a published folder may come from anywhere): run.json must be an object with
the fields below, and a stamp must look like one before it becomes a path.

Reading a folder back follows no symbolic link below it and reads only regular files
of a bounded size: a ``samples.jsonl`` that links to a secret would otherwise be
published, and a fifo would never end. Every value must also write back as JSON (no
infinite number, no broken text, no deep nesting): publishing writes what was read.
A value of the wrong type in run.json or a sample (a list where the page expects a
number) is left out with one warning naming the file, so the page shows "–" there.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln.errors import UsageError
from wheelkiln.paths import state_home

RUN_SCHEMA = 1
RUN_FILE = "run.json"
SAMPLES_FILE = "samples.jsonl"
PAGE_FILE = "index.html"
RECORDS_DIR = "records"
LOGS_DIR = "logs"
OUT_DIR = "out"
CONTENTION_NOTE = (
    "Throughput under contention: every cell was built at once on shared builders. "
    "These figures are never mixed into a bench median; quote them only as a fleet run's."
)
STAMP = re.compile(r"^\d{8}T\d{6}Z(?:-\d{1,4})?$")
MIB = 2**20
MAX_RUN_BYTES = 64 * MIB
MAX_SAMPLES_BYTES = 512 * MIB
"""A day of one sample per second on eight builders is about 250 MiB."""
MAX_RECORD_BYTES = 16 * MIB
MAX_DEPTH = 32
"""Nesting a run folder's JSON may have; kiln's own goes four levels deep."""
MAX_WARNINGS = 20


def default_runs_dir() -> Path:
    return state_home() / "runs"


def check_stamp(stamp: str, what: str = "--run") -> str:
    if not STAMP.match(stamp):
        raise UsageError(
            f"{what} {stamp!r} is not a run stamp (YYYYMMDDTHHMMSSZ, e.g. 20261201T143000Z).",
            hint="List the runs with `ls $KILN_STATE_HOME/runs` or leave the option out for "
            "the newest.",
        )
    return stamp


def new_run_folder(runs_dir: Path, now: dt.datetime | None = None) -> Path:
    """A new, empty, uniquely stamped folder under ``runs_dir``."""
    now = now or dt.datetime.now(dt.UTC)
    base = now.strftime("%Y%m%dT%H%M%SZ")
    runs_dir.mkdir(parents=True, exist_ok=True)
    for suffix in ["", *(f"-{n}" for n in range(2, 1000))]:
        folder = runs_dir / (base + suffix)
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        for sub in (RECORDS_DIR, LOGS_DIR, OUT_DIR):
            (folder / sub).mkdir()
        return folder
    raise UsageError(f"More than 999 fleet runs started in {runs_dir} within one second.")


class SampleWriter:
    """Appends samples to ``samples.jsonl``, one flushed line each (a run that is killed
    keeps every sample taken so far)."""

    def __init__(self, folder: Path) -> None:
        self._handle = (folder / SAMPLES_FILE).open("a", encoding="utf-8")

    def __call__(self, sample: dict[str, Any]) -> None:
        self._handle.write(json.dumps(sample, sort_keys=True, allow_nan=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def json_text(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_json(path: Path, data: Any) -> None:
    text = json_text(data)
    tmp = path.with_name(path.name + ".tmp")
    # A leftover (or a published branch's) ``.tmp`` may be a link: never write through it.
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    tmp.replace(path)


@dataclass(frozen=True)
class RunFolder:
    """A run folder read back: run.json, its samples and its build records."""

    path: Path
    run: dict[str, Any]
    samples: list[dict[str, Any]]
    records: dict[str, dict[str, Any]]
    """Build records by cell id."""
    warnings: tuple[str, ...] = ()

    @property
    def stamp(self) -> str:
        return str(self.run["stamp"])

    @property
    def builds(self) -> list[dict[str, Any]]:
        return list(self.run.get("builds", []))


REQUIRED_RUN_KEYS = {"schema": int, "stamp": str, "started": str, "builders": list,
                     "builds": list}
NUMBER, TEXT, OBJECT = "a number", "text", "an object"
RUN_FIELDS = {"started_epoch": NUMBER, "wall_seconds": NUMBER, "note": TEXT,
              "executor": TEXT, "finished": TEXT, "tool_versions": OBJECT, "cold": OBJECT}
BUILD_FIELDS = {"start": NUMBER, "end": NUMBER, "seconds": NUMBER, "cpu_seconds": NUMBER,
                "peak_rss_bytes": NUMBER, "hits": NUMBER, "misses": NUMBER,
                "exit_code": NUMBER, "label": TEXT, "builder": TEXT, "outcome": TEXT,
                "record": TEXT, "log": TEXT, "kind": TEXT, "target": TEXT}
BUILDER_FIELDS = {"name": TEXT, "cpus": NUMBER, "memory_bytes": NUMBER}
SAMPLE_FIELDS = {"interval": NUMBER, "running": NUMBER, "builder": TEXT}
SAMPLE_SECTIONS = ("cpu", "memory", "disk", "net", "cache")
"""A sample's sections: each an object of numbers (see fleet.sampler)."""


class Unreadable(ValueError):
    """A file of the run folder that is not read: a link, a fifo, too large, not JSON
    that writes back. The message is the reason, as a phrase."""


def read_inside(folder: Path, relative: str, limit: int) -> bytes:
    """The bytes of the regular file ``relative`` (``/``-separated) under ``folder``.

    Each directory below ``folder`` is opened relative to the one before without
    following a link, and the file itself without following one and without waiting on
    a fifo (``O_NONBLOCK``), so what is read is a file inside the folder whatever the
    folder holds. ``FileNotFoundError`` when it is missing; :class:`Unreadable` when it is
    a link, not a regular file, or larger than ``limit`` bytes.
    """
    parts = relative.split("/")
    if any(part in ("", ".", "..") or "\0" in part for part in parts):
        raise Unreadable(f"{relative!r} is not a path inside the run folder")
    flags = os.O_RDONLY | os.O_CLOEXEC
    directory = os.open(folder, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, flags | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Unreadable(f"{part}/ is a symbolic link or not a directory") from None
                raise
            os.close(directory)
            directory = inner
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Unreadable("a symbolic link, not followed") from None
            raise
    finally:
        os.close(directory)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable("not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise Unreadable(f"larger than {limit // MIB} MiB")
    return data


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


def load_plain(data: bytes | str) -> Any:
    """JSON that writes back as JSON: finite numbers, text that is UTF-8 (no lone
    surrogate from a ``\\ud800`` escape), at most :data:`MAX_DEPTH` levels deep.
    :class:`Unreadable` otherwise."""
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise Unreadable("nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise Unreadable(f"not JSON ({exc})") from None
    _check_scalar(value)
    pending: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while pending:
        item, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise Unreadable(f"nested more than {MAX_DEPTH} levels deep")
        for inner in [*item.keys(), *item.values()] if isinstance(item, dict) else item:
            if isinstance(inner, dict | list):
                pending.append((inner, depth + 1))
            else:
                _check_scalar(inner)
    return value


def _check_scalar(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise Unreadable(f"holds the number {value}, which JSON cannot carry")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Unreadable("holds text that is not UTF-8 (a lone surrogate)") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fits(value: Any, kind: str) -> bool:
    if value is None:  # kiln writes null where it has no figure (a build without record)
        return True
    if kind == NUMBER:
        return _is_number(value)
    if kind == TEXT:
        return isinstance(value, str)
    return isinstance(value, dict)


def _keep_fitting(entry: dict[str, Any], fields: dict[str, str], where: str,
                  dropped: list[str]) -> dict[str, Any]:
    kept = dict(entry)
    for key, kind in fields.items():
        if key in kept and not _fits(kept[key], kind):
            del kept[key]
            dropped.append(f"{where}{key} is not {kind}")
    return kept


def _objects(values: list[Any], fields: dict[str, str], where: str,
             dropped: list[str]) -> list[dict[str, Any]]:
    kept = []
    for index, value in enumerate(values):
        if isinstance(value, dict):
            kept.append(_keep_fitting(value, fields, f"{where}[{index}].", dropped))
        else:
            dropped.append(f"{where}[{index}] is not an object")
    return kept


def _bad_run(path: Path, why: str) -> UsageError:
    return UsageError(f"{path} is not a fleet run's run.json: {why}.",
                      hint="Point --run / --runs-dir at a folder `kiln fleet run` wrote.")


def _read_run_json(folder: Path) -> tuple[dict[str, Any], list[str]]:
    path = folder / RUN_FILE
    try:
        data = load_plain(read_inside(folder, RUN_FILE, MAX_RUN_BYTES))
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist: no fleet run there.",
                         hint="Run `kiln fleet run` first, or give --runs-dir.") from None
    except (OSError, Unreadable) as exc:
        raise _bad_run(path, str(exc) if isinstance(exc, Unreadable)
                       else exc.strerror or str(exc)) from None
    if not isinstance(data, dict):
        raise _bad_run(path, "not a JSON object")
    for key, kind in REQUIRED_RUN_KEYS.items():
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise _bad_run(path, f"'{key}' is missing or not a {kind.__name__}")
    if data["schema"] != RUN_SCHEMA:
        raise _bad_run(path, f"schema {data['schema']}, this kiln reads {RUN_SCHEMA}")
    check_stamp(data["stamp"], f"{path}: stamp")
    if not all(isinstance(build, dict) and isinstance(build.get("cell"), str)
               for build in data["builds"]):
        raise _bad_run(path, "an entry of 'builds' is not an object with a 'cell'")
    dropped: list[str] = []
    run = _keep_fitting(data, RUN_FIELDS, "", dropped)
    run["builds"] = _objects(data["builds"], BUILD_FIELDS, "builds", dropped)
    run["builders"] = _objects(data["builders"], BUILDER_FIELDS, "builders", dropped)
    if "jobs_of_builds" in data:
        if isinstance(data["jobs_of_builds"], list):
            run["jobs_of_builds"] = _objects(data["jobs_of_builds"], BUILD_FIELDS,
                                             "jobs_of_builds", dropped)
        else:
            del run["jobs_of_builds"]
            dropped.append("jobs_of_builds is not a list")
    warnings = []
    if dropped:
        warnings.append(f"{path}: {len(dropped)} value(s) of the wrong type left out, the "
                        f"page shows – there: {'; '.join(dropped[:5])}"
                        + ("; …" if len(dropped) > 5 else ""))
    return run, warnings


def _sample(value: Any, dropped: list[int], number: int) -> dict[str, Any] | None:
    """A sample with the fields the page reads, each of its type; None when it has no
    time (``t``). A value of another type is left out and its line noted."""
    if not isinstance(value, dict) or not _is_number(value.get("t")):
        return None
    sample: dict[str, Any] = {}
    bad = False
    for key, item in value.items():
        if key in SAMPLE_SECTIONS:
            if not isinstance(item, dict):
                bad = True
                continue
            numbers = {k: v for k, v in item.items() if _is_number(v)}
            bad = bad or len(numbers) != len(item)
            sample[key] = numbers
        elif key in SAMPLE_FIELDS and not _fits(item, SAMPLE_FIELDS[key]):
            bad = True
        else:
            sample[key] = item
    if bad:
        dropped.append(number)
    return sample


def _read_samples(folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    path = folder / SAMPLES_FILE
    try:
        text = read_inside(folder, SAMPLES_FILE, MAX_SAMPLES_BYTES).decode(errors="replace")
    except FileNotFoundError:
        return [], [f"{path}: missing, no samples"]
    except (OSError, Unreadable) as exc:
        reason = str(exc) if isinstance(exc, Unreadable) else exc.strerror or str(exc)
        return [], [f"{path}: {reason}; no samples read"]
    samples: list[dict[str, Any]] = []
    problems: list[str] = []
    dropped: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = load_plain(line)
        except Unreadable as exc:
            problems.append(f"line {number}: {exc}, skipped")
            continue
        sample = _sample(value, dropped, number)
        if sample is None:
            problems.append(f"line {number} is not a sample, skipped")
        else:
            samples.append(sample)
    warnings = [f"{path}: {problem}" for problem in problems[:MAX_WARNINGS]]
    if len(problems) > MAX_WARNINGS:
        warnings.append(f"{path}: {len(problems) - MAX_WARNINGS} more line(s) skipped")
    if dropped:
        warnings.append(f"{path}: values of the wrong type left out on {len(dropped)} line(s) "
                        f"(first line {dropped[0]})")
    return samples, warnings


def record_name(name: Any) -> str | None:
    """``records/<file>``, the only place a build record may be; None for anything else."""
    if not isinstance(name, str):
        return None
    parts = name.split("/")
    if (len(parts) != 2 or parts[0] != RECORDS_DIR or parts[1] in ("", ".", "..")
            or "\0" in parts[1]):
        return None
    return name


def read_run(folder: Path) -> RunFolder:
    run, warnings = _read_run_json(folder)
    samples, sample_warnings = _read_samples(folder)
    warnings += sample_warnings
    records: dict[str, dict[str, Any]] = {}
    for build in run["builds"]:
        name = build.get("record")
        if name is None:
            continue
        if record_name(name) is None:
            warnings.append(f"{folder / RUN_FILE}: record {name!r} lies outside the run's "
                            f"{RECORDS_DIR}/, ignored")
            continue
        path = folder / name
        try:
            record = load_plain(read_inside(folder, name, MAX_RECORD_BYTES))
        except FileNotFoundError:
            warnings.append(f"{path}: missing")
            continue
        except (OSError, Unreadable) as exc:
            reason = str(exc) if isinstance(exc, Unreadable) else exc.strerror or str(exc)
            warnings.append(f"{path}: {reason}, ignored")
            continue
        if isinstance(record, dict):
            records[build["cell"]] = record
        else:
            warnings.append(f"{path}: not a JSON object, ignored")
    return RunFolder(folder, run, samples, records, tuple(warnings))


def is_run_folder(path: Path) -> bool:
    """A real directory (never a link) with a regular run.json (never a link)."""
    try:
        return (stat.S_ISDIR(path.lstat().st_mode)
                and stat.S_ISREG((path / RUN_FILE).lstat().st_mode))
    except OSError:
        return False


def list_runs(runs_dir: Path) -> list[Path]:
    """Run folders under ``runs_dir`` that have a run.json, oldest first."""
    if not runs_dir.is_dir():
        return []
    return sorted(
        (p for p in runs_dir.iterdir() if STAMP.match(p.name) and is_run_folder(p)),
        key=lambda p: stamp_order(p.name),
    )


def stamp_order(stamp: str) -> tuple[str, int]:
    base, _, suffix = stamp.partition("-")
    return base, int(suffix or 1)


def find_run(runs_dir: Path, stamp: str | None) -> Path:
    """The named run, or the newest."""
    if stamp is not None:
        folder = runs_dir / check_stamp(stamp)
        if not is_run_folder(folder):
            known = [p.name for p in list_runs(runs_dir)][-5:]
            raise UsageError(
                f"No fleet run {stamp} in {runs_dir}.",
                hint=("Newest runs: " + ", ".join(reversed(known))) if known
                else "Run `kiln fleet run` first, or give --runs-dir.",
            )
        return folder
    runs = list_runs(runs_dir)
    if not runs:
        raise UsageError(f"No fleet runs in {runs_dir}.",
                         hint="Run `kiln fleet run` first, or give --runs-dir.")
    return runs[-1]
