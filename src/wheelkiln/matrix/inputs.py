"""What ``kiln matrix`` and ``kiln ci`` read: the recipes, and the wheels and build
records of a skip-existing directory. Expansion itself is pure
(:mod:`~wheelkiln.matrix.jobs`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wheelkiln import ui
from wheelkiln.errors import UsageError
from wheelkiln.matrix.jobs import BuildRecordSummary, ExistingWheels, MatrixPlan
from wheelkiln.recipe.load import LoadedRecipe

RECORD_SUFFIXES = (".build.json", ".link.json")


def load_recipes(refs: tuple[str, ...], cwd: Path) -> list[LoadedRecipe]:
    """The recipes named on the command line, else every ``recipes/*.toml`` under cwd."""
    from wheelkiln.recipe.load import find_recipe, load_recipe

    if refs:
        return [find_recipe(ref, [cwd / "recipes"]) for ref in refs]
    paths = sorted((cwd / "recipes").glob("*.toml"))
    if not paths:
        raise UsageError(
            f"No recipes given, and none in {cwd / 'recipes'}.",
            hint="Give recipe files (kiln matrix recipes/pkg.toml), or run in the directory "
            "that holds recipes/.",
        )
    return [load_recipe(path) for path in paths]


def _record_summary(path: Path) -> tuple[str, BuildRecordSummary] | None:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        cell = str(data["cell"])
        wheel = data.get("wheel") or {}
        summary = BuildRecordSummary(
            file=path.name,
            wheel=str(wheel["name"]) if isinstance(wheel, dict) and "name" in wheel else None,
            exit_code=int(data.get("exit_code", 1)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ui.warn(f"{path}: not a readable build record; ignored for --skip-existing.")
        return None
    return cell, summary


def scan_existing(directory: Path) -> ExistingWheels:
    """The wheels and build records in ``directory`` (see :mod:`wheelkiln.matrix.jobs`)."""
    if not directory.is_dir():
        ui.warn(f"--skip-existing {directory}: no such directory; no cell is skipped.")
        return ExistingWheels(str(directory), frozenset())
    wheels: set[str] = set()
    records: dict[str, list[BuildRecordSummary]] = {}
    for path in sorted(directory.iterdir()):
        if path.name.endswith(".whl") and path.is_file():
            wheels.add(path.name)
        elif path.name.endswith(RECORD_SUFFIXES):
            found = _record_summary(path)
            if found is not None:
                records.setdefault(found[0], []).append(found[1])
    return ExistingWheels(
        str(directory), frozenset(wheels), {cell: tuple(r) for cell, r in records.items()}
    )


def plan_matrix(
    recipes: list[LoadedRecipe], root: Path, filters: tuple[str, ...] = (),
    lane: str | None = None, skip_existing: Path | None = None,
) -> MatrixPlan:
    """Expand loaded recipes, without the cap check (the caller decides when)."""
    from wheelkiln.matrix.jobs import expand_matrix

    skip = scan_existing(skip_existing) if skip_existing is not None else None
    return expand_matrix(recipes, filters, lane, skip, root=root, cap=None)
