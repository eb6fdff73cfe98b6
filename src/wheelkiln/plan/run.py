"""``kiln plan`` end to end: lint, census (history, census pass or scan), plan."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from wheelkiln import ui
from wheelkiln.errors import BuildError
from wheelkiln.plan.census import (
    Census,
    cell_arch_count,
    census_from_history,
    census_from_pass,
    census_from_scan,
    census_pass,
    read_history,
)
from wheelkiln.plan.lint import LintReport, lint_recipe
from wheelkiln.plan.planner import Plan, candidate_counts, census_plan, make_plan
from wheelkiln.recipe.load import LoadedRecipe


def plan_recipe(
    recipe_ref: str,
    *,
    cell_selector: str | None = None,
    counts: Sequence[int] = (),
    history: Sequence[Path] = (),
    static: bool = False,
    jobs: int | None = None,
    workdir: Path | None = None,
) -> tuple[LoadedRecipe, Plan, LintReport]:
    from wheelkiln.builder.job_env import resolve_jobs
    from wheelkiln.builder.source import fetch_source
    from wheelkiln.matrix.cells import expand_cells, select_cell
    from wheelkiln.paths import sources_dir
    from wheelkiln.recipe.load import find_recipe

    loaded = find_recipe(recipe_ref)
    recipe = loaded.recipe
    cell = select_cell(recipe, cell_selector)
    with ui.step(f"Linting {loaded.name}"):
        lint = lint_recipe(loaded)
    package = fetch_source(loaded, sources_dir())
    families = recipe.families
    archs = cell_arch_count(recipe.build.env, cell.arch_list)
    census: Census
    if history:
        with ui.step("Reading the earlier build's logs"):
            census = census_from_history(read_history(history), families, package, archs)
        if not census.tus:
            raise BuildError(
                "No TUs found in " + ", ".join(map(str, history)) + ".",
                hint="Point --from at shard archives, shard or build job directories, or "
                "wrapper.jsonl logs; or drop --from for a census pass.",
            )
    elif static:
        census = census_from_scan(package, families, archs)
    else:
        from wheelkiln.builder_lock import BuilderLock, describe

        lock = BuilderLock()
        if not lock.inherited():
            lock.acquire(
                timeout=None,
                on_wait=lambda holder: ui.info(
                    f"Waiting for the builder lock ({describe(holder)})."
                ),
            )
        try:
            done = census_pass(loaded, cell, workdir, jobs)
        finally:
            lock.release()
        if not any(r.get("action") == "stub" for r in done.records):
            raise BuildError(
                f"The census pass of {cell.id} stubbed no TU (exit {done.exit_code}): the "
                "build never reached a compile through the seat wrapper.",
                hint="Look at the census job's build.log under the work directory, or plan "
                "with --static or --from an earlier build.",
            )
        census = census_from_pass(done, families, package)
        if done.exit_code != 0:
            census = replace(
                census,
                notes=(
                    *census.notes,
                    f"the census build exited {done.exit_code} with every TU stubbed",
                ),
            )
    cells = expand_cells(recipe)
    sharding = recipe.sharding
    sharded = sum(1 for c in cells if not sharding.platforms or c.platform in sharding.platforms)
    resolved = resolve_jobs(
        jobs, recipe.build.jobs, dict(recipe.build.env), os.environ, loaded.path
    ).jobs
    plan = make_plan(
        census,
        candidate_counts(len(census.tus), counts, sharding.count),
        jobs=resolved,
        sharded_cells=sharded,
        whole_cells=len(cells) - sharded,
        recipe_count=sharding.count,
    )
    return loaded, plan, lint


def write_map(plan: Plan, count: int, path: Path) -> tuple[Path, int]:
    """Write the census plan's partition map for N = ``count``."""
    costs = plan.census.costs()
    families = {tu.key: tu.family for tu in plan.census.tus}
    mapping = census_plan(costs, families, count)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(mapping, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path, count


def plan_json(plan: Plan, lint: LintReport, written: tuple[Path, int] | None) -> dict[str, Any]:
    return {
        "census": plan.census.as_dict(),
        "jobs": plan.jobs,
        "sharded_cells": plan.sharded_cells,
        "whole_cells": plan.whole_cells,
        "candidates": [candidate.as_dict() for candidate in plan.candidates],
        "ceiling": (
            {"family": plan.ceiling.family, "count": plan.ceiling.count} if plan.ceiling else None
        ),
        "recommended": plan.recommended,
        "reason": plan.reason,
        "lint": lint.as_dict(),
        "map": {"path": str(written[0]), "count": written[1]} if written else None,
    }
