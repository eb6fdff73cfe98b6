"""Where a fleet run's builds run: one Protocol, engines by name.

An engine says which builders it has, samples each of them while the run lasts, and runs
the builds, as many at once as its builders take. ``local`` has one builder, this
machine, and takes every build at once (``max_parallel`` caps it): every build is a
``kiln build`` process of its own, started through :mod:`wheelkiln.run`, so each one has
its own process group and record, and inherits the run's builder lock.
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
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import psutil

from wheelkiln import run
from wheelkiln.cells import Cell
from wheelkiln.errors import UsageError
from wheelkiln.fleet.sampler import CacheCounters, Sampler, SampleSink


@dataclass(frozen=True)
class FleetJob:
    """One cell of a fleet run: a cold ``kiln build`` into a private cache directory."""

    cell: Cell
    recipe: Path
    out_dir: Path
    log_path: Path
    cache: str
    cache_dir: Path
    namespace: str
    jobs: int | None = None
    workdir: Path | None = None
    shards: int | None = None
    """Build the cell sharded N ways (``kiln build --shards N``): each shard job gets a
    private, fresh cache of its own, so only the namespace is passed."""

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "wheelkiln", "build", str(self.recipe), "--cell",
                self.cell.id, "--cache", self.cache, "--namespace", self.namespace]
        if self.shards is None:
            argv += ["--cache-dir", str(self.cache_dir), "--recache", "--no-wheel-cache"]
        else:
            argv += ["--shards", str(self.shards)]
        argv += ["--out", str(self.out_dir)]
        if self.jobs is not None:
            argv += ["--jobs", str(self.jobs)]
        if self.workdir is not None:
            argv += ["--workdir", str(self.workdir)]
        return argv


@dataclass(frozen=True)
class JobResult:
    cell: str
    builder: str
    start: float
    """Epoch seconds."""
    end: float
    exit_code: int


@dataclass(frozen=True)
class BuilderInfo:
    name: str
    cpus: int
    memory_bytes: int
    platform: str
    executor: str


JobEvent = Callable[[str, FleetJob, JobResult | None], None]
"""Called with ("start", job, None) and ("end", job, result)."""


class FleetExecutor(Protocol):
    name: str

    def builders(self) -> list[BuilderInfo]: ...

    def sampling(
        self, sink: SampleSink, *, interval: float, cache_counters: CacheCounters | None,
        running: Callable[[], int],
    ) -> AbstractContextManager[list[Sampler]]: ...

    def run(self, jobs: Sequence[FleetJob], on_event: JobEvent) -> list[JobResult]: ...


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


EXECUTORS: Final[dict[str, Callable[[int | None], FleetExecutor]]] = {
    "local": LocalFleet,
}


def make_executor(name: str, max_parallel: int | None = None) -> FleetExecutor:
    try:
        factory = EXECUTORS[name]
    except KeyError:
        raise UsageError(
            f"--executor {name!r} is not a fleet executor.",
            hint="Fleet executors: " + ", ".join(sorted(EXECUTORS)) + ".",
        ) from None
    return factory(max_parallel)
