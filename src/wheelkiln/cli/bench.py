"""``kiln bench TARGET --scenario ...`` and ``kiln bench report``.

``kiln bench TARGET`` is short for ``kiln bench run TARGET``: the group treats a first
argument that is not one of its commands as the target of ``run``. (A recipe that is
itself called ``report`` or ``run`` is reached with ``kiln bench run NAME``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from wheelkiln import ui
from wheelkiln.bench.scenarios import SCENARIO_SETS
from wheelkiln.cli.options import (
    CONTEXT,
    LocationPath,
    cache_dir_option,
    cache_option,
    cell_option,
    check_workdir_outside_sources,
    emit_json,
    jobs_option,
    json_option,
    report_busy,
    workdir_option,
)


class _DefaultRunGroup(click.Group):
    """A group whose unknown first argument is the TARGET of its ``run`` command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(
            ctx.command_path,
            "TARGET [--scenario ...] [OPTIONS]  |  report [OPTIONS]  |  publish [OPTIONS]",
        )


@click.group("bench", cls=_DefaultRunGroup, context_settings=CONTEXT, no_args_is_help=True)
def bench_group() -> None:
    """Benchmark one target under four nested cache conditions, and report medians.

    \b
      kiln bench TARGET --scenario cold|warm|hot|frozen|all|everything [OPTIONS]
      kiln bench report [--format md|json|html] [--target NAME] [--out FILE]
      kiln bench publish [--branch gh-pages] [--push]

    frozen ⊃ cold ⊃ warm ⊃ hot: cold is a fresh cache namespace with forced recache;
    warm moves SOURCE_DATE_EPOCH and must hit the cache for every TU (else it fails and
    names the TUs); hot has the same inputs and records all-hits (or wheel-cache with
    --wheel-cache); frozen also empties build environments and pip's cache (needs
    --destructive). Results are JSON lines in $KILN_STATE_HOME/results.jsonl.

    One build per builder: while another build holds the builder lock, the bench says
    who holds it and exits 0 (safe from cron).
    """


@bench_group.command(
    "run", context_settings=CONTEXT, short_help="Bench TARGET (also: kiln bench TARGET)."
)
@click.argument("target")
@click.option(
    "--scenario", "-s", "scenarios", multiple=True, default=("all",), show_default=True,
    type=click.Choice(list(SCENARIO_SETS)),
    help="Cache condition(s); repeatable. all = cold, warm, hot; everything = frozen + all.",
)
@cell_option()
@jobs_option("Parallel compile jobs (part of every result's key).")
@click.option("--repeat", "-r", type=click.IntRange(1), default=1, show_default=True,
              help="Run the chosen scenarios this many times (medians need n > 1).")
@click.option("--shards", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Bench a local N-way sharded build (cold/frozen only).")
@click.option("--store", "store_path", type=LocationPath(file=True),
              help="Results store (default: $KILN_STATE_HOME/results.jsonl).")
@click.option("--destructive", is_flag=True,
              help="Allow frozen: delete every build environment and pip's cache.")
@click.option("--wheel-cache", is_flag=True,
              help="Also record a hot run served whole from the wheel cache.")
@cache_option()
@cache_dir_option("The bench's own compiler cache (default: $KILN_HOME/bench-cache/<cache>).")
@workdir_option()
@click.option("--builder", help="Builder name in the records (default: the host name).")
@json_option("this run's records")
def bench_run(
    target: str, scenarios: tuple[str, ...], cell: str | None, jobs: int | None, repeat: int,
    shards: int, store_path: Path | None, destructive: bool, wheel_cache: bool,
    cache_name: str | None, cache_dir: Path | None, workdir: Path | None, builder: str | None,
    as_json: bool,
) -> None:
    """Build TARGET (a recipe name or path) under the chosen cache conditions.

    One record per build is appended to the results store. A warm or hot run that
    misses the cache fails (exit 5) after every scenario has run, naming the TUs.
    """
    from wheelkiln.bench.scenarios import BenchSettings, expand_scenarios, run_bench
    from wheelkiln.bench.store import default_store_path
    from wheelkiln.errors import BuildError, GateError
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.output_paths import check_output_dir, check_output_file
    from wheelkiln.paths import kiln_home
    from wheelkiln.recipe.load import find_recipe

    # Before any build: an hour of cold and frozen runs must not end in "cannot write".
    check_output_file(store_path or default_store_path(), "--store")
    check_output_dir(kiln_home(), "$KILN_HOME")
    for option, location in (("--cache-dir", cache_dir), ("--workdir", workdir)):
        if location is not None:
            check_output_dir(location, option)
    settings = BenchSettings(
        scenarios=expand_scenarios(scenarios), jobs=jobs, repeat=repeat, shards=shards,
        store_path=store_path, destructive=destructive, wheel_cache=wheel_cache,
        cache=cache_name, cache_dir=cache_dir, workdir=workdir, builder=builder,
    )
    loaded = find_recipe(target)
    chosen = select_cell(loaded.recipe, cell)
    check_workdir_outside_sources(workdir, [loaded])
    result = run_bench(loaded, chosen, settings)
    if result.status == "busy":
        report_busy(f"Not benchmarking {chosen.id}", result.lock_path, result.holder,
                    "one build per builder keeps timings honest", as_json)
        return
    if result.records:
        ui.console.print(_run_table(chosen.id, result.records))
    ui.info(escape(f"{len(result.records)} record(s) appended to {result.store_path}"))
    if as_json:
        emit_json({
            "status": "aborted" if result.aborted else ("failed" if result.failures else "ok"),
            "run_id": result.run_id, "store": str(result.store_path),
            "records": result.records, "failures": result.failures, "aborted": result.aborted,
        })
    if result.aborted:
        raise BuildError(
            f"The bench of {chosen.id} stopped: {result.aborted}",
            hint="Fix the build (`kiln build` shows the same failure), then bench again.",
        )
    if result.failures:
        raise GateError(
            "The bench of " + chosen.id + " failed:\n- " + "\n- ".join(result.failures),
            hint="Failed runs are recorded with status 'failed' and left out of every median.",
        )


def _run_table(cell_id: str, records: list[dict[str, Any]]) -> Table:
    table = Table(title=f"kiln bench {cell_id}", title_justify="left")
    for column in ("scenario", "#", "status", "wall", "build", "CPU", "hits", "misses"):
        left = column in ("scenario", "status")
        table.add_column(column, justify="left" if left else "right", no_wrap=True)
    for record in records:
        cache = record.get("cache", {})
        kind = record.get("hot_kind")
        table.add_row(
            record["scenario"] + (f" ({kind})" if kind else ""), str(record["repeat"] + 1),
            "[green]ok[/green]" if record["status"] == "ok" else "[red]failed[/red]",
            f"{record['step_wall_seconds']:.1f} s", f"{record.get('wall_seconds', 0):.1f} s",
            f"{record['user_seconds'] + record['sys_seconds']:.1f} s",
            str(cache.get("hits", "–")), str(cache.get("misses", "–")),
        )
    return table


@bench_group.command(
    "report", context_settings=CONTEXT, short_help="Medians, n, min–max and ratios (md|json|html)."
)
@click.option("--format", "fmt", type=click.Choice(["md", "json", "html"]), default="md",
              show_default=True,
              help="Markdown tables for docs, JSON, or an HTML page plotting every run.")
@click.option("--target", "targets", multiple=True,
              help="Only this target (package name or cell id); repeatable.")
@click.option("--store", "store_path", type=LocationPath(file=True),
              help="Results store (default: $KILN_STATE_HOME/results.jsonl).")
@click.option("--out", "out_path", type=LocationPath(file=True),
              help="Write the report to this file instead of stdout.")
def bench_report(
    fmt: str, targets: tuple[str, ...], store_path: Path | None, out_path: Path | None
) -> None:
    """Medians with n and min–max per (target, builder, arch, jobs, shards, scenario),
    and ratios between scenarios of one key only.

    Skipped lines (a torn last line from an interrupted writer) are warned about on
    stderr; the report still renders.
    """
    from wheelkiln.bench import store
    from wheelkiln.output_paths import check_output_file

    path = store_path or store.default_store_path()
    if out_path is not None:
        check_output_file(out_path, "--out")
        _refuse_out_onto_store(out_path, path)
    with store.paused_gc(freeze=True):  # a command about to exit: see paused_gc
        text = produce_report(path, targets, fmt)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(text, encoding="utf-8")
        ui.info(escape(f"Wrote {out_path}"))
    else:
        click.echo(text, nl=False)


@bench_group.command(
    "publish", context_settings=CONTEXT,
    short_help="Medians into data/bench/ on the docs branch (bench.json, index.html).",
)
@click.option("--branch", default="gh-pages", show_default=True, help="The docs branch.")
@click.option("--push", is_flag=True, help="Push the docs branch to origin after committing.")
@click.option("--store", "store_path", type=LocationPath(file=True),
              help="Results store (default: $KILN_STATE_HOME/results.jsonl).")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False),
              help="The repository (default: the one around the current directory).")
@click.option("--json", "as_json", is_flag=True, help="Print what was published as JSON.")
def bench_publish(branch: str, push: bool, store_path: Path | None, repo: Path | None,
                  as_json: bool) -> None:
    """Aggregate the results store into data/bench/bench.json and data/bench/index.html on
    the docs branch, through a worktree of its own: the current branch and its work tree
    are never touched. Without --push the commit stays local; publishing an unchanged
    store commits nothing.
    """
    from wheelkiln.bench import store
    from wheelkiln.bench.publish import publish_bench
    from wheelkiln.docs_branch import repository_root

    root = repository_root(repo or Path.cwd())
    path = store_path or store.default_store_path()
    with ui.step(f"Publishing {path} to {branch}"):
        result = publish_bench(path, repo=root, branch=branch, push=push)
    what = (f"committed {result.commit[:12]}" if result.commit
            else "nothing changed, nothing committed")
    ui.info(escape(f"{branch}:{result.path} ({result.records} records): {what}"
                   + ("; pushed" if result.pushed else "; not pushed (--push pushes)")))
    if as_json:
        emit_json(result.as_json())


def _refuse_out_onto_store(out_path: Path, store_path: Path) -> None:
    """Writing the report over the results store would lose every record in it: compare
    what the paths resolve to (a link, ``./``, a hard link), not their spelling."""
    from wheelkiln.errors import UsageError

    same = out_path.resolve() == store_path.resolve()
    if not same and out_path.exists() and store_path.exists():
        same = out_path.samefile(store_path)
    if same:
        raise UsageError(
            f"--out {out_path} is the results store {store_path}: the report would overwrite "
            "every record in it.",
            hint="Give --out another file, e.g. bench.md.",
        )


def produce_report(path: Path, targets: tuple[str, ...] | list[str], fmt: str) -> str:
    """What ``kiln bench report`` prints: read the store, select, summarize, render.
    Warnings about skipped lines go to stderr. (benchmarks/bench_report.py times this.)"""
    from wheelkiln.bench import store
    from wheelkiln.bench.report import render_html, render_json, render_markdown
    from wheelkiln.bench.stats import select, summarize
    from wheelkiln.errors import UsageError

    records, warnings = store.read(path)
    for warning in warnings:
        ui.warn(warning)
    chosen = select(records, targets)
    if targets and records and not chosen:
        known = sorted({str(r.get("target")) for r in records})
        shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20
                                         else "")
        raise UsageError(
            f"No record in {path} matches --target {', '.join(targets)}.",
            hint=f"Targets there: {shown}. --target takes a package name or a cell id.",
        )
    summary = summarize(chosen)
    if fmt == "json":
        return render_json(summary, source=str(path), warnings=warnings)
    if fmt == "html":
        return render_html(summary, source=str(path))
    return render_markdown(summary, source=str(path))
