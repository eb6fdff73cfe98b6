"""``kiln recipe check`` and ``kiln recipe schema``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from wheelkiln import ui
from wheelkiln.cli.options import CONTEXT, emit_json, json_option
from wheelkiln.errors import KilnError


@click.group(context_settings=CONTEXT)
def recipe() -> None:
    """Validate recipes and print their schema."""


@recipe.command("check", context_settings=CONTEXT)
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@json_option("the result")
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
