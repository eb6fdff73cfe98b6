"""``kiln lint``, ``kiln plan`` and ``kiln timeline``.

Parsing, calling and printing only: the work is in :mod:`wheelkiln.plan.lint`,
:mod:`wheelkiln.plan.census` and :mod:`wheelkiln.plan.timeline`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from wheelkiln import ui
from wheelkiln.cli.options import CONTEXT, LocationPath
from wheelkiln.cli.options import emit_json as _emit_json
from wheelkiln.errors import GateError


@click.command("lint", context_settings=CONTEXT)
@click.argument("recipe_ref", metavar="RECIPE")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def lint_command(recipe_ref: str, as_json: bool) -> None:
    """Find CMake that breaks when a shard holds none of a family's files.

    Flags each use of a target that exists only when the shard has its sources
    ($<TARGET_OBJECTS:x>, target_link_libraries(... x), ...) guarded on anything but
    if(TARGET x), and, under the source partition, each target whose every source a
    shard can lose. Exits 5 when it finds any.
    """
    from wheelkiln.plan.lint import lint_recipe
    from wheelkiln.recipe.load import find_recipe

    loaded = find_recipe(recipe_ref)
    with ui.step(f"Linting {loaded.name}"):
        report = lint_recipe(loaded)
    if as_json:
        _emit_json(report.as_dict())
    if not report.files:
        ui.info(f"kiln lint: {loaded.name} has no CMakeLists.txt; nothing to lint.")
        return
    for finding in report.findings:
        ui.info(escape(finding.render()))
    files = len(report.files)
    summary = (
        f"kiln lint: {len(report.findings)} finding(s) in {files} CMake file(s) of {loaded.name}"
    )
    if report.findings:
        raise GateError(
            summary + ".",
            hint="Each finding breaks configure in a shard that holds none of a family's "
            "files; apply the fix it names.",
        )
    ui.info(f"{summary}.")


@click.command("plan", context_settings=CONTEXT)
@click.argument("recipe_ref", metavar="RECIPE")
@click.option("--cell", "cell_selector", default=None, help="Cell id or 'axis=value,...'.")
@click.option(
    "--count",
    "counts",
    type=click.IntRange(1, 256),
    multiple=True,
    help="An N to plan for (repeat it); default 1 to 16 and the recipe's count.",
)
@click.option(
    "--from",
    "history",
    type=click.Path(path_type=Path, exists=True),
    multiple=True,
    help="An earlier build's shard archives, shard or build job directories, or wrapper "
    "logs: TU costs measured there (repeat it).",
)
@click.option(
    "--static",
    is_flag=True,
    help="No census pass: take the TUs from a scan of the source tree (no build, no "
    "fixed cost; generated sources are missed).",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1, 1024),
    default=None,
    help="Parallel compiles in each job (default: as a build resolves it).",
)
@click.option(
    "--workdir", type=LocationPath(), default=None, help="Where the census pass builds."
)
@click.option(
    "--out",
    "map_path",
    type=LocationPath(file=True),
    default=None,
    help="Write the census plan's partition map for the recommended N (or --map-count).",
)
@click.option("--map-count", type=click.IntRange(1, 256), default=None, help="N for --out.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan_command(
    recipe_ref: str,
    cell_selector: str | None,
    counts: tuple[int, ...],
    history: tuple[Path, ...],
    static: bool,
    jobs: int | None,
    workdir: Path | None,
    map_path: Path | None,
    map_count: int | None,
    as_json: bool,
) -> None:
    """Choose N for RECIPE: a TU census, the family table, the ceiling, the predicted
    critical path and job count per N, and a recommended N. Runs kiln lint too.

    TU costs come from --from (an earlier build), else from a cost model over a census
    pass (one build with every TU stubbed, which also measures the fixed cost of a job),
    or with --static over a scan of the source tree.
    """
    from wheelkiln.plan.run import plan_recipe, write_map

    if map_path is not None:
        from wheelkiln.output_paths import check_output_file

        check_output_file(map_path, "--out")
    loaded, plan, lint = plan_recipe(
        recipe_ref,
        cell_selector=cell_selector,
        counts=counts,
        history=history,
        static=static,
        jobs=jobs,
        workdir=workdir,
    )
    written = None
    if map_path is not None:
        written = write_map(plan, map_count or plan.recommended, map_path)
    if as_json:
        from wheelkiln.plan.run import plan_json

        _emit_json(plan_json(plan, lint, written))
    _print_plan(loaded.name, plan, lint)
    if written is not None:
        ui.info(
            escape(
                f"Partition map for N={written[1]} written to {written[0]}; set "
                "sharding.partition_map to it (relative to the recipe)."
            )
        )


def _print_plan(name: str, plan: Any, lint: Any) -> None:
    from rich.table import Table

    census = plan.census
    measured = sum(1 for tu in census.tus if tu.measured)
    fixed = (
        f"{census.fixed_seconds:.1f} s ({census.fixed_how})"
        if census.fixed_seconds is not None
        else census.fixed_how
    )
    ui.info(
        escape(
            f"kiln plan {name}: {len(census.tus)} TUs by {census.how} "
            f"({measured} timed, {len(census.tus) - measured} estimated); "
            f"fixed cost of one job {fixed}; {plan.jobs} parallel compiles per job"
        )
    )
    for note in census.notes:
        ui.info(escape(f"  note: {note}"))
    family_names = [cell.family for cell in plan.candidates[0].families]
    table = Table(title=f"kiln plan: {name}", title_justify="left")
    table.add_column("N", justify="right")
    for family in family_names:
        table.add_column(f"{family} empty/most", justify="right")
    for column in ("most TUs", "critical path (s)", "with hash (s)", "shard jobs"):
        table.add_column(column, justify="right")
    for candidate in plan.candidates:
        cells = {cell.family: cell for cell in candidate.families}
        path = candidate.critical_path
        path_hash = candidate.critical_path_hash
        table.add_row(
            ("* " if candidate.count == plan.recommended else "") + str(candidate.count),
            *(
                f"{cells[f].zero_shards} of {candidate.count} / {cells[f].most_files}"
                for f in family_names
            ),
            str(candidate.most_files),
            f"{path:.1f}" if path is not None else f"≥{candidate.compile_only:.1f}",
            f"{path_hash:.1f}"
            if path_hash is not None
            else f"≥{candidate.slowest_compile_hash:.1f}",
            f"{candidate.shard_jobs}" + ("" if candidate.fits_cap else " (over the cap)"),
        )
    ui.console.print(table)
    if plan.ceiling is not None:
        ui.info(
            escape(
                f"ceiling: N={plan.ceiling.count}; past it the {plan.ceiling.family} family "
                f"({plan.ceiling.files} TUs) stops sharding: some shard holds none of it"
            )
        )
    ui.info(escape(f"recommended: N={plan.recommended}: {plan.reason}"))
    for finding in lint.findings:
        ui.info(escape(f"lint: {finding.render()}"))
    if lint.files:
        ui.info(f"lint: {len(lint.findings)} finding(s) in {len(lint.files)} CMake file(s)")


@click.command("timeline", context_settings=CONTEXT)
@click.argument("records", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option(
    "--html",
    "html_path",
    type=LocationPath(file=True),
    default=None,
    help="Write a page with the timeline.",
)
@click.option(
    "--out",
    "trace_out",
    type=LocationPath(file=True),
    default=None,
    help="Write the merged Chrome trace (open it in Perfetto).",
)
@click.option(
    "--real-time",
    is_flag=True,
    help="Keep the recorded times instead of laying shards out as on separate machines.",
)
@click.option(
    "--slowest",
    type=click.IntRange(1, 1000),
    default=10,
    help="How many of the slowest TUs to list.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the timeline as JSON.")
def timeline_command(
    records: tuple[Path, ...],
    html_path: Path | None,
    trace_out: Path | None,
    real_time: bool,
    slowest: int,
    as_json: bool,
) -> None:
    """Merge the shards and link job of one cell onto one time axis.

    RECORDS are build records (their <record>.trace.json beside them is read), traces,
    or directories holding traces. Marks the critical path (the slowest shard, then the
    link job), lists the slowest TUs, and each job's tail: the end of its compiles with a
    job slot idle, waiting for the last TU.
    """
    from rich.table import Table

    from wheelkiln.output_paths import check_output_file
    from wheelkiln.plan.timeline import make_timeline, render_html

    for path, option in ((html_path, "--html"), (trace_out, "--out")):
        if path is not None:
            check_output_file(path, option)
    timeline = make_timeline(list(records), real_time=real_time, slowest=slowest)
    if html_path is not None:
        html_path.write_text(render_html(timeline), encoding="utf-8")
    if trace_out is not None:
        trace_out.write_text(
            json.dumps(timeline.merged_trace(), allow_nan=False) + "\n", encoding="utf-8"
        )
    data = timeline.as_dict()
    if as_json:
        _emit_json(data)
    table = Table(title=f"kiln timeline: {timeline.cell}", title_justify="left")
    for column in ("job", "starts at (s)", "seconds", "TUs", "tail (s)", "critical path"):
        table.add_column(column, justify="left" if column == "job" else "right")
    for job in data["jobs"]:
        table.add_row(
            job["job"],
            f"{job['offset_seconds']:.1f}",
            f"{job['seconds']:.1f}",
            str(job["tus"]),
            f"{job['tail_seconds']:.1f}" if "tail_seconds" in job else "",
            "yes" if job["job"] in timeline.critical else "",
        )
    ui.console.print(table)
    ui.info(
        "tail: the end of a job's compiles with a job slot idle, and the TU that ends it:"
    )
    for job in data["jobs"]:
        if job.get("tail_tus"):
            ui.info(
                escape(
                    f"  {job['job']:<10} {job['tail_seconds']:6.1f} s  "
                    f"{job['tail_idle_slot_seconds']:6.1f} slot-s idle  {job['tail_tus'][0]}"
                )
            )
    ui.info(
        escape(
            f"critical path: {' + '.join(timeline.critical)} = {timeline.critical_seconds:.1f} s"
        )
    )
    ui.info("slowest TUs:")
    for event in data["slowest_tus"]:
        ui.info(
            escape(
                f"  {event['seconds']:7.2f} s  {event['action']:<7} {event['job']:<10} {event['tu']}"
            )
        )
    for path, what in ((html_path, "page"), (trace_out, "merged trace")):
        if path is not None:
            ui.info(escape(f"{what} written to {path}"))
