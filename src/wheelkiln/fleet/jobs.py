"""What a fleet engine is: the Protocol every engine implements, the build it is given
(:class:`FleetJob`) and what it hands back (:class:`JobResult`, :class:`BuilderInfo`).
Engines by name are in :mod:`wheelkiln.fleet.executor`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from wheelkiln.cells import Cell
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


