"""``kiln build``: one cell into a wheel, whole, or sharded locally or on a Dask fleet."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from wheelkiln import ui
from wheelkiln.cli.options import (
    CONTEXT,
    builder_lock,
    cache_dir_option,
    cache_option,
    cell_option,
    check_cell_locations,
    check_finite,
    check_job_locations,
    emit_json,
    jobs_option,
    json_option,
    namespace_option,
    out_dir_option,
    partition_option,
    recipe_argument,
    remote_option,
    renamed,
    smoke_option,
    summary_table,
    workdir_option,
)
from wheelkiln.errors import UsageError

if TYPE_CHECKING:
    from wheelkiln.builder.job import BuildResult


def _cache_line(record: dict[str, Any]) -> str:
    cache = record["cache"]
    if "total" not in cache:
        return "none"
    return (
        f"{cache['backend']}: {cache['hits']} hits, {cache['misses']} misses "
        f"(of {cache['total']} cacheable), {cache['uncacheable']} uncacheable"
    )


@click.command(context_settings=CONTEXT)
@recipe_argument()
@cell_option()
@cache_option(allow_none=True, default="the recipe's, normally ccache")
@out_dir_option("dist", "the wheel and its build record")
@click.option(
    "--shards",
    type=click.IntRange(1, 256),
    help="Shard the compile N ways (locally, or on a fleet with --executor dask), then link.",
)
@partition_option(
    "With --shards: how shards drop each other's TUs, seat or source (default: the "
    "recipe's sharding.partition)."
)
@workdir_option()
@cache_dir_option()
@jobs_option()
@click.option(
    "--recache", is_flag=True, help="Compile everything and overwrite cache entries (cold); CMake's checks run again."
)
@namespace_option()
@remote_option()
@smoke_option(
    "Run the recipe's smoke test (or import) in a venv with the wheel, its Requires-Dist "
    "and [verify] requires; also when the wheel cache serves the build."
)
@click.option(
    "--no-wheel-cache",
    is_flag=True,
    help="Build even when the wheel cache holds a wheel for these exact inputs.",
)
@click.option(
    "--lock-timeout",
    type=click.FloatRange(0),
    callback=lambda ctx, param, value: check_finite(value, "--lock-timeout"),
    help="Seconds to wait for another build on this builder (default: wait).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "dask"]),
    envvar="KILN_EXECUTOR",
    help="With --shards: the engine that runs the shard and link jobs (default: "
    "$KILN_EXECUTOR, else the recipe's executor.engine, else local).",
)
@click.option(
    "--scheduler",
    envvar="KILN_SCHEDULER",
    help="With --executor dask: the Dask scheduler, tcp://HOST:PORT (default: "
    "$KILN_SCHEDULER, else the recipe's executor.scheduler).",
)
@click.option(
    "--handoff",
    type=click.Path(path_type=Path),
    envvar="KILN_HANDOFF",
    help="With --executor dask: a directory every worker sees at the same path, for the "
    "source bundle, the shard archives and the wheel (default: $KILN_HANDOFF, else the "
    "recipe's executor.handoff). Without one, the shards hand over through the remote "
    "cache storage (--remote) and the rest travels through Dask.",
)
@click.option(
    "--worker-memory",
    type=click.IntRange(1),
    envvar="KILN_WORKER_MEMORY",
    help="With --executor dask: GB of the workers' MEM_GB resource each task asks for "
    "(default: $KILN_WORKER_MEMORY, else the recipe's executor.worker_memory, else none).",
)
@json_option("the build record")
def build(
    recipe_ref: str,
    cell: str | None,
    cache_name: str | None,
    out_dir: Path,
    shards: int | None,
    partition: str | None,
    former_filter: str | None,
    workdir: Path | None,
    cache_dir: Path | None,
    jobs: int | None,
    recache: bool,
    namespace: str | None,
    remote: str | None,
    smoke: bool,
    no_wheel_cache: bool,
    lock_timeout: float | None,
    executor: str | None,
    scheduler: str | None,
    handoff: Path | None,
    worker_memory: int | None,
    as_json: bool,
) -> None:
    """Build one cell of RECIPE (a path, or a name under recipes/) into a wheel.

    The cache sits in front of every compiler the package calls. A build record (JSON)
    with timings, cache counters and digests is written beside the wheel.
    """
    from wheelkiln.builder.job import run_build
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.recipe.load import find_recipe
    from wheelkiln.settings import resolve_build_settings, resolve_executor

    partition, partition_given_as = renamed(partition, former_filter, "--partition", "--filter")
    _refuse_inapplicable(
        shards,
        {
            "--cache none": cache_name == "none",
            "--cache-dir": cache_dir is not None,
            "--recache": recache,
            "--no-wheel-cache": no_wheel_cache,
        },
        {partition_given_as: partition is not None, "--executor": _on_command_line("executor")},
    )
    locations = check_job_locations(out_dir, workdir, cache_dir)
    out_dir, workdir, cache_dir = locations.out_dir, locations.workdir, locations.cache_dir
    loaded = find_recipe(recipe_ref)
    # $KILN_EXECUTOR, the fleet's variables and the recipe's [executor] are defaults for
    # sharded builds; only the options given on the command line are refused where they
    # do not apply.
    choice = (
        resolve_executor(
            loaded,
            engine=executor,
            scheduler=scheduler,
            handoff=handoff,
            worker_memory=worker_memory,
        )
        if shards is not None
        else None
    )
    dask = choice is not None and choice.engine == "dask"
    given = [
        f"--{key.replace('_', '-')}"
        for key in ("scheduler", "handoff", "worker_memory")
        if _on_command_line(key)
    ]
    if dask and workdir is not None:
        raise UsageError(
            "--workdir cannot be used with the dask executor: the fleet's workers build under "
            "their own $KILN_HOME.",
            hint="Drop --workdir, or set KILN_HOME for each `dask worker`.",
        )
    if not dask and given:
        raise UsageError(
            f"{', '.join(given)} applies only with the dask executor.",
            hint="Add --shards N --executor dask (or the recipe's executor.engine = 'dask'), "
            "or drop the option.",
        )
    chosen = select_cell(loaded.recipe, cell)
    loaded = check_cell_locations(locations, loaded, chosen)
    options = resolve_build_settings(
        loaded,
        cache=cache_name,
        cache_dir=cache_dir,
        namespace=namespace,
        remote=remote,
        recache=recache,
        workdir=workdir,
        jobs=jobs,
    )
    if choice is not None and shards is not None:
        from wheelkiln.executors.sharded import run_sharded

        # No builder lock for the fleet: its workers build, each under its own lock and
        # its builder resource, and this machine may well be one of them.
        with contextlib.nullcontext() if dask else builder_lock(lock_timeout):
            run_sharded(
                loaded,
                chosen,
                options,
                shards,
                out_dir=out_dir,
                partition=partition,
                smoke=smoke,
                on_report=emit_json if as_json else None,
                executor=choice.engine,
                executor_settings=choice.settings,
            )
        return
    with builder_lock(lock_timeout):
        result = run_build(
            loaded,
            chosen,
            options,
            out_dir,
            smoke=smoke,
            use_wheel_cache=not (no_wheel_cache or recache),
        )
        if result.outcome is not None and result.record_path is not None:
            # Here, not in run_build: the trace reads shard-side logs, and builder/
            # imports nothing from shard/ (shard/ imports builder/).
            from wheelkiln.shard.trace import write_job_trace

            write_job_trace(
                result.record_path, result.outcome.job_dir, result.outcome.tu_outcomes, result.record
            )
    if as_json:
        emit_json(result.record)
    if result.served is not None:
        _print_served(result, chosen.id, smoke=smoke)
    else:
        _print_built(result, chosen.id)


def _print_built(result: BuildResult, cell_id: str) -> None:
    from wheelkiln.builder.wheel_checks import describe_verify

    record = result.record
    rows = [
        ("cell", cell_id),
        ("wheel", str(record["wheel"]["path"])),
        ("wall / CPU", f"{record['wall_seconds']:.1f} s / {record['cpu_seconds']:.1f} s"),
        ("peak memory", f"{record['peak_rss_bytes'] / 2**20:.0f} MiB"),
        ("cache", _cache_line(record)),
        ("extension modules", str(len(record["extensions"]))),
        ("verify", describe_verify(record.get("verify"))),
        ("record", str(result.record_path)),
    ]
    ui.console.print(summary_table("kiln build", rows))
    missed = record["cache"]["missed_tus"]
    if missed and record["cache"].get("hits", 0):
        ui.info(f"{len(missed)} TU(s) missed the cache: " + escape(", ".join(missed[:10])))


def _on_command_line(parameter: str) -> bool:
    source = click.get_current_context().get_parameter_source(parameter)
    return source is click.core.ParameterSource.COMMANDLINE


def _print_served(result: BuildResult, cell_id: str, *, smoke: bool) -> None:
    from wheelkiln.builder.wheel_checks import describe_verify

    record, hit = result.record, result.served
    assert hit is not None
    rows = [
        ("cell", cell_id),
        ("wheel", str(result.wheel)),
        (
            "served from",
            f"the wheel cache (input digest {hit.digest[:16]}…, built "
            f"{hit.record.get('cached_at', '?')})",
        ),
        (
            "wall",
            f"{record['wall_seconds']:.2f} s (the build that made the wheel: "
            f"{hit.record.get('wall_seconds', '?')} s)",
        ),
        ("bypass", "--no-wheel-cache rebuilds through the compiler cache"),
    ]
    if smoke:
        rows.append(("verify", describe_verify({"smoke": record["verify"]["smoke"]})))
    ui.console.print(summary_table("kiln build", rows))


def _refuse_inapplicable(
    shards: int | None, without_shards: dict[str, bool], only_with_shards: dict[str, bool]
) -> None:
    """Refuse options that the chosen mode would ignore, instead of ignoring them.

    A sharded build gives each shard job a private cache directory and a fresh cache (so
    --cache-dir and --recache have nothing to act on), hands over a compiler cache (so it
    needs one), and never serves from the wheel cache.
    """
    if shards is not None:
        given = [name for name, present in without_shards.items() if present]
        if given:
            raise UsageError(
                f"{', '.join(given)} cannot be used with --shards: a sharded build gives each "
                "shard a private, fresh compiler cache and never uses the wheel cache.",
                hint="Drop the option, or build unsharded.",
            )
    else:
        given = [name for name, present in only_with_shards.items() if present]
        if given:
            raise UsageError(
                f"{', '.join(given)} applies only with --shards N.",
                hint="Add --shards N, or drop the option.",
            )
