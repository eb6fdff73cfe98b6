"""What an executor is: the Protocol every engine implements, and the typed values that
go in (a :class:`ShardedJob`) and come out (a :class:`ShardedRun`).

An executor runs the N shard jobs of one cell and then its link job, wherever it runs
them (local processes, a Dask cluster). It decides placement and parallelism; the work
of each job is :func:`wheelkiln.shard.job.run_shard` and
:func:`wheelkiln.shard.link.run_link`, and what the run means (the table, the gate
verdict, the report) is decided once for every engine, in
:mod:`wheelkiln.executors.sharded`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from wheelkiln import run
from wheelkiln.cells import Cell, shard_label
from wheelkiln.errors import BuildError, GateError, KilnError
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.settings import BuildOptions
from wheelkiln.shard.gate import LinkGateResult


@dataclass(frozen=True)
class ShardedJob:
    """One cell to build sharded: N shard jobs, then the link job."""

    loaded: LoadedRecipe
    cell: Cell
    options: BuildOptions
    """The build's options; each shard job gets a private cache directory of its own."""
    count: int
    """N, the number of shard jobs."""
    out_dir: Path
    """Where the link job's wheel and record go."""
    shards_dir: Path
    """Where the shard jobs' archives and records go, and the link job finds them."""
    partition: str | None = None
    """How shards drop the TUs that are not theirs (seat or source); None: the recipe's."""
    smoke: bool = False
    """Run the recipe's smoke test on the linked wheel."""
    parallel: int | None = None
    """Most shard jobs running at once; None: the engine decides."""


@dataclass(frozen=True)
class ShardRun:
    """How one shard job ended, as the executor saw it."""

    index: int
    count: int
    exit_code: int
    """0 passed; positive: the job failed (its gate, or an error); negative: killed by
    that signal (-9: SIGKILL)."""
    wall_seconds: float
    """The whole job, not only the build inside it."""
    jobs: int
    """Parallel compile jobs the shard was given."""
    record: dict[str, Any] | None
    """The shard's build record (``kind: shard``); None when the job ended without one."""
    problem: str | None = None
    """Why the shard did not pass, in words; None when it passed."""
    placement: Mapping[str, Any] | None = None
    """Where an engine that places jobs on other machines ran it (the Dask executor:
    every worker that started it, the tries, the start latency); None for local jobs."""

    @property
    def status(self) -> str:
        """``passed``, ``killed by SIGKILL``, ``exit 5``."""
        return process_status(self.exit_code)

    @property
    def signal(self) -> str | None:
        return run.signal_name(self.exit_code)


@dataclass(frozen=True)
class LinkRun:
    """How the link job ended, as the executor saw it: its record (``kind: link``,
    written beside the wheel in the job's ``out_dir``) and its gate."""

    record: dict[str, Any]
    gate: LinkGateResult
    wall_seconds: float
    """The link job's build (local), or its whole task (on a fleet)."""


@dataclass(frozen=True)
class ShardedRun:
    """What an executor hands back: every shard job, then the link job's result or the
    error that ended it (a failed full build, a wheel that fails its checks)."""

    job: ShardedJob
    shards: tuple[ShardRun, ...]
    """In index order, one per shard job."""
    link: LinkRun | None
    link_error: KilnError | None
    parallel: int
    """Shard jobs that ran at once."""
    cpus: int
    """Cores of the machine the shard jobs shared (for the summary's honest label)."""
    shards_wall_seconds: float
    wall_seconds: float
    workers: Mapping[str, Mapping[str, float]] | None = None
    """A fleet's workers and the resources each offered; None for one machine."""


class Executor(Protocol):
    """An engine that runs one sharded cell: its N shard jobs, then its link job.

    ``run`` returns normally when every job ran, whatever their verdicts: a shard that
    failed or was killed is a :class:`ShardRun` with a non-zero ``exit_code``, and a
    link job that failed outright is ``link_error``. It raises only when the jobs could
    not be run at all (bad arguments, an engine that cannot be reached).
    """

    @property
    def name(self) -> str:
        """The name the registry knows the engine by."""
        ...

    def run(self, job: ShardedJob) -> ShardedRun: ...


ExecutorSettings = Mapping[str, str]
"""Engine-specific settings by name (e.g. a scheduler address); the local executor takes none."""


def process_status(returncode: int) -> str:
    """How a shard process ended, in words: ``passed``, ``killed by SIGKILL``, ``exit 5``."""
    return "passed" if returncode == 0 else run.exit_description(returncode)


def shard_failure(shard: ShardRun) -> str | None:
    """Why one shard job did not pass, in a line naming it; None when it passed."""
    label = shard_label(shard.index, shard.count)
    if shard.exit_code < 0:
        return f"{label}: {shard.status} after {round(shard.wall_seconds, 3):.1f} s"
    if shard.exit_code != 0:
        return f"{label}: {shard.problem or shard.status}"
    return None


def gate_failure(reasons: Sequence[str], build_failed: bool) -> str:
    """A shard's gate failure in one line, as local and fleet shards both say it: its
    package's own build broke (exit 4), or the gate refused its work (exit 5)."""
    return f"{'its build failed' if build_failed else 'failed its gate'}: {'; '.join(reasons)}"


def nothing_to_link(cell_id: str, shards: Sequence[ShardRun], handed_over: int) -> KilnError | None:
    """The error that stands in for the link job when no shard handed over its work
    (*handed_over* is how many did): that link job would compile every TU again, at the
    cost of an unsharded build, and fail its gate all the same. A build failure (exit 4)
    where every shard's own build failed, as it would unsharded; else a gate failure."""
    if handed_over:
        return None
    failures = [failure for shard in shards if (failure := shard_failure(shard)) is not None]
    broken = bool(shards) and all(shard.exit_code == BuildError.exit_code for shard in shards)
    return (BuildError if broken else GateError)(
        f"No shard of {cell_id} passed, so its link job did not run:\n- "
        + "\n- ".join(failures or ["no shard handed over its archive"]),
        hint="Mend what the shards' errors above name and run again; `kiln build` without "
        "--shards builds it in one job.",
    )
