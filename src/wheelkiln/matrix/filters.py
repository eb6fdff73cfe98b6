"""Selecting cells (``-f AXIS=VALUE``, ``--lane``) and refusing matrices that cannot run.

Filters on the same axis are alternatives (``-f python=3.11 -f python=3.12``); filters on
different axes must all hold. ``--lane`` picks one CUDA lane (``none``: the cells without
CUDA) and combines with the filters.

A filter that selects nothing is an error, never an empty green run: a dispatch of a
torch-independent package with ``-f torch=...`` once matched zero cells, skipped every
job and reported success.

GitHub runs at most 256 jobs per job matrix. The emitted workflow has three matrices
(compile-shard, link, build), so each of them must fit; an over-cap request is refused
with the splits that would fit: per lane, per package, or a smaller shard count N.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from wheelkiln.cells import NO_CUDA, NO_TORCH, Cell
from wheelkiln.errors import UsageError

AXES: Final = ("package", "python", "cuda", "torch", "platform")
"""The axes a filter can name; ``package`` is the recipe's name."""

GITHUB_MATRIX_CAP: Final = 256
"""GitHub's limit on the jobs one job matrix generates per workflow run."""

_PREFIXES: Final = {"python": "py", "cuda": "cu", "torch": "torch"}
"""Values may be written as they appear in cell ids (py3.11, cu13.0, torch2.9)."""

MATRIX_NAMES: Final = {"shard": "compile-shard", "link": "link", "build": "build"}
"""The workflow job that runs each kind of matrix entry."""


@dataclass(frozen=True)
class AxisFilter:
    """One ``-f AXIS=VALUE``."""

    axis: str
    value: str

    @property
    def flag(self) -> str:
        return f"-f {self.axis}={self.value}"

    def matches(self, cell: Cell) -> bool:
        return axis_value(cell, self.axis) == self.value


def axis_value(cell: Cell, axis: str) -> str:
    return cell.package if axis == "package" else cell.axes()[axis]


def parse_filter(text: str) -> AxisFilter:
    """``cuda=13.0`` → AxisFilter('cuda', '13.0'), refusing unknown axes by name."""
    axis, sep, value = text.partition("=")
    axis, value = axis.strip(), value.strip()
    if not sep or not axis:
        raise UsageError(
            f"-f {text}: expected AXIS=VALUE, e.g. -f cuda=13.0.",
            hint=f"Axes: {', '.join(AXES)}.",
        )
    if axis not in AXES:
        guesses = difflib.get_close_matches(axis, AXES, n=1, cutoff=0.6)
        perhaps = f" Perhaps you meant '{guesses[0]}'?" if guesses else ""
        raise UsageError(
            f"-f {text}: unknown axis '{axis}'.{perhaps} Valid axes: {', '.join(AXES)}.",
            hint="Run kiln matrix --explain to see every cell's axes.",
        )
    if not value:
        raise UsageError(
            f"-f {text}: no value after '='.",
            hint=f"Give one, e.g. -f {axis}=VALUE; kiln matrix --explain lists the values.",
        )
    prefix = _PREFIXES.get(axis)
    if prefix and value.startswith(prefix) and value[len(prefix):][:1].isdigit():
        value = value[len(prefix):]
    return AxisFilter(axis, value)


def parse_filters(texts: Iterable[str | AxisFilter]) -> tuple[AxisFilter, ...]:
    return tuple(t if isinstance(t, AxisFilter) else parse_filter(t) for t in texts)


def parse_lane(text: str) -> str:
    """``13.0``, ``cu13.0`` → ``13.0``; ``none`` picks the cells without CUDA."""
    lane = text.strip()
    if lane.startswith("cu") and lane[2:3].isdigit():
        lane = lane[2:]
    return lane


def _value_key(value: str) -> tuple[bool, tuple[int, ...], str]:
    """Versions in numeric order (3.9 < 3.10), names alphabetically, ``none`` last."""
    if re.fullmatch(r"\d+(\.\d+)*", value):
        return (False, tuple(int(part) for part in value.split(".")), "")
    return (value == "none", (), value)


def sorted_values(values: Iterable[str]) -> list[str]:
    return sorted(set(values), key=_value_key)


def _names(packages: Iterable[str]) -> tuple[str, str]:
    """``a, b`` and the verb agreeing with it."""
    listed = sorted(set(packages))
    return ", ".join(listed), "has" if len(listed) == 1 else "have"


def _refuse_unmatched(flt: AxisFilter, cells: Sequence[Cell]) -> None:
    valid = sorted_values(axis_value(cell, flt.axis) for cell in cells)
    torchless = sorted({c.package for c in cells if c.torch == NO_TORCH})
    if flt.axis == "torch" and torchless and len(torchless) == len({c.package for c in cells}):
        names, verb = _names(torchless)
        whose = "its" if len(torchless) == 1 else "their"
        raise UsageError(
            f"{flt.flag} matches no cell: {names} {verb} no torch axis "
            f"(links_torch = false), so {whose} wheels do not depend on torch.",
            hint=f"Drop {flt.flag}. Set matrix.links_torch = true only if the wheel links torch.",
        )
    message = f"{flt.flag} matches no cell. Valid {flt.axis} values: {', '.join(valid)}."
    if flt.axis == "torch" and torchless:
        names, verb = _names(torchless)
        message += f" {names} {verb} no torch axis (links_torch = false)."
    raise UsageError(message, hint="Run kiln matrix --explain to see every cell.")


def select_cells(
    cells: Sequence[Cell], filters: Sequence[AxisFilter] = (), lane: str | None = None
) -> list[Cell]:
    """The cells every filter and the lane accept; refuse a filter that selects nothing.

    Each filter and the lane are first checked alone against every cell, so the error
    names the one at fault (and lists the values that exist); only then is the
    combination checked.
    """
    for flt in filters:
        if not any(flt.matches(cell) for cell in cells):
            _refuse_unmatched(flt, cells)
    if lane is not None and not any(cell.cuda == lane for cell in cells):
        lanes = sorted_values(cell.cuda for cell in cells)
        raise UsageError(
            f"--lane {lane} matches no cell. Valid lanes: {', '.join(lanes)}.",
            hint=f"A lane is a CUDA version; '{NO_CUDA}' selects the cells without CUDA.",
        )
    by_axis: dict[str, list[AxisFilter]] = defaultdict(list)
    for flt in filters:
        by_axis[flt.axis].append(flt)
    selected = [
        cell for cell in cells
        if (lane is None or cell.cuda == lane)
        and all(any(f.matches(cell) for f in group) for group in by_axis.values())
    ]
    if not selected:
        given = [f.flag for f in filters] + ([f"--lane {lane}"] if lane is not None else [])
        raise UsageError(
            f"{' '.join(given)}: these match no cell together, though each matches some alone.",
            hint="Run kiln matrix --explain with fewer filters to see which cells exist.",
        )
    return selected


# --- the 256-job cap ------------------------------------------------------------------


@dataclass(frozen=True)
class MatrixSizes:
    """How many entries each of the workflow's three matrices gets."""

    shard: int
    link: int
    build: int

    def as_dict(self) -> dict[str, int]:
        return {"shard": self.shard, "link": self.link, "build": self.build}

    @property
    def largest(self) -> int:
        return max(self.shard, self.link, self.build)


PlannedCount = tuple[Cell, int]
"""A cell and its shard count N (1: the cell builds whole)."""


def matrix_sizes(planned: Iterable[PlannedCount]) -> MatrixSizes:
    shard = link = build = 0
    for _cell, count in planned:
        if count > 1:
            shard += count
            link += 1
        else:
            build += 1
    return MatrixSizes(shard, link, build)


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


LISTED_PARTS: Final = 6
"""A split with more parts than this is summarised by its largest part."""
LISTED_RECIPES: Final = 4
"""A smaller-N proposal names at most this many recipes to change."""


def _split_line(
    label: str, planned: Sequence[PlannedCount], key: Callable[[Cell], str],
    flag: Callable[[str], str], cap: int,
) -> str | None:
    parts: dict[str, list[PlannedCount]] = defaultdict(list)
    for item in planned:
        parts[key(item[0])].append(item)
    if len(parts) < 2:
        return None
    sizes = {value: matrix_sizes(items).largest for value, items in parts.items()}
    ordered = sorted_values(sizes)
    worst = max(ordered, key=lambda value: sizes[value])
    if sizes[worst] > cap:
        return f"  {label}: does not fit ({flag(worst)} alone → {_jobs(sizes[worst])})"
    if len(ordered) > LISTED_PARTS:
        return (
            f"  {label}: {len(ordered)} dispatches, the largest "
            f"{flag(worst)} → {_jobs(sizes[worst])}"
        )
    listed = ", ".join(f"{flag(value)} → {_jobs(sizes[value])}" for value in ordered)
    return f"  {label}: {listed}"


def _smaller_n_line(planned: Sequence[PlannedCount], cap: int) -> str | None:
    counts = [count for _cell, count in planned if count > 1]
    if not counts:
        return None
    for n in range(max(counts) - 1, 1, -1):
        largest = matrix_sizes((cell, min(count, n)) for cell, count in planned).largest
        if largest <= cap:
            over = sorted({cell.package for cell, count in planned if count > n})
            where = (", ".join(over) if len(over) <= LISTED_RECIPES
                     else f"the {len(over)} recipes that shard more")
            return f"  smaller N: sharding.count = {n} in {where} → {_jobs(largest)}"
    at_two = matrix_sizes((cell, min(count, 2)) for cell, count in planned).largest
    return f"  smaller N: does not fit (N = 2 → {_jobs(at_two)})"


def check_cap(planned: Sequence[PlannedCount], cap: int = GITHUB_MATRIX_CAP) -> None:
    """Refuse a dispatch in which any of the three matrices exceeds ``cap`` jobs.

    The refusal proposes splits, each with the size of the largest matrix a dispatch
    of that part would have: one dispatch per CUDA lane (``--lane``), one per package
    (``-f package=``), or the largest shard count N at which everything fits.
    """
    sizes = matrix_sizes(planned)
    over = [(MATRIX_NAMES[kind], n) for kind, n in sizes.as_dict().items() if n > cap]
    if not over:
        return
    first, *rest = over
    message = f"The {first[0]} matrix would have {first[1]} jobs"
    message += "".join(f" and the {name} matrix {n}" for name, n in rest)
    message += (
        f"; GitHub runs at most {cap} jobs per matrix "
        f"(this dispatch: {sizes.shard} shard, {sizes.link} link, {sizes.build} build)."
    )
    lines = [
        _split_line("per lane", planned, lambda c: c.cuda, lambda v: f"--lane {v}", cap),
        _split_line("per package", planned, lambda c: c.package,
                    lambda v: f"-f package={v}", cap),
        _smaller_n_line(planned, cap),
    ]
    proposals = [line for line in lines if line is not None]
    if proposals:
        message += "\nSplits (largest matrix per dispatch):\n" + "\n".join(proposals)
    else:
        message += "\nNo lane, package or shard-count split applies to it."
    raise UsageError(
        message,
        hint="Dispatch once per part (the workflow's lane and filters inputs take the same "
        "values), narrow it with -f python=... or -f platform=..., or lower sharding.count.",
    )
