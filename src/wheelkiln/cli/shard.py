"""``kiln shard``, ``kiln link`` and ``kiln shard-plan``: the jobs of a sharded build
when a CI system runs them, and the plan that balances them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import click
from rich.markup import escape
from rich.table import Table

from wheelkiln import ui
from wheelkiln.cli.options import (
    CONTEXT,
    LocationPath,
    archive_limit_options,
    builder_lock,
    cell_option,
    check_cell_locations,
    check_job_locations,
    count_option,
    emit_json,
    former_name,
    job_options,
    json_option,
    out_dir_option,
    partition_option,
    recipe_argument,
    renamed,
    smoke_option,
    summary_table,
)
from wheelkiln.errors import BuildError, GateError


@click.command(context_settings=CONTEXT)
@recipe_argument()
@cell_option()
@click.option(
    "--index", "index", type=click.IntRange(0), required=True, help="This shard's 0-based index."
)
@count_option("N, the number of shards (default: the recipe's).")
@partition_option(
    "How the shard drops other shards' TUs: seat (the compiler wrapper stubs them) or "
    "source (their sources are deleted first). Default: the recipe's sharding.partition."
)
@click.option(
    "--partition-map",
    "partition_map",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="TU → shard map from `kiln shard-plan` (default: the recipe's sharding.partition_map).",
)
@click.option(
    "--handoff",
    type=click.Choice(["archive", "remote"]),
    default="archive",
    show_default=True,
    help="How the cache reaches the link job: an archive of this shard's cache in --out, "
    "or its entries on the remote cache storage (--remote) with a small handoff file "
    "(manifest and wrapper log) in --out.",
)
@out_dir_option("shards", "the shard's cache archive (or handoff file) and record")
@job_options
@json_option("the shard record")
def shard(
    recipe_ref: str,
    cell: str | None,
    index: int,
    count: int | None,
    partition: str | None,
    former_filter: str | None,
    partition_map: Path | None,
    handoff: Literal["archive", "remote"],
    out_dir: Path,
    cache_name: str | None,
    workdir: Path | None,
    jobs: int | None,
    namespace: str | None,
    remote: str | None,
    as_json: bool,
) -> None:
    """Compile shard INDEX of COUNT of one cell and hand its compiler cache over: packed
    into an archive, or (--handoff remote) stored on the remote cache storage.

    Only this shard's slice of the TUs is compiled; the rest get empty objects. The
    build is expected to fail at its link step: the shard gate accepts that only with
    real objects, an unresolved-symbol line and no compiler diagnostic.
    """
    from wheelkiln.cells import shard_label
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.recipe.load import find_recipe
    from wheelkiln.settings import resolve_build_settings
    from wheelkiln.shard.job import describe_stores, run_shard

    locations = check_job_locations(out_dir, workdir)
    out_dir, workdir = locations.out_dir, locations.workdir
    loaded = find_recipe(recipe_ref)
    chosen = select_cell(loaded.recipe, cell)
    loaded = check_cell_locations(locations, loaded, chosen)
    total = count or loaded.recipe.sharding.count
    options = resolve_build_settings(
        loaded, cache=cache_name, workdir=workdir, jobs=jobs, namespace=namespace, remote=remote
    )
    with builder_lock(None):
        result = run_shard(
            loaded,
            chosen,
            index,
            total,
            out_dir,
            options,
            partition=renamed(partition, former_filter, "--partition", "--filter")[0],
            partition_map_path=partition_map.resolve() if partition_map else None,
            handoff=handoff,
        )
    if as_json:
        emit_json(result.record)
    label = shard_label(index, total)
    actions = result.gate.actions
    rows = [
        ("cell", chosen.id),
        ("shard", f"{label} ({result.partition})"),
        (
            "TUs",
            f"{actions.get('compile', 0)} compiled, {actions.get('stub', 0)} stubbed, "
            f"{actions.get('probe', 0)} probes, {actions.get('link-unresolved', 0)} tolerated link failures, "
            f"{actions.get('link-deferred', 0)} links left to the link job",
        ),
        ("build exit", str(result.outcome.exit_code)),
        ("failed links", "\n".join(result.gate.links) or "none"),
        ("cache stores", describe_stores(result.record["cache"])),
        ("wall", f"{result.outcome.wall_seconds:.1f} s"),
        (handoff if handoff == "archive" else "handoff", str(result.archive) if result.archive else "none"),
    ]
    ui.console.print(summary_table("kiln shard", rows))
    if result.gate.build_failed:
        raise BuildError(
            f"The build of {label} of {chosen.id} failed, as it would unsharded:\n- "
            + "\n- ".join(result.gate.reasons),
            hint=f"Build log: {result.outcome.log_path}",
        )
    if not result.gate.passed:
        raise GateError(
            f"{label} of {chosen.id} failed its gate:\n- " + "\n- ".join(result.gate.reasons),
            hint=f"Build log: {result.outcome.log_path}",
        )


@click.command(context_settings=CONTEXT)
@recipe_argument()
@cell_option()
@click.option(
    "--archives",
    "archives_dir",
    metavar="DIR",
    type=click.Path(path_type=Path),
    help="Directory holding the shard archives, or the handoff files of shards that "
    "handed over through remote storage (searched recursively). Required.",
)
@former_name("--shards", "--archives", "former_shards", type=click.Path(path_type=Path))
@count_option("N, when archives may be missing (default: from the archives).")
@out_dir_option("dist", "the wheel and the link record")
@job_options
@archive_limit_options
@smoke_option(
    "Run the recipe's smoke test (or import) in a venv with the linked wheel, its "
    "Requires-Dist and [verify] requires."
)
@json_option("the link record")
def link(
    recipe_ref: str,
    cell: str | None,
    archives_dir: Path | None,
    former_shards: Path | None,
    count: int | None,
    out_dir: Path,
    cache_name: str | None,
    workdir: Path | None,
    jobs: int | None,
    namespace: str | None,
    remote: str | None,
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
    from wheelkiln.settings import resolve_build_settings
    from wheelkiln.shard.ledger import describe_ledger
    from wheelkiln.shard.link import run_link
    from wheelkiln.shard.lto import describe_lto

    shards_dir, option = renamed(archives_dir, former_shards, "--archives", "--shards")
    if shards_dir is None:
        raise click.MissingParameter(param_hint="'--archives'", param_type="option")
    limits = ArchiveLimits.resolve(max_unpacked_size, max_members)
    shards_dir = check_input_dir(shards_dir, option)
    locations = check_job_locations(out_dir, workdir)
    out_dir, workdir = locations.out_dir, locations.workdir
    loaded = find_recipe(recipe_ref)
    chosen = select_cell(loaded.recipe, cell)
    loaded = check_cell_locations(locations, loaded, chosen, reads={option: shards_dir})
    options = resolve_build_settings(
        loaded, cache=cache_name, workdir=workdir, jobs=jobs, namespace=namespace, remote=remote
    )
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
    ui.console.print(summary_table("kiln link", rows))
    lto = describe_lto(result.record["link"].get("lto"), result.outcome.wall_seconds)
    if lto is not None:
        ui.info(lto)
    for missed in gate.missed:
        shard_text = f"shard {missed['shard'] + 1}" if missed["shard"] is not None else "no shard"
        ui.info(escape(f"  missed {missed['tu']} ({shard_text}): {missed['difference']}"))
    if not gate.passed:
        raise GateError(
            f"The link gate of {chosen.id} failed:\n- " + "\n- ".join(gate.problems),
            hint="The wheel was kept. A missed TU a shard compiled (above, with what differs) "
            "misses again however often that shard runs: make its compile the same as the link "
            "job's. A missing shard, or a TU no shard compiled, needs its shard run again.",
        )


@click.command("shard-plan", context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@count_option("N shards to plan for.", required=True)
@click.option(
    "--out",
    "out_path",
    type=LocationPath(file=True),
    required=True,
    help="The partition map to write (JSON); point sharding.partition_map at it.",
)
@archive_limit_options
@json_option("the plan")
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
    out_path = check_output_file(out_path, "--out")
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
