"""Where a fleet run's builds run: one Protocol, engines by name.

An engine says which builders it has, samples each of them while the run lasts, and runs
the builds, as many at once as its builders take. ``local`` has one builder, this
machine, and takes every build at once (``max_parallel`` caps it): every build is a
``kiln build`` process of its own, started through :mod:`wheelkiln.run`, so each one has
its own process group and record, and inherits the run's builder lock. ``dask``
(:mod:`wheelkiln.fleet.dask_fleet`) builds on a Dask cluster's workers, one build per
builder.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

from wheelkiln import run
from wheelkiln.errors import UsageError
from wheelkiln.fleet.jobs import BuilderInfo, FleetExecutor, FleetJob, JobEvent, JobResult
from wheelkiln.fleet.sampler import CacheCounters, Sampler, SampleSink


class LocalFleet:
    """This machine is the one builder; every build at once unless ``max_parallel``."""

    name = "local"

    def __init__(self, max_parallel: int | None = None) -> None:
        self.max_parallel = max_parallel
        self.host = socket.gethostname()

    def builders(self) -> list[BuilderInfo]:
        return [BuilderInfo(self.host, os.cpu_count() or 1, psutil.virtual_memory().total,
                            f"{sys.platform}-{platform.machine()}", self.name)]

    @contextmanager
    def sampling(
        self, sink: SampleSink, *, interval: float, cache_counters: CacheCounters | None,
        running: Callable[[], int],
    ) -> Iterator[list[Sampler]]:
        sampler = Sampler(self.host, sink, interval=interval, cache_counters=cache_counters,
                          running=running)
        sampler.start()
        try:
            yield [sampler]
        finally:
            sampler.stop()

    def _one(self, job: FleetJob, on_event: JobEvent) -> JobResult:
        on_event("start", job, None)
        start = time.time()
        done = run.run_logged(job.command(), log_path=job.log_path)
        result = JobResult(job.cell.id, self.host, start, time.time(), done.returncode)
        on_event("end", job, result)
        return result

    def run(self, jobs: Sequence[FleetJob], on_event: JobEvent) -> list[JobResult]:
        if not jobs:
            return []
        run.install_signal_handlers()  # from the main thread: the workers cannot
        workers = min(len(jobs), self.max_parallel or len(jobs))
        lock = threading.Lock()

        def guarded(kind: str, job: FleetJob, result: JobResult | None) -> None:
            with lock:
                on_event(kind, job, result)

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleet") as pool:
            futures = [pool.submit(self._one, job, guarded) for job in jobs]
            return [future.result() for future in futures]


@dataclass(frozen=True)
class EngineSettings:
    max_parallel: int | None = None
    scheduler: str | None = None
    """dask: the scheduler's address (default: $KILN_SCHEDULER)."""
    handoff: Path | None = None
    """dask: a directory every worker sees at the same path (default: $KILN_HANDOFF)."""


def _local(settings: EngineSettings) -> FleetExecutor:
    return LocalFleet(settings.max_parallel)


def _dask(settings: EngineSettings) -> FleetExecutor:
    from wheelkiln.fleet.dask_fleet import DaskFleet

    scheduler = settings.scheduler or os.environ.get("KILN_SCHEDULER")
    handoff = settings.handoff or (Path(os.environ["KILN_HANDOFF"])
                                   if os.environ.get("KILN_HANDOFF") else None)
    if not scheduler or handoff is None:
        raise UsageError(
            "--executor dask needs the scheduler's address and a shared handoff directory.",
            hint="Pass --scheduler tcp://HOST:PORT and --handoff DIR (or set KILN_SCHEDULER "
            "and KILN_HANDOFF).",
        )
    return DaskFleet(scheduler, handoff)


EXECUTORS: Final[dict[str, Callable[[EngineSettings], FleetExecutor]]] = {
    "local": _local,
    "dask": _dask,
}


def make_executor(name: str, settings: EngineSettings | None = None) -> FleetExecutor:
    try:
        factory = EXECUTORS[name]
    except KeyError:
        raise UsageError(
            f"--executor {name!r} is not a fleet executor.",
            hint="Fleet executors: " + ", ".join(sorted(EXECUTORS)) + ".",
        ) from None
    return factory(settings or EngineSettings())
