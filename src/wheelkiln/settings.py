"""A build's settings, resolved once.

:func:`resolve_build_settings` owns the defaults and the cascade: the recipe's value,
then the environment's, then the command line's, last one given wins. What it returns is
frozen; a job that needs different settings (a shard job's private cache, the link
job's, a bench scenario's namespace) derives them here with :func:`dataclasses.replace`,
so no field is lost on the way.

Two settings keep a default that depends on the job, so they stay ``None`` until the job
knows it: ``cache_dir`` (a build uses ``$KILN_HOME/<cache>``, shard and link jobs a
private, emptied directory beside their tree) and ``jobs`` (``job_env.resolve_jobs``
reads the recipe's env as expanded in the build environment, which exists only then).

How kiln sets up one job, as opposed to what the user chose, is a :class:`JobSetup`:
the job directory's suffix, the seat wrapper, environment added by kiln, a hook that
edits the private tree, and whether progress is shown. No command-line option or recipe
key reaches it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from wheelkiln.errors import RecipeError
from wheelkiln.paths import resolve_workdir

if TYPE_CHECKING:
    from wheelkiln.recipe.load import LoadedRecipe

DEFAULT_SOURCE_DATE_EPOCH = 1700000000


@dataclass(frozen=True)
class JobSetup:
    """How kiln sets up one job; never a user setting."""

    suffix: str = ""
    """Appended to the cell id to name the job directory (:func:`wheelkiln.cells.shard_job_suffix`)
    and its steps (``link``)."""
    in_cell_directory: bool = False
    """Build in the cell's own job directory, the one an unsharded build uses, whatever
    the suffix (the link job): a package that records its build's directories in the
    wheel (contourpy's ``_build_config.py``) then makes the same wheel either way."""
    seat_wrapper: bool = False
    """Put the seat wrapper in front of every compiler (shard jobs)."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """Environment kiln adds last (the wrapper's settings, the link job's ccache log)."""
    prepare_tree: Callable[[Path], bool] | None = None
    """Called with the private tree before the build (the source partition, stubs); True
    when it changed the tree, which is then digested again."""
    quiet: bool = False
    """No progress steps (the bench shows its own)."""


@dataclass(frozen=True)
class BuildOptions:
    """How one cell is built: the user's settings, resolved, and the job's setup."""

    cache: str = "ccache"
    """The compiler cache backend: ccache, sccache or none."""
    cache_dir: Path | None = None
    """The local cache directory; ``None``: the job's default (see the module doc)."""
    namespace: str | None = None
    """The cache namespace (key prefix); ``None``: none."""
    recache: bool = False
    """Compile everything and overwrite cache entries."""
    remote: str | None = None
    """The remote cache; ``None``: none."""
    workdir: Path | None = None
    """Where job trees are built; resolved by :func:`resolve_build_settings`."""
    jobs: int | None = None
    """Parallel compile jobs; ``None``: the job's default (see the module doc)."""
    source_date_epoch: int = DEFAULT_SOURCE_DATE_EPOCH
    """SOURCE_DATE_EPOCH for the build (the bench moves it to change every input)."""
    job: JobSetup = JobSetup()
    """How kiln sets up the job; apart from the settings above."""


def resolve_build_settings(
    loaded: LoadedRecipe,
    *,
    cache: str | None = None,
    cache_dir: Path | None = None,
    namespace: str | None = None,
    recache: bool = False,
    remote: str | None = None,
    workdir: Path | None = None,
    jobs: int | None = None,
    source_date_epoch: int | None = None,
) -> BuildOptions:
    """The settings of one build: each argument is the command line's value (``None``:
    not given), over the environment's, over the recipe's, over kiln's default.

    The environment speaks through ``$KILN_HOME`` (the default work directory) and, for
    ``jobs``, the variables :func:`wheelkiln.builder.job_env.resolve_jobs` reads.
    """
    # here, not at the top: cache.remote loads the console (rich), which the rest of
    # this module does not need
    from wheelkiln.cache.remote import check_remote

    recipe_cache = loaded.recipe.cache
    check_remote(remote, "--remote")
    if not remote:
        check_remote(recipe_cache.remote, f"{loaded.path}: key 'cache.remote'", RecipeError)
    if source_date_epoch is None:
        source_date_epoch = DEFAULT_SOURCE_DATE_EPOCH
    return BuildOptions(
        cache=cache or recipe_cache.backend,
        cache_dir=cache_dir,
        namespace=namespace or recipe_cache.namespace,
        recache=recache,
        remote=remote or recipe_cache.remote,
        workdir=resolve_workdir(workdir),
        jobs=jobs,
        source_date_epoch=source_date_epoch,
    )


@dataclass(frozen=True)
class ExecutorChoice:
    """The engine of a sharded build and its settings, resolved."""

    engine: str
    """'local' or 'dask'."""
    settings: dict[str, str]
    """The engine's settings by name (``scheduler``, ``handoff``, ``worker_memory``), only
    those given somewhere; the engine checks them."""


def resolve_executor(
    loaded: LoadedRecipe,
    *,
    engine: str | None = None,
    scheduler: str | None = None,
    handoff: Path | None = None,
    worker_memory: int | None = None,
) -> ExecutorChoice:
    """The executor of a sharded build: each argument is the command line's value or its
    variable's (``None``: neither), over the recipe's ``[executor]`` key, over the
    default (``local``). A relative ``executor.handoff`` is read against the recipe file.
    The recipe's fleet keys apply only when the engine is ``dask``."""
    config = loaded.recipe.executor
    chosen = engine or config.engine or "local"
    if chosen != "dask":
        return ExecutorChoice(chosen, {})
    if handoff is None and config.handoff is not None:
        from wheelkiln.output_paths import check_output_dir

        # Checked here, where the key is known: the executor names only --handoff.
        handoff = check_output_dir(
            loaded.resolve(config.handoff), f"{loaded.path}: key 'executor.handoff':"
        )
    found = {
        "scheduler": scheduler or config.scheduler,
        "handoff": handoff,
        "worker_memory": worker_memory or config.worker_memory,
    }
    return ExecutorChoice(
        chosen, {name: str(value) for name, value in found.items() if value is not None}
    )


def with_job(options: BuildOptions, setup: JobSetup) -> BuildOptions:
    """*options* for a job that kiln sets up as *setup* (a bench scenario's build)."""
    return replace(options, job=setup)


def executor_job(options: BuildOptions, workdir: Path, jobs: int | None = None) -> BuildOptions:
    """What an executor hands one job of a sharded build: the executor's work directory,
    the job's own cache directory (each shard and the link job make a private one), and
    for a shard job the compile jobs its scheduler gave it."""
    return replace(
        options, cache_dir=None, workdir=workdir, jobs=jobs if jobs is not None else options.jobs
    )


def seat_job(
    options: BuildOptions,
    *,
    suffix: str,
    workdir: Path,
    cache_dir: Path | None,
    extra_env: Mapping[str, str],
    prepare_tree: Callable[[Path], bool],
) -> BuildOptions:
    """A build with the seat wrapper in front of every compiler: a shard job, or the
    census pass. Its local cache starts fresh in *cache_dir* (the shard's archive is
    what it hands over); a recache has nothing to overwrite there."""
    return replace(
        options,
        workdir=workdir,
        cache_dir=cache_dir,
        recache=False,
        job=replace(
            options.job,
            suffix=suffix,
            seat_wrapper=True,
            extra_env={**options.job.extra_env, **extra_env},
            prepare_tree=prepare_tree,
        ),
    )


def link_job(
    options: BuildOptions, *, workdir: Path, cache_dir: Path, extra_env: Mapping[str, str]
) -> BuildOptions:
    """The link job's build: the full build over *cache_dir*, which holds the merged
    shard caches. No recache: the link gate counts hits on the shards' entries, and a
    recache would miss every one of them."""
    return replace(
        options,
        workdir=workdir,
        cache_dir=cache_dir,
        recache=False,
        job=JobSetup(
            suffix="link",
            in_cell_directory=True,
            extra_env={**options.job.extra_env, **extra_env},
            quiet=options.job.quiet,
        ),
    )
