"""The ``kiln`` command. The only place that turns errors into exit codes."""

from __future__ import annotations

import json
import math
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from wheelkiln import ui
from wheelkiln.errors import BuildError, GateError, KilnError, UsageError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_namespace(value: str | None) -> str | None:
    """A cache namespace names a directory (sccache) and a key prefix: one plain name,
    never a path (``/etc`` or ``../..`` would put the cache anywhere)."""
    if value is not None and not _NAMESPACE.fullmatch(value):
        raise click.BadParameter(
            f"{value!r} is not a namespace: use 1-100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit.",
            param_hint="'--namespace'",
        )
    return value


def check_finite(value: float | None, option: str) -> float | None:
    if value is not None and math.isnan(value):
        raise click.BadParameter("nan is not a number of seconds.", param_hint=f"'{option}'")
    return value


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="wheelkiln")
def cli() -> None:
    """wheelkiln: build heavy native Python wheels fast and honestly.

    Every compile goes through a correct compiler cache; one package's compile can be
    sharded across N jobs that hand over a cache, with a link job that must see zero
    misses; and benchmarks report medians with n.
    """


# --- recipes -------------------------------------------------------------------------


@cli.group(context_settings=CONTEXT)
def recipe() -> None:
    """Validate recipes and print their schema."""


@recipe.command("check", context_settings=CONTEXT)
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def recipe_check(files: tuple[Path, ...], as_json: bool) -> None:
    """Validate recipe FILES: unknown keys, wrong types, contradictions."""
    from wheelkiln.matrix.cells import expand_cells
    from wheelkiln.recipe.load import load_recipe

    results: list[dict[str, Any]] = []
    failures: list[KilnError] = []
    for path in files:
        try:
            loaded = load_recipe(path)
        except KilnError as exc:
            failures.append(exc)
            results.append({"file": str(path), "ok": False, "error": exc.message})
            continue
        cells = expand_cells(loaded.recipe)
        results.append({"file": str(path), "ok": True, "name": loaded.name, "cells": len(cells)})
    if as_json:
        emit_json(results)
    else:
        for result in results:
            if result["ok"]:
                ui.info(
                    f"[green]ok[/green]   {result['file']}: {result['name']}, {result['cells']} cell(s)"
                )
    if failures:
        if len(failures) == 1:
            raise failures[0]
        raise KilnError(
            "\n\n".join(f.render() for f in failures),
            hint=f"{len(failures)} of {len(files)} recipes are invalid.",
        )


@recipe.command("schema", context_settings=CONTEXT)
def recipe_schema() -> None:
    """Print the recipe JSON schema (generated from the typed model)."""
    from wheelkiln.recipe.load import render_schema

    click.echo(render_schema(), nl=False)


# --- build ---------------------------------------------------------------------------


def _summary_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(key, Text(value, overflow="fold"))  # a long path folds, never cut
    return table


def _cache_line(record: dict[str, Any]) -> str:
    cache = record["cache"]
    if "total" not in cache:
        return "none"
    return (
        f"{cache['backend']}: {cache['hits']} hits, {cache['misses']} misses "
        f"(of {cache['total']} cacheable), {cache['uncacheable']} uncacheable"
    )


@cli.command(context_settings=CONTEXT)
@click.argument("recipe_ref", metavar="RECIPE")
@click.option("--cell", help="Cell id or 'axis=value,...' (default: this host's cell).")
@click.option(
    "--cache",
    "cache_name",
    type=click.Choice(["ccache", "sccache", "none"]),
    help="Compiler cache (default: the recipe's, normally ccache).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Where the wheel and its build record go.",
)
@click.option(
    "--shards", type=click.IntRange(1, 256), help="Shard the compile N ways locally, then link."
)
@click.option(
    "--filter",
    "mechanism",
    type=click.Choice(["seat", "source"]),
    help="With --shards: the partition mechanism (default: the recipe's).",
)
@click.option(
    "--workdir",
    type=click.Path(path_type=Path),
    help="Where job trees are built (default: $KILN_HOME/work).",
)
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path),
    help="The local cache directory (default: $KILN_HOME/<cache>).",
)
@click.option("--jobs", "-j", type=click.IntRange(1), help="Parallel compile jobs.")
@click.option(
    "--recache", is_flag=True, help="Compile everything and overwrite cache entries (cold)."
)
@click.option(
    "--namespace",
    callback=lambda ctx, param, value: check_namespace(value),
    help="Cache namespace / key prefix isolating this build's entries.",
)
@click.option(
    "--smoke",
    is_flag=True,
    help="Run the recipe's smoke test (or import) in a venv with the wheel, its Requires-Dist "
    "and [verify] requires; also when the wheel cache serves the build.",
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
@click.option("--json", "as_json", is_flag=True, help="Print the build record as JSON on stdout.")
def build(
    recipe_ref: str,
    cell: str | None,
    cache_name: str | None,
    out_dir: Path,
    shards: int | None,
    mechanism: str | None,
    workdir: Path | None,
    cache_dir: Path | None,
    jobs: int | None,
    recache: bool,
    namespace: str | None,
    smoke: bool,
    no_wheel_cache: bool,
    lock_timeout: float | None,
    as_json: bool,
) -> None:
    """Build one cell of RECIPE (a path, or a name under recipes/) into a wheel.

    The cache sits in front of every compiler the package calls. A build record (JSON)
    with timings, cache counters and digests is written beside the wheel.
    """
    from wheelkiln.builder.cell import BuildOptions, build_cell
    from wheelkiln.builder.record import build_record, publish
    from wheelkiln.builder.wheel_checks import describe_verify, verify_wheel
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.recipe.load import find_recipe

    _refuse_inapplicable(
        shards,
        {
            "--cache none": cache_name == "none",
            "--cache-dir": cache_dir is not None,
            "--recache": recache,
            "--no-wheel-cache": no_wheel_cache,
        },
        {"--filter": mechanism is not None},
    )
    check_job_locations(out_dir, workdir, cache_dir)
    loaded = find_recipe(recipe_ref)
    chosen = select_cell(loaded.recipe, cell)
    options = BuildOptions(
        cache=cache_name or loaded.recipe.cache.backend,
        cache_dir=cache_dir,
        namespace=namespace,
        recache=recache,
        workdir=workdir,
        jobs=jobs,
    )
    with builder_lock(lock_timeout):
        if shards is not None:
            from wheelkiln.executors.sharded import run_sharded

            run_sharded(
                loaded,
                chosen,
                options,
                shards,
                out_dir=out_dir,
                mechanism=mechanism,
                smoke=smoke,
                on_report=emit_json if as_json else None,
            )
            return
        use_wheel_cache = not (no_wheel_cache or recache)
        if use_wheel_cache and _serve_from_wheel_cache(
            loaded, chosen, options, out_dir, as_json, smoke=smoke
        ):
            return
        outcome = build_cell(loaded, chosen, options)
        record = build_record(outcome, kind="build", extra={"recache": recache})
        if outcome.exit_code != 0:
            tail = "\n".join(outcome.log_text.splitlines()[-25:])
            raise BuildError(
                f"Building {chosen.id} failed (exit {outcome.exit_code}). Last lines:\n{tail}",
                hint=f"Full log: {outcome.log_path}",
            )
        record["verify"] = verify_wheel(outcome, loaded, smoke=smoke)
        record_path = publish(outcome, record, out_dir)
        from wheelkiln.builder.record import remember
        from wheelkiln.builder.wheel_cache import WheelCache, outcome_input_digest

        digest = outcome_input_digest(loaded, outcome, options)
        # Also in the state home, where `kiln build --shards` finds it whatever --out was.
        remember(record, digest)
        if use_wheel_cache and outcome.wheel is not None:
            WheelCache().store(digest, outcome.wheel.path, record)
    if as_json:
        emit_json(record)
    rows = [
        ("cell", chosen.id),
        ("wheel", str(record["wheel"]["path"])),
        ("wall / CPU", f"{record['wall_seconds']:.1f} s / {record['cpu_seconds']:.1f} s"),
        ("peak memory", f"{record['peak_rss_bytes'] / 2**20:.0f} MiB"),
        ("cache", _cache_line(record)),
        ("extension modules", str(len(record["extensions"]))),
        ("verify", describe_verify(record.get("verify"))),
        ("record", str(record_path)),
    ]
    ui.console.print(_summary_table("kiln build", rows))
    missed = record["cache"]["missed_tus"]
    if missed and record["cache"].get("hits", 0):
        ui.info(f"{len(missed)} TU(s) missed the cache: " + escape(", ".join(missed[:10])))


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


@contextmanager
def builder_lock(timeout: float | None) -> Iterator[None]:
    """One build per builder: wait for (or inherit) the builder lock."""
    from wheelkiln.builder_lock import BuilderLock, describe

    lock = BuilderLock()
    if not lock.inherited():
        lock.acquire(
            timeout=timeout,
            on_wait=lambda holder: ui.info(
                f"Waiting for the builder lock ({describe(holder)}); --lock-timeout limits the wait."
            ),
        )
    try:
        yield
    finally:
        lock.release()


def _serve_from_wheel_cache(
    loaded: Any, cell: Any, options: Any, out_dir: Path, as_json: bool, *, smoke: bool
) -> bool:
    """Copy the wheel of an earlier build with the same input digest, if there is one."""
    import shutil
    import time

    from wheelkiln.builder.record import served_record
    from wheelkiln.builder.wheel_cache import WheelCache, plan_input_digest

    started, cpu_started = time.perf_counter(), time.process_time()
    digest = plan_input_digest(loaded, cell, options)
    hit = WheelCache().lookup(digest) if digest else None
    if hit is None:
        return False
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / hit.wheel.name
    shutil.copy2(hit.wheel, target)
    record = served_record(
        hit.record,
        wheel_path=target,
        input_digest=hit.digest,
        wall_seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
        backend=options.cache,
    )
    if smoke:
        # The smoke test belongs to this run: a wheel served from the cache is as
        # deliverable as a built one, and its runtime may have changed since.
        from wheelkiln.builder.wheel_checks import describe_verify, smoke_test

        try:
            ran = smoke_test(target, loaded, cell)
        except BuildError as exc:
            exc.hint = (
                f"The wheel was served from the wheel cache (input digest {hit.digest[:16]}…); "
                f"--no-wheel-cache rebuilds it. {exc.hint or ''}"
            ).strip()
            raise
        record["verify"] = {**record.get("verify", {}), "smoke": ran}
    if as_json:
        emit_json(record)
    rows = [
        ("cell", cell.id),
        ("wheel", str(target)),
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
    ui.console.print(_summary_table("kiln build", rows))
    return True


def check_job_locations(out_dir: Path, workdir: Path | None, cache_dir: Path | None = None) -> None:
    """Refuse unusable output locations before any work starts: a build that fails to
    write its wheel after an hour has lost the hour."""
    from wheelkiln.output_paths import check_output_dir
    from wheelkiln.paths import kiln_home

    check_output_dir(out_dir, "--out")
    check_output_dir(kiln_home(), "$KILN_HOME")
    if workdir is not None:
        check_output_dir(workdir, "--workdir")
    if cache_dir is not None:
        check_output_dir(cache_dir, "--cache-dir")


def _common_options(
    cache_name: str | None,
    loaded: Any,
    workdir: Path | None,
    jobs: int | None,
    namespace: str | None,
    cache_dir: Path | None = None,
) -> Any:
    from wheelkiln.builder.cell import BuildOptions

    return BuildOptions(
        cache=cache_name or loaded.recipe.cache.backend,
        workdir=workdir,
        jobs=jobs,
        namespace=namespace,
        cache_dir=cache_dir,
    )


F = TypeVar("F", bound=Callable[..., Any])


def job_options(command: F) -> F:
    """The options shard and link jobs share: cache, work tree, parallelism, namespace."""
    for option in reversed(
        [
            click.option(
                "--cache",
                "cache_name",
                type=click.Choice(["ccache", "sccache"]),
                help="Compiler cache (default: the recipe's).",
            ),
            click.option(
                "--workdir", type=click.Path(path_type=Path), help="Where the job tree is built."
            ),
            click.option("--jobs", "-j", type=click.IntRange(1), help="Parallel compile jobs."),
            click.option(
                "--namespace",
                callback=lambda ctx, param, value: check_namespace(value),
                help="Cache namespace.",
            ),
        ]
    ):
        command = option(command)
    return command


@cli.command(context_settings=CONTEXT)
@click.argument("recipe_ref", metavar="RECIPE")
@click.option("--cell", help="Cell id or 'axis=value,...' (default: this host's cell).")
@click.option(
    "--index", "index", type=click.IntRange(0), required=True, help="This shard's 0-based index."
)
@click.option(
    "--count",
    "count",
    type=click.IntRange(1, 256),
    help="N, the number of shards (default: the recipe's).",
)
@click.option(
    "--filter",
    "mechanism",
    type=click.Choice(["seat", "source"]),
    help="Partition mechanism (default: the recipe's).",
)
@click.option(
    "--partition-map",
    "partition_map",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="TU → shard map from `kiln shard-plan` (default: the recipe's sharding.partition_map).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("shards"),
    show_default=True,
    help="Where the shard's cache archive and record go.",
)
@job_options
@click.option("--json", "as_json", is_flag=True, help="Print the shard record as JSON on stdout.")
def shard(
    recipe_ref: str,
    cell: str | None,
    index: int,
    count: int | None,
    mechanism: str | None,
    partition_map: Path | None,
    out_dir: Path,
    cache_name: str | None,
    workdir: Path | None,
    jobs: int | None,
    namespace: str | None,
    as_json: bool,
) -> None:
    """Compile shard INDEX of COUNT of one cell and pack its compiler cache.

    Only this shard's slice of the TUs is compiled; the rest get empty objects. The
    build is expected to fail at its link step: the shard gate accepts that only with
    real objects, an unresolved-symbol line and no compiler diagnostic.
    """
    from wheelkiln.cells import shard_label
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.recipe.load import find_recipe
    from wheelkiln.shard.job import describe_stores, run_shard

    check_job_locations(out_dir, workdir)
    loaded = find_recipe(recipe_ref)
    chosen = select_cell(loaded.recipe, cell)
    total = count or loaded.recipe.sharding.count
    options = _common_options(cache_name, loaded, workdir, jobs, namespace)
    with builder_lock(None):
        result = run_shard(
            loaded,
            chosen,
            index,
            total,
            out_dir,
            options,
            mechanism=mechanism,
            partition_map_path=partition_map.resolve() if partition_map else None,
        )
    if as_json:
        emit_json(result.record)
    label = shard_label(index, total)
    actions = result.gate.actions
    rows = [
        ("cell", chosen.id),
        ("shard", f"{label} ({result.mechanism})"),
        (
            "TUs",
            f"{actions.get('compile', 0)} compiled, {actions.get('stub', 0)} stubbed, "
            f"{actions.get('probe', 0)} probes, {actions.get('link-unresolved', 0)} tolerated link failures",
        ),
        ("build exit", str(result.outcome.exit_code)),
        ("failed links", "\n".join(result.gate.links) or "none"),
        ("cache stores", describe_stores(result.record["cache"])),
        ("wall", f"{result.outcome.wall_seconds:.1f} s"),
        ("archive", str(result.archive) if result.archive else "none"),
    ]
    ui.console.print(_summary_table("kiln shard", rows))
    if not result.gate.passed:
        raise GateError(
            f"{label} of {chosen.id} failed its gate:\n- " + "\n- ".join(result.gate.reasons),
            hint=f"Build log: {result.outcome.log_path}",
        )


def _size_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """A byte size: ``64MiB``, ``3GB``, ``20GiB`` or a plain number of bytes."""
    from wheelkiln.cache.archive import parse_size

    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def archive_limit_options(command: F) -> F:
    """The caps on what one shard archive may unpack to (see cache/archive.py)."""
    from wheelkiln.cache.archive import (
        DEFAULT_MAX_MEMBERS,
        DEFAULT_MAX_UNPACKED_SIZE,
        MAX_MEMBERS_ENV,
        MAX_UNPACKED_SIZE_ENV,
        format_size,
    )

    command = click.option(
        "--max-members",
        type=click.IntRange(1),
        help=f"Most members one shard archive may hold (default: ${MAX_MEMBERS_ENV}, "
        f"else {DEFAULT_MAX_MEMBERS:,}).",
    )(command)
    return click.option(
        "--max-unpacked-size",
        metavar="SIZE",
        callback=_size_option,
        help=f"Most bytes one shard archive may unpack to, e.g. 64MiB, 3GB (default: "
        f"${MAX_UNPACKED_SIZE_ENV}, else {format_size(DEFAULT_MAX_UNPACKED_SIZE)}).",
    )(command)


@cli.command(context_settings=CONTEXT)
@click.argument("recipe_ref", metavar="RECIPE")
@click.option("--cell", help="Cell id or 'axis=value,...' (default: this host's cell).")
@click.option(
    "--shards",
    "shards_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Directory holding the shard archives (searched recursively).",
)
@click.option(
    "--count",
    "count",
    type=click.IntRange(1, 256),
    help="N, when archives may be missing (default: from the archives).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Where the wheel and the link record go.",
)
@job_options
@archive_limit_options
@click.option(
    "--smoke",
    is_flag=True,
    help="Run the recipe's smoke test (or import) in a venv with the linked wheel, its "
    "Requires-Dist and [verify] requires.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the link record as JSON on stdout.")
def link(
    recipe_ref: str,
    cell: str | None,
    shards_dir: Path,
    count: int | None,
    out_dir: Path,
    cache_name: str | None,
    workdir: Path | None,
    jobs: int | None,
    namespace: str | None,
    max_unpacked_size: int | None,
    max_members: int | None,
    smoke: bool,
    as_json: bool,
) -> None:
    """Restore every shard's cache, run the full build, and gate on zero misses.

    The gate is a count: misses == 0 and total > 0. Missing or mismatched shards are
    named; the build still runs and its wheel is kept. The wheel gets the recipe's
    [verify] checks, as an unsharded build's does (with --smoke, the smoke test too). A
    failed full build is a build failure (exit 4) naming the TU and its diagnostic.
    """
    from wheelkiln.builder.wheel_checks import describe_verify
    from wheelkiln.cache.archive import ArchiveLimits
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.output_paths import check_input_dir
    from wheelkiln.recipe.load import find_recipe
    from wheelkiln.shard.ledger import describe_ledger
    from wheelkiln.shard.link import run_link

    limits = ArchiveLimits.resolve(max_unpacked_size, max_members)
    check_input_dir(shards_dir, "--shards")
    check_job_locations(out_dir, workdir)
    loaded = find_recipe(recipe_ref)
    chosen = select_cell(loaded.recipe, cell)
    options = _common_options(cache_name, loaded, workdir, jobs, namespace)
    with builder_lock(None):
        result = run_link(
            loaded,
            chosen,
            shards_dir,
            out_dir,
            options,
            expected_count=count,
            limits=limits,
            smoke=smoke,
        )
    if as_json:
        emit_json(result.record)
    gate = result.gate
    wheel = result.record.get("wheel")
    rows = [
        ("cell", chosen.id),
        ("cache", f"{gate.hits} hits, {gate.misses} misses, total {gate.total}"),
        ("wall", f"{result.outcome.wall_seconds:.1f} s"),
        ("wheel", wheel["path"] if wheel else "none"),
        ("verify", describe_verify(result.record.get("verify"))),
        ("ledger", describe_ledger(result.record["link"].get("ledger"))),
        ("record", str(result.record_path)),
    ]
    ui.console.print(_summary_table("kiln link", rows))
    for missed in gate.missed:
        shard_text = f"shard {missed['shard'] + 1}" if missed["shard"] is not None else "no shard"
        ui.info(escape(f"  missed {missed['tu']} ({shard_text}): {missed['difference']}"))
    if not gate.passed:
        raise GateError(
            f"The link gate of {chosen.id} failed:\n- " + "\n- ".join(gate.problems),
            hint="The wheel was kept. Re-run the named shards, or look at the missed TUs above.",
        )


@cli.command("shard-plan", context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option(
    "--count", "count", type=click.IntRange(1, 256), required=True, help="N shards to plan for."
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    required=True,
    help="The partition map to write (JSON); point sharding.partition_map at it.",
)
@archive_limit_options
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def shard_plan(
    sources: tuple[Path, ...],
    count: int,
    out_path: Path,
    max_unpacked_size: int | None,
    max_members: int | None,
    as_json: bool,
) -> None:
    """Balance TUs across COUNT shards by the compile times of an earlier sharded build.

    SOURCES are shard archives, shard job directories or wrapper.jsonl logs. Longest TU
    first onto the least-loaded shard; TUs never timed keep their hash shard.
    """
    from wheelkiln.cache.archive import ArchiveLimits
    from wheelkiln.cells import shard_label
    from wheelkiln.output_paths import check_output_file
    from wheelkiln.shard.balance import BalancePlan, balance, read_costs

    limits = ArchiveLimits.resolve(max_unpacked_size, max_members)
    check_output_file(out_path, "--out")
    plan = balance(read_costs(list(sources), limits), count)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(plan.mapping, indent=2, sort_keys=True) + "\n")
    if as_json:
        emit_json(
            {
                "map": str(out_path),
                "tus": len(plan.mapping),
                "loads": plan.loads,
                "hash_loads": plan.hash_loads,
            }
        )
    table = Table(
        title=f"kiln shard-plan: {len(plan.mapping)} TUs over {count} shards", title_justify="left"
    )
    for column in ("shard", "hash partition (s)", "balanced (s)"):
        table.add_column(column, justify="left" if column == "shard" else "right")
    for index in range(count):
        table.add_row(
            shard_label(index, count), f"{plan.hash_loads[index]:.1f}", f"{plan.loads[index]:.1f}"
        )
    ui.console.print(table)
    ui.info(
        f"slowest/mean: hash {BalancePlan.imbalance(plan.hash_loads):.2f}, "
        f"balanced {BalancePlan.imbalance(plan.loads):.2f}. Map written to {escape(str(out_path))}; "
        "set sharding.partition_map to it (relative to the recipe)."
    )


@cli.command(context_settings=CONTEXT)
@click.argument("wheel_a", type=click.Path(path_type=Path))
@click.argument("wheel_b", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def verify(wheel_a: Path, wheel_b: Path, as_json: bool) -> None:
    """Compare two wheels of the same cell (e.g. sharded and unsharded builds).

    Checks the file lists, every extension module's exported dynamic symbols, and the
    bytes. Objects that differ only in nvcc's per-process temp names are reported as
    their own category, as are objects that differ only in nvcc's per-build module ids
    and what the linker derives from them. Exits non-zero when the wheels are not equivalent.
    """
    from wheelkiln.wheels.compare import compare_wheels

    result = compare_wheels(wheel_a, wheel_b)
    if as_json:
        emit_json(result.as_dict())
    rows = [
        ("A", str(wheel_a)),
        ("B", str(wheel_b)),
        ("files only in A", ", ".join(result.only_in_a) or "none"),
        ("files only in B", ", ".join(result.only_in_b) or "none"),
        ("byte-identical", str(len(result.identical))),
        ("differ only in nvcc's per-build names", ", ".join(result.nvcc_temp_names_only) or "none"),
        ("differ only in debug info", ", ".join(result.debug_info_only) or "none"),
        ("differ", ", ".join(result.differing) or "none"),
        (
            "extension modules",
            f"{result.symbols_checked} checked, "
            f"{len(result.symbol_differences)} with different exported symbols",
        ),
    ]
    ui.console.print(_summary_table("kiln verify", rows))
    for name, diff in result.symbol_differences.items():
        ui.info(
            escape(
                f"  {name}: only in A: {', '.join(diff['only_in_a'][:5]) or '-'}; "
                f"only in B: {', '.join(diff['only_in_b'][:5]) or '-'}"
            )
        )
    if not result.equivalent:
        raise GateError(
            "The wheels are not equivalent.",
            hint="Different files or exported symbols mean different builds; differing bytes "
            "with equal symbols can be a non-deterministic toolchain.",
        )
    identical = not (result.nvcc_temp_names_only or result.debug_info_only)
    verdict = "equivalent" + (" (byte-identical)" if identical else "")
    ui.info(f"[green]{verdict}[/green]")


def _register() -> None:
    from wheelkiln.bench.commands import bench_group
    from wheelkiln.matrix.commands import ci_group, matrix_command
    from wheelkiln.plan.commands import lint_command, plan_command

    cli.add_command(bench_group)
    cli.add_command(matrix_command)
    cli.add_command(ci_group)
    cli.add_command(lint_command)
    cli.add_command(plan_command)


_register()


def _exit_with(exc: KilnError) -> None:
    ui.error(exc.message, hint=exc.hint)
    sys.exit(exc.exit_code)


def _silence_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        ui.console.print("[red]aborted[/red]")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KilnError as exc:
        _exit_with(exc)
    except BrokenPipeError:
        # The reader of stdout went away (`kiln matrix --json | head`): nothing to say.
        _silence_stdout()
        sys.exit(1)
    except OSError as exc:
        # A file system refusal that no check caught (a disk filling up mid-build, a
        # directory removed under us): name the path, never a traceback.
        from wheelkiln.output_paths import path_error

        _exit_with(path_error(exc))
    except KeyboardInterrupt:
        ui.console.print("[red]interrupted[/red]")
        sys.exit(130)
    except Exception:
        ui.console.print("[red]internal error[/red] (a wheelkiln bug; please report it):")
        ui.console.print(traceback.format_exc(), markup=False)
        sys.exit(70)
