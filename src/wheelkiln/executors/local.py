"""The local executor: N shard jobs as parallel processes on this machine, each in a
private copy of the tree with a private cache directory, then the link job."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from wheelkiln import run, ui
from wheelkiln.builder.cell import job_directory
from wheelkiln.builder.environment import interpreter_version
from wheelkiln.builder.requires_python import check_requires_python
from wheelkiln.builder.source import fetch_source
from wheelkiln.cells import shard_job_suffix, shard_label
from wheelkiln.errors import BuildError, GateError, KilnError, UsageError
from wheelkiln.executors.base import (
    ExecutorSettings,
    LinkRun,
    ShardedJob,
    ShardedRun,
    ShardRun,
    gate_failure,
    nothing_to_link,
)
from wheelkiln.paths import resolve_workdir, sources_dir
from wheelkiln.settings import executor_job
from wheelkiln.shard.job import ShardResult, run_shard
from wheelkiln.shard.link import run_link

T = TypeVar("T")


def shard_jobs(cpus: int, free: int, starting: int, waiting_after: int) -> int:
    """Compile jobs for each of *starting* shards that start together now.

    *free* is the cores the running shards leave (their job counts subtracted). While
    shards still wait behind these, they share the free cores, so the total stays within
    the machine. The last shards to start take every core between them: a running
    build's job count cannot grow later, and the shards still running started earlier
    and leave first, so a smaller share would leave cores idle at the end.
    """
    if waiting_after > 0:
        return max(1, free // starting)
    return max(1, cpus // starting)


def schedule_shards(
    count: int,
    parallel: int,
    cpus: int,
    fixed_jobs: int | None,
    start: Callable[[int, int], Future[T]],
) -> Iterator[tuple[int, int, T]]:
    """Start shards 0..count-1, at most *parallel* at a time; yield ``(index, jobs,
    result)`` as each finishes. ``start(index, jobs)`` submits one shard; its compile
    job count is *fixed_jobs* (``--jobs``) or :func:`shard_jobs` at its start."""
    waiting = list(range(count))
    running: dict[Future[T], tuple[int, int]] = {}
    while waiting or running:
        starting = min(parallel - len(running), len(waiting))
        if starting:
            free = cpus - sum(jobs for _, jobs in running.values())
            jobs = fixed_jobs or shard_jobs(cpus, free, starting, len(waiting) - starting)
            for index in waiting[:starting]:
                running[start(index, jobs)] = (index, jobs)
            del waiting[:starting]
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in sorted(finished, key=lambda f: running[f][0]):
            index, jobs = running.pop(future)
            yield index, jobs, future.result()


def _run_shard(job: ShardedJob, index: int, workdir: Path, jobs: int) -> run.ChildCall[ShardResult]:
    """Shard *index* of *job* in a worker process of its own: its build, in its private
    tree with its private cache directory, can fail or be killed alone."""
    options = executor_job(job.options, workdir, jobs)
    label = ["shard", "--cell", job.cell.id, "--index", str(index), "--count", str(job.count)]
    return run.call_in_child(
        label,
        run_shard,
        job.loaded,
        job.cell,
        index,
        job.count,
        job.shards_dir,
        options,
        partition=job.partition,
    )


def _shard_run(
    job: ShardedJob, index: int, jobs: int, called: run.ChildCall[ShardResult]
) -> ShardRun:
    done, result = called.completed, called.value
    exit_code, problem = done.returncode, None
    if result is not None and not result.gate.passed:
        failed = result.gate.build_failed
        exit_code = BuildError.exit_code if failed else GateError.exit_code
        problem = f"{gate_failure(result.gate.reasons, failed)} (build log: {result.outcome.log_path})"
    elif isinstance(called.error, KilnError):
        problem = called.error.render()
    elif done.returncode != 0:
        # Killed, or a crash whose traceback is in its output.
        problem = run.exit_description(done.returncode)
        if done.returncode > 0:
            problem += ":\n" + "\n".join(done.output.strip().splitlines()[-6:])
    return ShardRun(
        index=index,
        count=job.count,
        exit_code=exit_code,
        wall_seconds=done.wall_seconds,
        jobs=jobs,
        record=result.record if result is not None else None,
        problem=problem,
    )


@dataclass(frozen=True)
class LocalExecutor:
    """Shard jobs as processes on this machine, at most *parallel* at a time (default:
    one per core), sharing its cores; then the link job in this process."""

    name: str = "local"

    @classmethod
    def from_settings(cls, settings: ExecutorSettings) -> LocalExecutor:
        if settings:
            raise UsageError(
                f"The local executor takes no settings; got {', '.join(sorted(settings))}.",
                hint="Drop them, or pick the executor they belong to.",
            )
        return cls()

    def run(self, job: ShardedJob) -> ShardedRun:
        options = job.options
        # A package that excludes the cell's Python is refused once, here, not by each
        # shard's gate after its environment and configure.
        check_requires_python(
            fetch_source(job.loaded, sources_dir()),
            interpreter_version(job.cell.python),
            job.cell.id,
        )
        workdir = resolve_workdir(options.workdir)
        shards_dir = job.shards_dir
        for old in [*shards_dir.glob("*.tar.gz"), *shards_dir.glob("*.shard.json")]:
            old.unlink()
        cpus = os.cpu_count() or 1
        parallel = max(1, min(job.count, job.parallel or cpus))
        ui.info(
            f"Sharding {job.cell.id} {job.count} ways: {parallel} shard job(s) at a time, "
            + (f"{options.jobs} compile job(s) each" if options.jobs else f"sharing {cpus} cores")
        )
        started = time.perf_counter()
        shards: dict[int, ShardRun] = {}
        begun: list[int] = []

        def where() -> str | None:
            running = [index for index in begun if index not in shards]
            return shards_progress(job, workdir, running)

        with (
            ui.step(f"Compiling {job.count} shards", where=where),
            ThreadPoolExecutor(parallel) as pool,
        ):

            def start(index: int, jobs: int) -> Future[run.ChildCall[ShardResult]]:
                begun.append(index)
                return pool.submit(_run_shard, job, index, workdir, jobs)

            for index, jobs, done in schedule_shards(
                job.count, parallel, cpus, options.jobs, start
            ):
                shard = shards[index] = _shard_run(job, index, jobs, done)
                _say_how_it_ended(shard)
        shards_wall = time.perf_counter() - started
        link: LinkRun | None = None
        handed_over = sum(1 for shard in shards.values() if shard.exit_code == 0)
        link_error: KilnError | None = nothing_to_link(job.cell.id, list(shards.values()), handed_over)
        if link_error is None:
            try:
                linked = run_link(
                    job.loaded,
                    job.cell,
                    shards_dir,
                    job.out_dir,
                    executor_job(options, workdir),
                    expected_count=job.count,
                    smoke=job.smoke,
                )
                link = LinkRun(linked.record, linked.gate, linked.outcome.wall_seconds)
            except KilnError as exc:
                link_error = exc
        return ShardedRun(
            job=replace(job, parallel=parallel),
            shards=tuple(shards[i] for i in sorted(shards)),
            link=link,
            link_error=link_error,
            parallel=parallel,
            cpus=cpus,
            shards_wall_seconds=shards_wall,
            wall_seconds=time.perf_counter() - started,
        )


def shards_progress(job: ShardedJob, workdir: Path, running: list[int]) -> str | None:
    """Where each running shard's build has got to, from its build log's latest
    progress line (``shard 1/3: [66/254] Linking target ...``); None before any has one."""
    said = []
    for index in running:
        log = job_directory(workdir, job.cell, shard_job_suffix(index, job.count)) / "build.log"
        latest = ui.latest_progress(log)
        if latest is not None:
            said.append(f"{shard_label(index, job.count)}: {latest[:60]}")
    return " · ".join(said) or None


def _say_how_it_ended(shard: ShardRun) -> None:
    label = shard_label(shard.index, shard.count)
    if shard.exit_code < 0:
        ui.warn(f"{label} was {shard.status}")
    elif shard.exit_code == BuildError.exit_code:
        ui.warn(f"{label}: its build failed")
    elif shard.exit_code != 0:
        ui.warn(f"{label} failed its gate")
    else:
        actions = (shard.record or {}).get("shard", {}).get("actions", {})
        ui.info(
            f"  {label}: {actions.get('compile', 0)} compiled, {actions.get('stub', 0)} stubbed "
            f"in {round(shard.wall_seconds, 3):.1f} s at -j{shard.jobs}"
        )
