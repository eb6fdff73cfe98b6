"""``kiln lint``, ``kiln plan`` and ``kiln timeline`` (registered in :mod:`wheelkiln.cli`).

Parsing, calling and printing only: the work is in :mod:`wheelkiln.plan.lint`,
:mod:`wheelkiln.plan.census` and :mod:`wheelkiln.plan.timeline`.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.markup import escape

from wheelkiln import ui
from wheelkiln.errors import GateError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


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
