"""The only writer of the matrix: ``kiln matrix --json``, ``--explain``, the workflow file.

``--json`` gives one object on stdout::

    {
      "schema": 1,
      "cap": 256,
      "lane": "13.0" | null,
      "filters": ["python=3.12", ...],
      "shard": {"include": [entry, ...]},   # fromJSON() → the compile-shard matrix
      "link":  {"include": [entry, ...]},   # → the link matrix
      "build": {"include": [entry, ...]},   # → the build matrix
      "counts": {"cells", "skipped", "sharded_cells", "whole_cells",
                 "shard", "link", "build", "total"},
      "skipped": [{"cell", "package", "reason"}, ...],
      "excluded": ["package", ...]          # given, but no cell selected
    }

Every entry has ``id name kind package recipe cell python cuda torch platform runs_on
container cache`` (``container``: the CUDA lane's pinned toolkit image, or empty); shard
entries add ``shard_index shard_count shard_partition archive artifact``; link entries add
``shard_count shard_partition artifact_pattern wheel_artifact needs``; build entries add
``wheel_artifact``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import click
from rich import box
from rich.console import Console
from rich.table import Table

from wheelkiln.cells import shard_archive, shard_artifact, shard_artifact_pattern
from wheelkiln.matrix import naming
from wheelkiln.matrix.filters import GITHUB_MATRIX_CAP
from wheelkiln.matrix.github import container_for, runner_for
from wheelkiln.matrix.jobs import Job, MatrixPlan

SCHEMA: Final = 1


def job_entry(job: Job) -> dict[str, Any]:
    """One ``include`` entry: everything the workflow's steps read from ``matrix.*``."""
    axes = job.axis
    entry: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "kind": job.kind,
        "package": job.package,
        "recipe": job.recipe_path,
        "cell": job.cell_id,
        **axes,
        "runs_on": runner_for(axes["platform"]),
        "container": container_for(axes["platform"], axes["cuda"]),
        "cache": job.cache,
    }
    if job.kind == "shard":
        assert job.shard_index is not None and job.shard_count is not None
        entry.update(
            shard_index=job.shard_index,
            shard_count=job.shard_count,
            shard_partition=job.shard_partition,
            archive=shard_archive(job.cell_id, job.shard_index, job.shard_count),
            artifact=shard_artifact(job.cell_id, job.shard_index, job.shard_count),
        )
    elif job.kind == "link":
        assert job.shard_count is not None
        entry.update(
            shard_count=job.shard_count,
            shard_partition=job.shard_partition,
            artifact_pattern=shard_artifact_pattern(job.cell_id, job.shard_count),
            wheel_artifact=naming.wheel_artifact(job.cell_id),
            needs=list(job.needs),
        )
    else:
        entry["wheel_artifact"] = naming.wheel_artifact(job.cell_id)
    return entry


def matrix_document(plan: MatrixPlan) -> dict[str, Any]:
    """The ``--json`` object (see the module docstring)."""
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "cap": GITHUB_MATRIX_CAP,
        "lane": plan.lane,
        "filters": [f"{f.axis}={f.value}" for f in plan.filters],
    }
    for kind in ("shard", "link", "build"):
        document[kind] = {"include": [job_entry(job) for job in plan.jobs_of(kind)]}
    document["counts"] = plan.counts()
    document["skipped"] = [
        {"cell": s.cell.id, "package": s.cell.package, "reason": s.reason} for s in plan.skipped
    ]
    document["excluded"] = list(plan.excluded)
    return document


def render_json(plan: MatrixPlan) -> str:
    return json.dumps(matrix_document(plan), indent=2, sort_keys=True)


def print_json(plan: MatrixPlan) -> None:
    click.echo(render_json(plan))


def explain_tables(plan: MatrixPlan) -> list[Table]:
    """Cells with their shards and links, then skipped cells and why."""
    cells = Table(title="kiln matrix", title_justify="left", box=box.SIMPLE_HEAD)
    cells.add_column("cell", no_wrap=True)
    cells.add_column("plan", no_wrap=True)
    cells.add_column("jobs", justify="right", no_wrap=True)
    cells.add_column("runs on", no_wrap=True)
    cells.add_column("cache", no_wrap=True)
    for planned in plan.cells:
        if planned.sharded:
            how = f"{planned.shard_count} shards ({planned.shard_partition}) + link"
            jobs = planned.shard_count + 1
        else:
            how, jobs = "whole", 1
        cells.add_row(planned.cell.id, how, str(jobs), runner_for(planned.cell.platform),
                      planned.cache)
    for item in plan.skipped:
        cells.add_row(item.cell.id, "[dim]skipped[/dim]", "0",
                      runner_for(item.cell.platform), "")
    counts = plan.counts()
    cells.caption = (
        f"{counts['cells']} cells: {counts['sharded_cells']} sharded "
        f"({counts['shard']} shard + {counts['link']} link jobs), {counts['whole_cells']} "
        f"whole ({counts['build']} build jobs), {counts['skipped']} skipped; "
        f"largest matrix {plan.sizes.largest} of {GITHUB_MATRIX_CAP}"
    )
    cells.caption_justify = "left"
    tables = [cells]
    if plan.skipped:
        skipped = Table(title="skipped", title_justify="left", box=box.SIMPLE_HEAD)
        skipped.add_column("cell")
        skipped.add_column("why")
        for item in plan.skipped:
            skipped.add_row(item.cell.id, item.reason)
        tables.append(skipped)
    return tables


LISTED_EXCLUDED: Final = 10


def excluded_line(plan: MatrixPlan) -> str | None:
    """Packages given but filtered out entirely (all listed in --json)."""
    if not plan.excluded:
        return None
    if len(plan.excluded) <= LISTED_EXCLUDED:
        return "No cell selected of: " + ", ".join(plan.excluded) + "."
    return f"No cell selected of {len(plan.excluded)} packages (listed in --json)."


LOG_WIDTH: Final = 160
"""CI logs are not terminals (rich assumes 80 columns): give cell ids room there."""


def print_explain(plan: MatrixPlan, console: Console) -> None:
    if not console.is_terminal and console.width < LOG_WIDTH:
        console = Console(file=console.file, width=LOG_WIDTH, highlight=False,
                          no_color=console.no_color)
    for table in explain_tables(plan):
        console.print(table)
    line = excluded_line(plan)
    if line is not None:
        console.print(line)


def write_workflow(text: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
