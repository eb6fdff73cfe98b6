"""The ``dask`` fleet engine: every cell's build as one task on a Dask cluster.

Each task asks for ``builder=1`` (and ``cuda=1`` for a CUDA cell), so one build per
builder holds fleet-wide and the cluster takes as many builds at once as it has
builders. The recipe and its source travel as the Dask executor's bundle
(:func:`wheelkiln.executors.dask.pack_bundle`, checked and unpacked on the worker); the
worker runs ``kiln build`` cold in its own ``$KILN_HOME``, with a private cache directory
that it deletes afterwards, and sends back the build record, the output's tail and its
own clock's start and end.

Every worker is sampled in its own process: a sampler thread started there with
``Client.run`` writes one line per second to the run's folder on the shared handoff
directory, and the lines are gathered into the run's ``samples.jsonl`` when the builds
are done (so the live progress line has no CPU figure under this engine).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln.errors import FleetError, UsageError
from wheelkiln.fleet.jobs import BuilderInfo, FleetJob, JobEvent, JobResult
from wheelkiln.fleet.sampler import CacheCounters, Sampler, SampleSink

LOG_TAIL = 200_000
"""Characters of a build's output sent back with its result."""
_samplers: dict[str, Sampler] = {}
"""The samplers running in this worker process (Client.run starts and stops them)."""


def _worker_name(dask_worker: Any) -> str:
    name = getattr(dask_worker, "name", None)
    return str(name) if name not in (None, "") else str(dask_worker.address)


def _describe(dask_worker: Any) -> dict[str, Any]:
    import psutil

    return {"name": _worker_name(dask_worker), "cpus": os.cpu_count() or 1,
            "memory_bytes": psutil.virtual_memory().total,
            "platform": f"{sys.platform}-{platform.machine()}"}


def _start_sampler(folder: str, interval: float, dask_worker: Any) -> str:
    name = _worker_name(dask_worker)
    path = Path(folder) / f"{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a", encoding="utf-8")

    def sink(sample: dict[str, Any]) -> None:
        handle.write(json.dumps(sample, sort_keys=True) + "\n")
        handle.flush()

    sampler = Sampler(name, sink, interval=interval)
    sampler.start()
    _samplers[folder] = sampler
    return name


def _stop_sampler(folder: str) -> int:
    sampler = _samplers.pop(folder, None)
    if sampler is None:
        return 0
    sampler.stop()
    return sampler.count


def build_task(bundle: str, sha256: str, cell_id: str, cache: str, namespace: str,
               jobs: int | None) -> dict[str, Any]:
    """Runs on a worker: one cold ``kiln build`` of the cell."""
    from distributed import get_worker

    from wheelkiln import run
    from wheelkiln.executors.dask import fleet_root, materialize

    worker = _worker_name(get_worker())
    recipe = materialize(Path(bundle), sha256)
    scratch = fleet_root() / "fleet-builds" / uuid.uuid4().hex
    out, cache_dir = scratch / "out", scratch / "cache"
    argv = [sys.executable, "-m", "wheelkiln", "build", str(recipe), "--cell", cell_id,
            "--cache", cache, "--cache-dir", str(cache_dir), "--namespace", namespace,
            "--recache", "--no-wheel-cache", "--out", str(out)]
    if jobs is not None:
        argv += ["--jobs", str(jobs)]
    start = time.time()
    try:
        done = run.run(argv, check=False)
        end = time.time()
        try:
            record = json.loads((out / f"{cell_id}.build.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"worker": worker, "start": start, "end": end, "exit_code": done.returncode,
            "record": record, "output": done.output[-LOG_TAIL:]}


@dataclass
class DaskFleet:
    """Builds on the workers of the scheduler at ``scheduler``; ``handoff`` is a
    directory every worker sees at the same path."""

    scheduler: str
    handoff: Path
    name: str = "dask"

    def __post_init__(self) -> None:
        from wheelkiln.executors.dask import connect

        self.client = connect(self.scheduler)
        self.run_dir = self.handoff / "fleet-runs" / uuid.uuid4().hex

    def builders(self) -> list[BuilderInfo]:
        described = self.client.run(_describe)
        return [BuilderInfo(d["name"], d["cpus"], d["memory_bytes"], d["platform"], self.name)
                for _, d in sorted(described.items())]

    @contextmanager
    def sampling(
        self, sink: SampleSink, *, interval: float, cache_counters: CacheCounters | None,
        running: Callable[[], int],
    ) -> Iterator[list[Sampler]]:
        folder = str(self.run_dir / "samples")
        self.client.run(_start_sampler, folder, interval)
        counted = _Counted()
        try:
            yield [counted]  # type: ignore[list-item]
        finally:
            counted.count = sum(self.client.run(_stop_sampler, folder).values())
            samples = []
            for path in sorted(Path(folder).glob("*.jsonl")):
                samples += [json.loads(line) for line in path.read_text().splitlines() if line]
            for sample in sorted(samples, key=lambda s: s["t"]):
                sink(sample)

    def run(self, jobs: Sequence[FleetJob], on_event: JobEvent) -> list[JobResult]:
        from distributed import as_completed

        from wheelkiln.executors.dask import (
            missing_resources,
            needed_resources,
            pack_bundle,
            worker_resources,
        )
        from wheelkiln.recipe.load import load_recipe

        offers = worker_resources(self.client)
        futures = {}
        if any(job.shards is not None for job in jobs):
            raise UsageError(
                "--shards with --executor dask is not a fleet run yet: kiln build --shards N "
                "--executor dask runs one sharded build on the cluster.",
                hint="Leave out --shards, or use --executor local.")
        for job in jobs:
            need = needed_resources(job.cell, None)
            why = missing_resources(offers, need)
            if why is not None:
                raise FleetError(f"No worker can build {job.cell.id}: {why}.",
                                 hint='Start workers with --resources "builder=1" '
                                 "(and cuda=1 where a GPU toolchain is).")
            bundle = pack_bundle(load_recipe(job.recipe), self.run_dir / "bundles")
            future = self.client.submit(
                build_task, str(bundle.path), bundle.sha256, job.cell.id, job.cache,
                job.namespace, job.jobs, resources=need, pure=False,
                key=f"fleet-build-{job.cell.id}-{uuid.uuid4().hex[:8]}")
            futures[future] = job
            on_event("start", job, None)
        results = []
        # The client is not the default one (connect sets none): name its loop.
        for future in as_completed(list(futures), loop=self.client.loop):  # type: ignore[no-untyped-call]
            job = futures[future]
            done: dict[str, Any] = future.result()
            job.log_path.parent.mkdir(parents=True, exist_ok=True)
            job.log_path.write_text(done["output"], encoding="utf-8")
            if done["record"] is not None:
                job.out_dir.mkdir(parents=True, exist_ok=True)
                (job.out_dir / f"{job.cell.id}.build.json").write_text(
                    json.dumps(done["record"], indent=2, sort_keys=True) + "\n")
            result = JobResult(job.cell.id, done["worker"], done["start"], done["end"],
                               done["exit_code"])
            on_event("end", job, result)
            results.append(result)
        return results


class _Counted:
    """What the run reads of a sampler it does not hold: how many samples and errors."""

    count = 0
    error: BaseException | None = None
