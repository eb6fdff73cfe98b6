"""Jobs: what an executor runs for a set of recipes (pure, no I/O).

Per selected cell, either

- a **sharded** cell (``sharding.count`` N > 1 and the cell's platform in
  ``sharding.platforms``, or that list empty): N shard jobs, then one link job that
  needs all of them; or
- a **whole** cell: one build job.

Jobs come out sorted by cell, then shard 0..N-1, link, build, with ids derived only from
the cell and the shard index, so the same recipes always give the same ids.

**Skipping cells that are already built** (``kiln matrix --skip-existing DIR``), so a
re-run resumes. A cell counts as built when DIR holds either

1. its build record, ``<cell-id>.build.json`` or ``<cell-id>.link.json`` (written beside
   the wheel by ``kiln build`` / ``kiln link``), with exit code 0 and naming a wheel that
   is present in DIR. The record names the cell exactly, so this is the primary rule; or
2. a wheel whose file name matches the cell on every axis the name can carry: the
   normalized package name, the CPython tag (``cp311`` for python 3.11), a platform tag
   of the cell's platform (``linux_x86_64``/``manylinux*_x86_64``, ``win_amd64``,
   ``macosx_*_arm64`` ...), and, for a cell with a CUDA or torch axis, a local version
   label naming them (``+cu130``, ``+cu130torch2.9``; separators ignored). A wheel
   without such a label cannot tell a cu12.8 cell from a cu13.0 one, so it skips
   neither: rebuilding is slow, skipping the wrong cell ships nothing.

Anything else (abi3 tags, a label without the CUDA minor) is not matched and the cell
builds again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from wheelkiln.cells import NO_CUDA, NO_TORCH, Cell
from wheelkiln.errors import UsageError
from wheelkiln.matrix import naming
from wheelkiln.matrix.cells import expand_cells
from wheelkiln.matrix.filters import (
    GITHUB_MATRIX_CAP,
    AxisFilter,
    MatrixSizes,
    check_cap,
    matrix_sizes,
    parse_filters,
    parse_lane,
    select_cells,
)
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.recipe.model import Recipe

JobKind = Literal["shard", "link", "build"]
WINDOWS: Final = "windows-amd64"


@dataclass(frozen=True)
class Job:
    """One job of the matrix."""

    id: str
    """Stable id, ``[A-Za-z0-9_-]``: :func:`wheelkiln.matrix.naming.job_id`."""
    kind: JobKind
    package: str
    """The recipe's name."""
    recipe_path: str
    """The recipe file, POSIX, relative to the root the matrix was expanded for."""
    cell_id: str
    axes: tuple[tuple[str, str], ...]
    """(axis, value) for python, cuda, torch, platform."""
    cache: str
    """The compiler cache this job uses: sccache on Windows lanes, else the recipe's."""
    name: str
    """The display name (at most 100 characters)."""
    needs: tuple[str, ...] = ()
    """Ids of the jobs this one waits for (a link job: its cell's shard jobs)."""
    shard_index: int | None = None
    """0-based; shard and link jobs only (link: None)."""
    shard_count: int | None = None
    """N; shard and link jobs only."""
    shard_partition: str | None = None
    """'seat' or 'source'; shard and link jobs only."""

    @property
    def axis(self) -> dict[str, str]:
        return dict(self.axes)

    @property
    def platform(self) -> str:
        return self.axis["platform"]


@dataclass(frozen=True)
class PlannedCell:
    """A selected cell that will run, and how."""

    cell: Cell
    recipe_path: str
    shard_count: int
    """N > 1: sharded; 1: built whole."""
    shard_partition: str | None
    cache: str

    @property
    def sharded(self) -> bool:
        return self.shard_count > 1


@dataclass(frozen=True)
class SkippedCell:
    cell: Cell
    reason: str


@dataclass(frozen=True)
class MatrixPlan:
    """The result of expanding recipes: the jobs, and what was left out and why."""

    cells: tuple[PlannedCell, ...]
    jobs: tuple[Job, ...]
    skipped: tuple[SkippedCell, ...] = ()
    excluded: tuple[str, ...] = ()
    """Packages given to the matrix of which the filters selected no cell."""
    filters: tuple[AxisFilter, ...] = ()
    lane: str | None = None

    def jobs_of(self, kind: JobKind) -> list[Job]:
        return [job for job in self.jobs if job.kind == kind]

    @property
    def sizes(self) -> MatrixSizes:
        return matrix_sizes((p.cell, p.shard_count) for p in self.cells)

    def counts(self) -> dict[str, int]:
        sizes = self.sizes
        return {
            "cells": len(self.cells) + len(self.skipped),
            "skipped": len(self.skipped),
            "sharded_cells": sum(1 for p in self.cells if p.sharded),
            "whole_cells": sum(1 for p in self.cells if not p.sharded),
            **sizes.as_dict(),
            "total": sizes.shard + sizes.link + sizes.build,
        }


# --- skip-existing ----------------------------------------------------------------------

_PLATFORM_TAGS: Final = {
    "linux-x86_64": re.compile(
        r"^(linux|manylinux(1|2010|2014|_\d+_\d+)|musllinux_\d+_\d+)_x86_64$"
    ),
    "linux-aarch64": re.compile(r"^(linux|manylinux(2014|_\d+_\d+)|musllinux_\d+_\d+)_aarch64$"),
    "windows-amd64": re.compile(r"^win_amd64$"),
    "macos-arm64": re.compile(r"^macosx_\d+_\d+_(arm64|universal2)$"),
    "macos-x86_64": re.compile(r"^macosx_\d+_\d+_(x86_64|intel|universal2)$"),
}
_LABEL_NOISE = re.compile(r"[._-]")


def _label_token(prefix: str, version: str) -> re.Pattern[str]:
    return re.compile(re.escape(prefix + version.replace(".", "")) + r"(?!\d)")


def _label_matches(cell: Cell, local: str | None) -> bool:
    """Whether a wheel's local version label names this cell's CUDA lane and torch."""
    label = _LABEL_NOISE.sub("", (local or "").lower())
    checks = ((cell.cuda, NO_CUDA, "cu", r"cu\d"), (cell.torch, NO_TORCH, "torch", r"torch\d"))
    for value, absent, prefix, any_version in checks:
        if value == absent:
            if re.search(any_version, label):
                return False
        elif not _label_token(prefix, value).search(label):
            return False
    return True


def wheel_matches_cell(filename: str, cell: Cell) -> bool:
    """Rule 2 of the module docstring: the wheel's file name says it is this cell's."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    if name != canonicalize_name(cell.package):
        return False
    interpreter = "cp" + cell.python.replace(".", "")
    platform_tag = _PLATFORM_TAGS.get(cell.platform)
    if platform_tag is None or not any(
        tag.interpreter == interpreter and platform_tag.match(tag.platform) for tag in tags
    ):
        return False
    return _label_matches(cell, version.local)


@dataclass(frozen=True)
class BuildRecordSummary:
    """What skip-existing needs from a build record JSON."""

    file: str
    wheel: str | None
    exit_code: int


@dataclass(frozen=True)
class ExistingWheels:
    """Wheels and build records already in a directory; call it with a cell for the
    reason it is skipped (or None). Built by :func:`wheelkiln.matrix.inputs.scan_existing`."""

    directory: str
    wheels: frozenset[str]
    records: Mapping[str, tuple[BuildRecordSummary, ...]] = field(default_factory=dict)
    """cell id → its build/link records."""

    @classmethod
    def from_names(cls, names: Iterable[str], directory: str = ".") -> ExistingWheels:
        return cls(directory, frozenset(n for n in names if n.endswith(".whl")))

    def __call__(self, cell: Cell) -> str | None:
        for record in self.records.get(cell.id, ()):
            if record.exit_code == 0 and record.wheel in self.wheels:
                return (
                    f"already built: {record.wheel} and its build record {record.file} "
                    f"are in {self.directory}"
                )
        for wheel in sorted(self.wheels):
            if wheel_matches_cell(wheel, cell):
                return f"already built: {wheel} is in {self.directory} (matched by file name)"
        return None


SkipExisting = Callable[[Cell], str | None] | Iterable[str]


# --- expansion --------------------------------------------------------------------------


def cache_for(recipe: Recipe, cell: Cell) -> str:
    """Windows lanes use sccache: cmake there regenerates files with timestamps newer
    than restored objects and the ccache setup does not survive it."""
    backend = recipe.cache.backend
    if cell.platform == WINDOWS and backend == "ccache":
        return "sccache"
    return backend


def shard_count_for(recipe: Recipe, cell: Cell) -> int:
    """N for a sharded cell, 1 for a cell that builds whole."""
    sharding = recipe.sharding
    if sharding.count > 1 and (not sharding.platforms or cell.platform in sharding.platforms):
        return sharding.count
    return 1


def _relative(path: Path, root: Path | None) -> str:
    if root is None:
        return path.as_posix()
    return Path(os.path.relpath(path, root)).as_posix()


def _job(planned: PlannedCell, kind: JobKind, shard_index: int | None = None,
         needs: tuple[str, ...] = ()) -> Job:
    cell = planned.cell
    count = planned.shard_count if planned.sharded else None
    shown_index = shard_index if kind == "shard" else None
    shown_count = count if kind == "shard" else None
    return Job(
        id=naming.job_id(kind, cell.id, shown_index, shown_count),
        kind=kind,
        package=cell.package,
        recipe_path=planned.recipe_path,
        cell_id=cell.id,
        axes=tuple(cell.axes().items()),
        cache=planned.cache,
        name=naming.display_name(kind, cell, shown_index, shown_count),
        needs=needs,
        shard_index=shard_index,
        shard_count=count,
        shard_partition=planned.shard_partition,
    )


def _jobs_for(planned: PlannedCell) -> list[Job]:
    if not planned.sharded:
        return [_job(planned, "build")]
    shards = [_job(planned, "shard", index) for index in range(planned.shard_count)]
    return [*shards, _job(planned, "link", needs=tuple(job.id for job in shards))]


def _skip_function(skip_existing: SkipExisting | None) -> Callable[[Cell], str | None] | None:
    if skip_existing is None or callable(skip_existing):
        return skip_existing
    if isinstance(skip_existing, str | os.PathLike):
        # a directory: reading it is I/O, done by commands.scan_existing
        raise TypeError("skip_existing takes file names or a callable, not a directory path")
    return ExistingWheels.from_names(skip_existing)


def expand_matrix(
    recipes: Sequence[LoadedRecipe],
    filters: Sequence[str | AxisFilter] = (),
    lane: str | None = None,
    skip_existing: SkipExisting | None = None,
    *,
    root: Path | None = None,
    cap: int | None = GITHUB_MATRIX_CAP,
) -> MatrixPlan:
    """Recipes and filters → the plan: planned cells, sorted jobs, skipped cells.

    Filters and the lane select cells (a filter that selects nothing is refused), then
    cells already built are skipped, then the matrices are checked against ``cap``
    (None: no cap, e.g. for the local executor). ``root`` makes recipe paths relative.
    """
    if not recipes:
        raise UsageError("No recipes to expand.", hint="Give recipe files, or run in a "
                         "directory with recipes/*.toml.")
    by_name: dict[str, LoadedRecipe] = {}
    for loaded in recipes:
        if loaded.name in by_name:
            raise UsageError(
                f"Two recipes are named '{loaded.name}': {by_name[loaded.name].path} and "
                f"{loaded.path}.",
                hint="Cell and job ids come from the name; rename one of them.",
            )
        by_name[loaded.name] = loaded
    parsed = parse_filters(filters)
    chosen_lane = parse_lane(lane) if lane is not None else None
    every_cell = [cell for loaded in recipes for cell in expand_cells(loaded.recipe)]
    selected = sorted(select_cells(every_cell, parsed, chosen_lane))
    skip = _skip_function(skip_existing)
    planned: list[PlannedCell] = []
    skipped: list[SkippedCell] = []
    for cell in selected:
        reason = skip(cell) if skip is not None else None
        if reason is not None:
            skipped.append(SkippedCell(cell, reason))
            continue
        loaded = by_name[cell.package]
        count = shard_count_for(loaded.recipe, cell)
        planned.append(PlannedCell(
            cell=cell,
            recipe_path=_relative(loaded.path, root),
            shard_count=count,
            shard_partition=loaded.recipe.sharding.partition if count > 1 else None,
            cache=cache_for(loaded.recipe, cell),
        ))
    if cap is not None:
        check_cap([(p.cell, p.shard_count) for p in planned], cap)
    present = {cell.package for cell in selected}
    return MatrixPlan(
        cells=tuple(planned),
        jobs=tuple(job for p in planned for job in _jobs_for(p)),
        skipped=tuple(skipped),
        excluded=tuple(sorted(name for name in by_name if name not in present)),
        filters=parsed,
        lane=chosen_lane,
    )


def expand_jobs(
    recipes: Sequence[LoadedRecipe],
    filters: Sequence[str | AxisFilter] = (),
    lane: str | None = None,
    skip_existing: SkipExisting | None = None,
    *,
    root: Path | None = None,
    cap: int | None = GITHUB_MATRIX_CAP,
) -> list[Job]:
    """The sorted jobs of :func:`expand_matrix` (see there)."""
    plan = expand_matrix(recipes, filters, lane, skip_existing, root=root, cap=cap)
    return list(plan.jobs)
