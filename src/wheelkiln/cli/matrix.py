"""``kiln matrix`` and ``kiln ci github``.

What the matrix reads comes from :mod:`~wheelkiln.matrix.inputs`, expansion is pure
(:mod:`~wheelkiln.matrix.jobs`) and all output goes through :mod:`~wheelkiln.matrix.render`.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from wheelkiln import ui
from wheelkiln.cli.options import CONTEXT, LocationPath
from wheelkiln.errors import KilnError
from wheelkiln.matrix.filters import GITHUB_MATRIX_CAP, check_cap
from wheelkiln.matrix.inputs import load_recipes, plan_matrix


@click.command("matrix", context_settings=CONTEXT)
@click.argument("recipes", nargs=-1, metavar="[RECIPES]...")
@click.option("-f", "--filter", "filters", multiple=True, metavar="AXIS=VALUE",
              help="Keep cells with this axis value (package, python, cuda, torch, platform). "
              "Repeat: same axis = any of them, different axes = all of them.")
@click.option("--lane", metavar="LANE",
              help="Only this CUDA lane, e.g. 13.0 ('none': cells without CUDA).")
@click.option("--skip-existing", type=click.Path(path_type=Path, file_okay=False),
              metavar="DIR", help="Skip cells whose wheel is already in DIR (build record "
              "<cell>.build.json/.link.json, else a wheel whose name matches the cell).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the GitHub matrices (shard, link, build include lists) and counts.")
@click.option("--explain", is_flag=True,
              help="Show cells, shards, links and skipped cells as a table (stderr).")
def matrix_command(recipes: tuple[str, ...], filters: tuple[str, ...], lane: str | None,
                   skip_existing: Path | None, as_json: bool, explain: bool) -> None:
    """Expand RECIPES (default: recipes/*.toml) into jobs: N shard jobs and a link job
    per sharded cell, one build job per other cell.

    A filter that selects no cell is an error, and so is a matrix over GitHub's 256 jobs;
    that error proposes splits that fit (per lane, per package, a smaller N). Without
    --json the --explain table is shown.
    """
    cwd = Path.cwd()
    plan = plan_matrix(load_recipes(recipes, cwd), cwd, filters, lane, skip_existing)
    if explain or not as_json:
        from wheelkiln.matrix.render import print_explain

        print_explain(plan, ui.console)
    check_cap([(p.cell, p.shard_count) for p in plan.cells], GITHUB_MATRIX_CAP)
    if as_json:
        from wheelkiln.matrix.render import print_json

        print_json(plan)


@click.group("ci", context_settings=CONTEXT)
def ci_group() -> None:
    """Emit CI workflows that run the matrix."""


@ci_group.command("github", context_settings=CONTEXT)
@click.argument("recipes", nargs=-1, metavar="[RECIPES]...")
@click.option("--out", "out_path", type=LocationPath(file=True, dir_okay=False),
              default=Path(".github/workflows/kiln.yml"), show_default=True,
              help="Where to write the workflow.")
@click.option("--requirement", metavar="SPEC",
              help="How the jobs install kiln (default: wheelkiln==<this version>).")
def ci_github(recipes: tuple[str, ...], out_path: Path, requirement: str | None) -> None:
    """Write a GitHub Actions workflow for RECIPES (default: recipes/*.toml).

    Jobs: generate-matrix (kiln matrix --json) → compile-shard (one job per shard,
    uploads its cache archive) → link (always(), restores every shard's cache, links the
    wheel), and build for cells that are not sharded. Dispatch it with the 'lane' and
    'filters' inputs to run part of the matrix.
    """
    from wheelkiln.matrix.emitters import make_emitter
    from wheelkiln.matrix.render import write_workflow
    from wheelkiln.output_paths import check_output_file

    check_output_file(out_path, "--out")
    cwd = Path.cwd()
    loaded = load_recipes(recipes, cwd)
    plan = plan_matrix(loaded, cwd)
    # Named recipes go into the workflow as paths relative to the repository root;
    # none named: the workflow's kiln matrix takes recipes/*.toml as it finds them then.
    embedded = [Path(os.path.relpath(r.path, cwd)).as_posix() for r in loaded] if recipes else []
    write_workflow(make_emitter("github").render(embedded, requirement), out_path)
    counts = plan.counts()
    ui.info(
        f"Wrote {out_path}: {len(loaded)} recipes, "
        f"{counts['cells']} cells; a dispatch without inputs runs {counts['shard']} shard, "
        f"{counts['link']} link and {counts['build']} build jobs ({counts['total']} in all)."
    )
    try:
        check_cap([(p.cell, p.shard_count) for p in plan.cells], GITHUB_MATRIX_CAP)
    except KilnError as exc:
        ui.warn("a dispatch without inputs would be refused:\n" + exc.render())
