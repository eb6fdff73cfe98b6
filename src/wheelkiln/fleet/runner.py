"""``kiln fleet run``: every selected cell built at once, cold, while each builder is
sampled every second.

Cold, as the bench makes it (:mod:`wheelkiln.bench.scenarios`): each build gets a fresh
cache namespace (``fleet-<stamp>``) *and* forced recache, and here also a compiler cache
directory of its own under the run's scratch space. The private directory is what keeps
the builds' counters apart: a build zeroes its cache's statistics when it starts and
reads them when it ends, so two builds sharing one directory would count each other's
compiles. It also keeps a fleet run from evicting the entries of real builds.

The run holds the builder lock for its whole length, as the bench does: while another
build holds it, nothing runs (status ``busy``). The builds it starts inherit the lock.
Nothing is written to the bench results store.
"""

from __future__ import annotations

import datetime as dt
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from wheelkiln import ui
from wheelkiln.builder_lock import BuilderLock
from wheelkiln.cells import Cell
from wheelkiln.fleet import folder as fmt
from wheelkiln.fleet.jobs import FleetExecutor, FleetJob, JobResult
from wheelkiln.fleet.sampler import DEFAULT_INTERVAL
from wheelkiln.paths import kiln_home
from wheelkiln.recipe.load import LoadedRecipe

HIT_KEYS = ("direct_cache_hit", "preprocessed_cache_hit")
MISS_KEYS = ("cache_miss", "recache")
CACHE_COUNTERS: dict[str, tuple[str, ...]] = {
    "hits": HIT_KEYS,
    "misses": MISS_KEYS,
    "stores": ("local_storage_write",),
    "remote_reads": ("remote_storage_read_hit", "remote_storage_read_miss"),
    "remote_writes": ("remote_storage_write",),
    "remote_errors": ("remote_storage_error",),
}
"""What a sample reports of ccache's counters: sums of its raw JSON keys."""
PROGRESS_EVERY = 10.0
"""Seconds between progress lines where no terminal shows a live status (CI logs)."""


@dataclass(frozen=True)
class FleetSettings:
    runs_dir: Path
    cache: str = "ccache"
    jobs: int | None = None
    workdir: Path | None = None
    interval: float = DEFAULT_INTERVAL
    keep_caches: bool = False
    """Keep each build's private compiler cache after the run (default: deleted)."""
    shards: int | None = None
    """Build every cell sharded N ways; the Gantt then has a bar per shard and link job."""
    quiet: bool = False


@dataclass
class FleetResult:
    status: Literal["done", "busy"]
    lock_path: Path
    holder: dict[str, Any] | None = None
    folder: Path | None = None
    run: dict[str, Any] = field(default_factory=dict)
    samples: int = 0

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [b for b in self.run.get("builds", []) if b.get("outcome") != "ok"]


class CcacheCounters:
    """The summed counters of the builds' cache directories, read with ccache itself.

    A directory is read while its build runs and once after it ended; a finished
    build's last reading is kept, so the sum stays cumulative without re-reading idle
    caches every second.
    """

    def __init__(self, cache_dirs: Sequence[Path]) -> None:
        self.cache_dirs = list(cache_dirs)
        self.last: dict[Path, dict[str, int]] = {}
        self.settled: set[Path] = set()
        self.active: set[Path] = set()

    def mark(self, directory: Path, running: bool) -> None:
        if running:
            self.active.add(directory)
        else:
            self.active.discard(directory)

    def __call__(self) -> dict[str, int] | None:
        from wheelkiln.cache.backend import CacheConfig
        from wheelkiln.cache.ccache import Ccache

        for directory in self.cache_dirs:
            if directory in self.settled or not directory.is_dir():
                continue
            idle = directory not in self.active
            try:
                raw = Ccache(CacheConfig(cache_dir=directory, base_dir=directory)).stats().raw
            except Exception:  # a cache being written mid-read: keep the last reading
                continue
            self.last[directory] = {name: sum(raw.get(k, 0) for k in keys)
                                    for name, keys in CACHE_COUNTERS.items()}
            if idle:
                self.settled.add(directory)
        if not self.last:
            return None
        return {name: sum(values[name] for values in self.last.values())
                for name in CACHE_COUNTERS}


def _tool_versions(records: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    import psutil

    import wheelkiln

    versions: dict[str, str] = {}
    for record in records.values():
        for name, value in (record.get("tool_versions") or {}).items():
            versions.setdefault(str(name), str(value))
    versions["wheelkiln"] = wheelkiln.__version__
    versions["psutil"] = psutil.__version__
    return versions


def _outcome(result: JobResult, record: Mapping[str, Any] | None) -> str:
    if result.exit_code == 0 and record is not None:
        return "ok"
    if result.exit_code == 0:
        return "no record"
    return "failed"


class _Progress:
    """Progress while the run lasts: a live status on a terminal, a line every
    ``PROGRESS_EVERY`` seconds and one per start and end in a log."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.quiet = quiet
        self.running: set[str] = set()
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        self.last_cpu: float | None = None
        self._status: Any = None
        self._last_line = 0.0

    def text(self) -> str:
        cpu = f", CPU {self.last_cpu:.0f}% busy" if self.last_cpu is not None else ""
        return (f"fleet: {len(self.running)} building, {self.done}/{self.total} done"
                f"{f' ({self.failed} failed)' if self.failed else ''}{cpu}, "
                f"{time.monotonic() - self.started:.0f} s")

    def event(self, kind: str, job: FleetJob, result: JobResult | None) -> None:
        if kind == "start":
            self.running.add(job.cell.id)
        else:
            assert result is not None
            self.running.discard(job.cell.id)
            self.done += 1
            self.failed += result.exit_code != 0
        if self.quiet:
            return
        if self._status is None:
            verdict = ("started" if result is None else
                       f"{'ok' if result.exit_code == 0 else 'FAILED'} in "
                       f"{result.end - result.start:.1f} s")
            ui.info(f"{job.cell.id}: {verdict}")
        self.refresh()

    def sample(self, sample: Mapping[str, Any]) -> None:
        self.last_cpu = float(sample["cpu"]["busy"])
        self.refresh()

    def refresh(self) -> None:
        if self.quiet:
            return
        if self._status is not None:
            self._status.update(self.text())
        elif time.monotonic() - self._last_line >= PROGRESS_EVERY:
            self._last_line = time.monotonic()
            ui.info(self.text())

    def __enter__(self) -> _Progress:
        if not self.quiet and ui.console.is_terminal:
            self._status = ui.console.status(self.text())
            self._status.__enter__()
        self._last_line = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)


def plan_jobs(
    selected: Sequence[tuple[LoadedRecipe, Cell]], settings: FleetSettings, folder: Path,
    scratch: Path,
) -> list[FleetJob]:
    namespace = f"fleet-{folder.name}"
    return [
        FleetJob(
            cell=cell, recipe=loaded.path, out_dir=folder / fmt.OUT_DIR / cell.id,
            log_path=folder / fmt.LOGS_DIR / f"{cell.id}.log", cache=settings.cache,
            cache_dir=scratch / cell.id, namespace=namespace, jobs=settings.jobs,
            workdir=settings.workdir, shards=settings.shards,
        )
        for loaded, cell in selected
    ]


def _read_json(path: Path) -> dict[str, Any] | None:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_record(job: FleetJob) -> dict[str, Any] | None:
    """The build's record: a plain build's, or a sharded build's link job's."""
    kind = "build" if job.shards is None else "link"
    return _read_json(job.out_dir / f"{job.cell.id}.{kind}.json")


def _span(record: Mapping[str, Any], floor: float) -> tuple[float, float] | None:
    """(start, end) of a job from its record: records carry the time they were written,
    at the end of the build (to the second), and the build's seconds."""
    try:
        end = dt.datetime.fromisoformat(str(record["timestamp"])).timestamp()
        seconds = float(record["wall_seconds"])
    except (KeyError, TypeError, ValueError):
        return None
    return max(floor, end - seconds), max(floor, end)


def shard_entries(job: FleetJob, result: JobResult, builder: str) -> list[dict[str, Any]]:
    """A sharded build's shard jobs and link job as Gantt rows (from their records)."""
    from wheelkiln.cells import shard_label, shard_record
    from wheelkiln.executors.sharded import shards_directory
    from wheelkiln.paths import resolve_workdir

    assert job.shards is not None
    directory = shards_directory(resolve_workdir(job.workdir), job.cell, job.shards)
    jobs: list[tuple[str, dict[str, Any] | None]] = [
        (shard_label(index, job.shards),
         _read_json(directory / shard_record(job.cell.id, index, job.shards)))
        for index in range(job.shards)
    ]
    jobs.append(("link", _read_record(job)))
    entries = []
    for label, record in jobs:
        span = _span(record, result.start) if record is not None else None
        if record is None or span is None:
            continue
        passed = (record.get("gate") or {}).get("passed", record.get("exit_code") == 0)
        entries.append({
            "cell": job.cell.id, "label": f"{job.cell.id} {label}", "kind": "shard"
            if label != "link" else "link", "builder": builder, "start": round(span[0], 3),
            "end": round(span[1], 3), "seconds": round(span[1] - span[0], 3),
            "outcome": "ok" if passed else "failed",
        })
    return entries


def run_fleet(
    selected: Sequence[tuple[LoadedRecipe, Cell]], settings: FleetSettings,
    executor: FleetExecutor, lock: BuilderLock | None = None,
) -> FleetResult:
    """Build every selected cell at once under ``executor``; write the run folder."""
    lock = lock or BuilderLock()
    if not lock.try_acquire():
        return FleetResult("busy", lock.path, holder=lock.holder())
    try:
        return _run_locked(selected, settings, executor, lock)
    finally:
        lock.release()


def _run_locked(
    selected: Sequence[tuple[LoadedRecipe, Cell]], settings: FleetSettings,
    executor: FleetExecutor, lock: BuilderLock,
) -> FleetResult:
    folder = fmt.new_run_folder(settings.runs_dir)
    scratch = kiln_home() / "fleet-cache" / folder.name
    jobs = plan_jobs(selected, settings, folder, scratch)
    builders = executor.builders()
    started = dt.datetime.now(dt.UTC)
    run: dict[str, Any] = {
        "schema": fmt.RUN_SCHEMA,
        "kind": "fleet-run",
        "stamp": folder.name,
        "started": started.isoformat(timespec="seconds"),
        "started_epoch": started.timestamp(),
        "note": fmt.CONTENTION_NOTE,
        "executor": executor.name,
        "builders": [vars(b) for b in builders],
        "cold": {"namespace": f"fleet-{folder.name}", "recache": settings.shards is None,
                 "private_cache_dirs": True, "wheel_cache": False},
        "cache": settings.cache,
        "jobs": settings.jobs,
        "interval_seconds": settings.interval,
        "cells": [{"cell": cell.id, "target": cell.package, "recipe": str(loaded.path)}
                  for loaded, cell in selected],
        "shards": settings.shards,
        "builds": [],
        "jobs_of_builds": [],
    }
    fmt.write_json(folder / fmt.RUN_FILE, run)  # a killed run still says what it was
    if not settings.quiet:
        ui.info(f"fleet run {folder.name}: {len(jobs)} cell(s) at once on "
                f"{', '.join(b.name for b in builders)} ({executor.name}), cold; "
                f"folder {folder}")
    counters = (CcacheCounters([job.cache_dir for job in jobs])
                if settings.cache == "ccache" else None)
    progress = _Progress(len(jobs), settings.quiet)
    writer = fmt.SampleWriter(folder)
    lock_guard = threading.Lock()

    def sink(sample: dict[str, Any]) -> None:
        with lock_guard:
            writer(sample)
        progress.sample(sample)

    def on_event(kind: str, job: FleetJob, result: JobResult | None) -> None:
        if counters is not None:
            counters.mark(job.cache_dir, kind == "start")
        progress.event(kind, job, result)

    try:
        with progress, executor.sampling(
            sink, interval=settings.interval, cache_counters=counters,
            running=lambda: len(progress.running),
        ) as samplers:
            results = executor.run(jobs, on_event)
    finally:
        writer.close()
        if not settings.keep_caches:
            shutil.rmtree(scratch, ignore_errors=True)
    finished = dt.datetime.now(dt.UTC)
    records: dict[str, dict[str, Any]] = {}
    by_cell = {job.cell.id: job for job in jobs}
    for result in results:
        job = by_cell[result.cell]
        record = _read_record(job)
        entry: dict[str, Any] = {
            "cell": result.cell, "target": job.cell.package, "builder": result.builder,
            "start": round(result.start, 3), "end": round(result.end, 3),
            "seconds": round(result.end - result.start, 3), "exit_code": result.exit_code,
            "outcome": _outcome(result, record), "log": f"{fmt.LOGS_DIR}/{job.log_path.name}",
            "kind": "build",
        }
        if record is not None:
            record["fleet_run"] = folder.name
            records[result.cell] = record
            name = f"{fmt.RECORDS_DIR}/{result.cell}.json"
            fmt.write_json(folder / name, record)
            cache = record.get("cache") or {}
            entry.update(record=name, cpu_seconds=record.get("cpu_seconds"),
                         peak_rss_bytes=record.get("peak_rss_bytes"),
                         hits=cache.get("hits"), misses=cache.get("misses"))
        run["builds"].append(entry)
        if job.shards is not None:
            run["jobs_of_builds"].extend(shard_entries(job, result, result.builder))
    run.update(
        finished=finished.isoformat(timespec="seconds"),
        wall_seconds=round((finished - started).total_seconds(), 3),
        samples=sum(s.count for s in samplers),
        sampler_errors=[repr(s.error) for s in samplers if s.error is not None],
        tool_versions=_tool_versions(records),
    )
    fmt.write_json(folder / fmt.RUN_FILE, run)
    return FleetResult("done", lock.path, folder=folder, run=run, samples=run["samples"])
