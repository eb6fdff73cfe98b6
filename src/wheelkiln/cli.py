"""The ``kiln`` command. The only place that turns errors into exit codes."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from wheelkiln import ui
from wheelkiln.errors import BuildError, KilnError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


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
                ui.info(f"[green]ok[/green]   {result['file']}: {result['name']}, {result['cells']} cell(s)")
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
        table.add_row(key, value)
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
    "--cache", "cache_name", type=click.Choice(["ccache", "sccache", "none"]),
    help="Compiler cache (default: the recipe's, normally ccache).",
)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("dist"),
              show_default=True, help="Where the wheel and its build record go.")
@click.option("--shards", type=click.IntRange(1, 256), help="Shard the compile N ways locally, then link.")
@click.option("--workdir", type=click.Path(path_type=Path), help="Where job trees are built (default: $KILN_HOME/work).")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="The local cache directory (default: $KILN_HOME/<cache>).")
@click.option("--jobs", "-j", type=click.IntRange(1), help="Parallel compile jobs.")
@click.option("--recache", is_flag=True, help="Compile everything and overwrite cache entries (cold).")
@click.option("--namespace", help="Cache namespace / key prefix isolating this build's entries.")
@click.option("--smoke", is_flag=True, help="Install the wheel in a scratch venv and run the recipe's smoke test.")
@click.option("--json", "as_json", is_flag=True, help="Print the build record as JSON on stdout.")
def build(
    recipe_ref: str, cell: str | None, cache_name: str | None, out_dir: Path, shards: int | None,
    workdir: Path | None, cache_dir: Path | None, jobs: int | None, recache: bool,
    namespace: str | None, smoke: bool, as_json: bool,
) -> None:
    """Build one cell of RECIPE (a path, or a name under recipes/) into a wheel.

    The cache sits in front of every compiler the package calls. A build record (JSON)
    with timings, cache counters and digests is written beside the wheel.
    """
    from wheelkiln.build.cell import BuildOptions, build_cell
    from wheelkiln.build.record import build_record, publish
    from wheelkiln.build.verify import check_built_wheel
    from wheelkiln.matrix.cells import select_cell
    from wheelkiln.recipe.load import find_recipe

    loaded = find_recipe(recipe_ref)
    chosen = select_cell(loaded.recipe, cell)
    options = BuildOptions(
        cache=cache_name or loaded.recipe.cache.backend, cache_dir=cache_dir,
        namespace=namespace, recache=recache, workdir=workdir, jobs=jobs,
    )
    if shards is not None and shards > 1:
        from wheelkiln.executors.local import run_sharded

        report = run_sharded(loaded, chosen, options, shards, out_dir=out_dir)
        if as_json:
            emit_json(report)
        return
    outcome = build_cell(loaded, chosen, options)
    record = build_record(outcome, kind="build")
    if outcome.exit_code != 0:
        tail = "\n".join(outcome.log_text.splitlines()[-25:])
        raise BuildError(
            f"Building {chosen.id} failed (exit {outcome.exit_code}). Last lines:\n{tail}",
            hint=f"Full log: {outcome.log_path}",
        )
    check_built_wheel(outcome, loaded, smoke=smoke)
    record_path = publish(outcome, record, out_dir)
    if as_json:
        emit_json(record)
    rows = [
        ("cell", chosen.id),
        ("wheel", str(record["wheel"]["path"])),
        ("wall / CPU", f"{record['wall_seconds']:.1f} s / {record['cpu_seconds']:.1f} s"),
        ("peak memory", f"{record['peak_rss_bytes'] / 2**20:.0f} MiB"),
        ("cache", _cache_line(record)),
        ("extension modules", str(len(record["extensions"]))),
        ("record", str(record_path)),
    ]
    ui.console.print(_summary_table("kiln build", rows))
    missed = record["cache"]["missed_tus"]
    if missed and record["cache"].get("hits", 0):
        ui.info(f"{len(missed)} TU(s) missed the cache: " + ", ".join(missed[:10]))


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
        ui.console.print(Text("error: ", style="red") + Text(exc.message), soft_wrap=True)
        if exc.hint:
            ui.console.print(Text(exc.hint), soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        ui.console.print("[red]interrupted[/red]")
        sys.exit(130)
    except Exception:  # noqa: BLE001 - a bug: say so briefly, details on request
        ui.console.print("[red]internal error[/red] (a wheelkiln bug; please report it):")
        ui.console.print(traceback.format_exc(), markup=False)
        sys.exit(70)
