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
"""

from __future__ import annotations

import datetime as dt
import json
import re
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


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n",
                   encoding="utf-8")
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


def _bad_run(path: Path, why: str) -> UsageError:
    return UsageError(f"{path} is not a fleet run's run.json: {why}.",
                      hint="Point --run / --runs-dir at a folder `kiln fleet run` wrote.")


def _read_run_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist: no fleet run there.",
                         hint="Run `kiln fleet run` first, or give --runs-dir.") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _bad_run(path, str(exc)) from None
    if not isinstance(data, dict):
        raise _bad_run(path, "not a JSON object")
    for key, kind in REQUIRED_RUN_KEYS.items():
        if not isinstance(data.get(key), kind):
            raise _bad_run(path, f"'{key}' is missing or not a {kind.__name__}")
    if data["schema"] != RUN_SCHEMA:
        raise _bad_run(path, f"schema {data['schema']}, this kiln reads {RUN_SCHEMA}")
    check_stamp(data["stamp"], f"{path}: stamp")
    if not all(isinstance(build, dict) and isinstance(build.get("cell"), str)
               for build in data["builds"]):
        raise _bad_run(path, "an entry of 'builds' is not an object with a 'cell'")
    return data


def _read_lines(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    samples: list[dict[str, Any]] = []
    warnings: list[str] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], [f"{path}: missing, no samples"]
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            warnings.append(f"{path}: line {number} is not JSON, skipped")
            continue
        if isinstance(value, dict) and isinstance(value.get("t"), int | float):
            samples.append(value)
        else:
            warnings.append(f"{path}: line {number} is not a sample, skipped")
    return samples, warnings


def read_run(folder: Path) -> RunFolder:
    run = _read_run_json(folder / RUN_FILE)
    samples, warnings = _read_lines(folder / SAMPLES_FILE)
    records: dict[str, dict[str, Any]] = {}
    for build in run["builds"]:
        name = build.get("record")
        if not isinstance(name, str):
            continue
        path = (folder / name).resolve()
        if not path.is_relative_to(folder.resolve()):
            warnings.append(f"{folder / RUN_FILE}: record {name!r} lies outside the run, ignored")
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            warnings.append(f"{path}: missing or not JSON")
            continue
        if isinstance(record, dict):
            records[build["cell"]] = record
    return RunFolder(folder, run, samples, records, tuple(warnings))


def list_runs(runs_dir: Path) -> list[Path]:
    """Run folders under ``runs_dir`` that have a run.json, oldest first."""
    if not runs_dir.is_dir():
        return []
    return sorted(
        (p for p in runs_dir.iterdir() if STAMP.match(p.name) and (p / RUN_FILE).is_file()),
        key=lambda p: stamp_order(p.name),
    )


def stamp_order(stamp: str) -> tuple[str, int]:
    base, _, suffix = stamp.partition("-")
    return base, int(suffix or 1)


def find_run(runs_dir: Path, stamp: str | None) -> Path:
    """The named run, or the newest."""
    if stamp is not None:
        folder = runs_dir / check_stamp(stamp)
        if not (folder / RUN_FILE).is_file():
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
