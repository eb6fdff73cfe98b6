"""``kiln fleet run`` and ``kiln fleet publish``: parse, call, print."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from wheelkiln import ui
from wheelkiln.cli.options import (
    CONTEXT,
    LocationPath,
    check_workdir_outside_sources,
    emit_json,
    report_busy,
)


@click.group("fleet", context_settings=CONTEXT, no_args_is_help=True)
def fleet_group() -> None:
    """Fleet runs: every selected cell built at once, cold, with each builder sampled
    every second (CPU, memory, disk, network, compiler cache counters).

    \b
      kiln fleet run [RECIPES...] [-f AXIS=V] [--executor local] [--json]
      kiln fleet publish [--run STAMP] [--branch gh-pages] [--push] [--json]

    The figures are throughput under contention, never mixed into a bench median.
    """


@fleet_group.command("run", context_settings=CONTEXT)
@click.argument("recipes", nargs=-1)
@click.option("--filter", "-f", "filters", multiple=True, metavar="AXIS=V",
              help="Only cells whose axis has this value (as kiln matrix -f); repeatable.")
@click.option("--lane", help="Only cells of this CUDA lane (as kiln matrix --lane).")
@click.option("--executor", "executor_name", default="local", show_default=True,
              help="Where the builds run (local: this machine, every build at once; dask: "
              "the workers of --scheduler, one build per builder).")
@click.option("--scheduler", help="dask: the scheduler, tcp://HOST:PORT ($KILN_SCHEDULER).")
@click.option("--handoff", type=LocationPath(file_okay=False),
              help="dask: a directory every worker sees at the same path ($KILN_HANDOFF).")
@click.option("--parallel", type=click.IntRange(1),
              help="At most this many builds at once per executor (default: all of them).")
@click.option("--jobs", "-j", type=click.IntRange(1),
              help="Parallel compile jobs of each build (default: each build's own).")
@click.option("--cache", "cache_name", type=click.Choice(["ccache", "sccache"]),
              default="ccache", show_default=True,
              help="Compiler cache; its counters are sampled for ccache.")
@click.option("--shards", type=click.IntRange(1, 256),
              help="Build every cell sharded N ways (kiln build --shards N); the Gantt shows "
              "each shard and link job. Cache counters are not sampled then.")
@click.option("--interval", type=click.FloatRange(0.1, 60), default=1.0, show_default=True,
              help="Seconds between samples of each builder.")
@click.option("--runs-dir", type=LocationPath(),
              help="Where run folders go (default: $KILN_STATE_HOME/runs).")
@click.option("--workdir", type=LocationPath(), help="Where job trees are built.")
@click.option("--keep-caches", is_flag=True,
              help="Keep each build's private compiler cache ($KILN_HOME/fleet-cache/STAMP).")
@click.option("--json", "as_json", is_flag=True, help="Print the run's summary as JSON on stdout.")
def fleet_run(
    recipes: tuple[str, ...], filters: tuple[str, ...], lane: str | None, executor_name: str,
    scheduler: str | None, handoff: Path | None, parallel: int | None, jobs: int | None,
    cache_name: str, shards: int | None, interval: float,
    runs_dir: Path | None, workdir: Path | None, keep_caches: bool, as_json: bool,
) -> None:
    """Build every selected cell of RECIPES (default: every recipes/*.toml) at once, cold
    (a fresh cache namespace, forced recache, a private cache per build), sampling each
    builder every second. Writes runs/<stamp>/: run.json, samples.jsonl, every build record
    and log.

    While another build holds the builder lock, nothing runs: it says who holds it and
    exits 0, as kiln bench does. A failed build fails the command (exit 4) after the run
    folder is written.
    """
    from wheelkiln.errors import BuildError
    from wheelkiln.fleet.executor import EngineSettings, make_executor
    from wheelkiln.fleet.folder import CONTENTION_NOTE, default_runs_dir
    from wheelkiln.fleet.runner import FleetSettings, run_fleet
    from wheelkiln.output_paths import check_output_dir
    from wheelkiln.paths import kiln_home

    selected = select_fleet_cells(recipes, filters, lane)
    executor = make_executor(executor_name, EngineSettings(parallel, scheduler, handoff))
    runs = runs_dir or default_runs_dir()
    check_output_dir(runs, "--runs-dir")
    check_output_dir(kiln_home(), "$KILN_HOME")
    if workdir is not None:
        check_output_dir(workdir, "--workdir")
    check_workdir_outside_sources(workdir, {id(loaded): loaded for loaded, _ in selected}.values())
    settings = FleetSettings(runs_dir=runs, cache=cache_name, jobs=jobs, workdir=workdir,
                             interval=interval, keep_caches=keep_caches, shards=shards)
    result = run_fleet(selected, settings, executor)
    if result.status == "busy":
        report_busy("Not starting a fleet run", result.lock_path, result.holder,
                    "one build per builder", as_json)
        return
    assert result.folder is not None
    from wheelkiln.fleet.folder import read_run
    from wheelkiln.fleet.summary import run_summary

    folder = read_run(result.folder)
    summary = run_summary(folder.run, folder.samples)
    page = write_page(folder)
    ui.console.print(_builds_table(result.run))
    for line in _builder_lines(summary):
        ui.info(escape(line))
    ui.info(escape(f"run folder: {result.folder}" + (f"; page: {page}" if page else "")))
    ui.info(escape(CONTENTION_NOTE))
    if as_json:
        emit_json({"status": "failed" if result.failed else "ok",
                    "folder": str(result.folder), **summary, "run": result.run})
    if result.failed:
        names = ", ".join(f"{b['cell']} ({b['outcome']}, log {result.folder / b['log']})"
                          for b in result.failed)
        raise BuildError(f"Fleet run {result.folder.name}: {len(result.failed)} build(s) "
                         f"failed: {names}",
                         hint="The run folder keeps every log and record; `kiln build` "
                         "shows the same failure alone.")


@fleet_group.command("publish", context_settings=CONTEXT)
@click.option("--run", "stamp", help="The run's stamp (default: the newest run).")
@click.option("--runs-dir", type=LocationPath(),
              help="Where run folders are (default: $KILN_STATE_HOME/runs).")
@click.option("--branch", default="gh-pages", show_default=True, help="The docs branch.")
@click.option("--push", is_flag=True, help="Push the docs branch to origin after committing.")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False),
              help="The repository (default: the one around the current directory).")
@click.option("--base-url",
              help="Where the docs branch is served; links between runs are absolute "
              "(default: GitHub Pages of origin, else the site root).")
@click.option("--json", "as_json", is_flag=True, help="Print what was published as JSON.")
def fleet_publish(stamp: str | None, runs_dir: Path | None, branch: str, push: bool,
                  repo: Path | None, base_url: str | None, as_json: bool) -> None:
    """Publish a fleet run to data/perf/<stamp>/ on the docs branch (a permalink), and
    rebuild data/perf/index.html: the newest run, with every run in a selector.

    Works in a worktree of the docs branch of its own (made as an orphan branch if
    missing): the current branch and its work tree are never touched. Without --push the
    commit stays local. Publishing a run that is already there commits nothing.
    """
    from wheelkiln.docs_branch import repository_root, site_url
    from wheelkiln.fleet.folder import default_runs_dir, find_run, read_run
    from wheelkiln.fleet.publish import publish_run

    root = repository_root(repo or Path.cwd())
    folder = read_run(find_run(runs_dir or default_runs_dir(), stamp))
    for warning in folder.warnings:
        ui.warn(warning)
    with ui.step(f"Publishing fleet run {folder.stamp} to {branch}"):
        result = publish_run(folder, repo=root, branch=branch, base=site_url(root, base_url),
                             push=push)
    what = (f"committed {result.commit[:12]}" if result.commit
            else "already published, nothing committed")
    ui.info(escape(f"{branch}:{result.path}: {what}; {len(result.runs)} run(s) published"
                   + ("; pushed" if result.pushed else "; not pushed (--push pushes)")))
    if as_json:
        emit_json(result.as_json())


def write_page(folder: Any) -> Path | None:
    """The run's page beside its data (``index.html``); a failure to draw is a warning,
    never the loss of a run."""
    from wheelkiln.fleet.folder import PAGE_FILE
    from wheelkiln.fleet.page import render_run_page

    target: Path = folder.path / PAGE_FILE
    try:
        target.write_text(render_run_page(folder), encoding="utf-8")
    except Exception as exc:  # the data is kept whatever the plotting library does
        ui.warn(f"could not draw the run's page {target}: {exc!r}")
        return None
    return target


def select_fleet_cells(
    recipes: tuple[str, ...], filters: tuple[str, ...], lane: str | None
) -> list[tuple[Any, Any]]:
    """Every cell of the recipes that the filters select and this host can build."""
    from wheelkiln.errors import UsageError
    from wheelkiln.matrix.cells import expand_cells, host_platform
    from wheelkiln.matrix.filters import parse_filters, parse_lane, select_cells
    from wheelkiln.matrix.inputs import load_recipes

    loaded = load_recipes(recipes, Path.cwd())
    parsed = parse_filters(filters)
    chosen_lane = parse_lane(lane) if lane is not None else None
    selected = []
    here = host_platform()
    elsewhere: list[str] = []
    for recipe in loaded:
        cells = expand_cells(recipe.recipe)
        for cell in select_cells(cells, parsed, chosen_lane):
            if cell.platform == here:
                selected.append((recipe, cell))
            else:
                elsewhere.append(cell.id)
    if elsewhere:
        ui.info(f"Not built here ({here}): {', '.join(elsewhere)}")
    if not selected:
        raise UsageError(f"No selected cell builds on this host's platform ({here}).",
                         hint="Select cells of this platform with -f platform=...")
    return selected


def _builds_table(run: dict[str, Any]) -> Table:
    table = Table(title=f"kiln fleet run {run['stamp']}", title_justify="left")
    for column in ("cell", "builder", "outcome", "start", "seconds", "CPU", "hits/misses"):
        table.add_column(column, justify="left" if column in ("cell", "builder", "outcome")
                         else "right", no_wrap=column != "cell")
    origin = float(run.get("started_epoch", 0.0))
    for build in sorted(run["builds"], key=lambda b: b["start"]):
        ok = build["outcome"] == "ok"
        cpu = build.get("cpu_seconds")
        table.add_row(
            build["cell"], build["builder"],
            "[green]ok[/green]" if ok else f"[red]{build['outcome']}[/red]",
            f"+{build['start'] - origin:.1f} s", f"{build['seconds']:.1f} s",
            f"{cpu:.1f} s" if isinstance(cpu, int | float) else "–",
            f"{build.get('hits', '–')}/{build.get('misses', '–')}",
        )
    return table


def _builder_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    for b in summary["builders"]:
        busy = (f"CPU {b['cpu_busy_mean']:.0f}% busy on average while building "
                f"(max {b['cpu_busy_max']:.0f}%)" if b["cpu_busy_mean"] is not None else
                "no sample while building")
        memory = (f", peak memory {b['memory_peak_bytes'] / 2**30:.1f} GiB"
                  if b["memory_peak_bytes"] else "")
        lines.append(f"{b['builder']}: {b['samples']} samples over {b['seconds']:.1f} s "
                     f"({b['samples_per_second']:.2f}/s), {busy}{memory}")
    return lines
