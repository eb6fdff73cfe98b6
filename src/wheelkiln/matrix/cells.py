"""A recipe's cells: expansion and selection (pure, no I/O). The noun itself,
:class:`~wheelkiln.cells.Cell`, lives in :mod:`wheelkiln.cells`."""

from __future__ import annotations

import platform
import sys

from wheelkiln.cells import NO_CUDA, NO_TORCH, Cell
from wheelkiln.errors import UsageError
from wheelkiln.recipe.model import Recipe


def expand_cells(recipe: Recipe) -> list[Cell]:
    """Every cell of one recipe, sorted. links_torch = false collapses the torch axis."""
    lanes: list[tuple[str, tuple[str, ...]]] = [
        (lane.version, lane.arch_list) for lane in recipe.matrix.cuda
    ] or [(NO_CUDA, ())]
    torches = list(recipe.matrix.torch) if recipe.matrix.links_torch else [NO_TORCH]
    cells = {
        Cell(recipe.name, py, cuda, torch, plat, arch)
        for py in recipe.matrix.python
        for cuda, arch in lanes
        for torch in torches
        for plat in recipe.matrix.platforms
    }
    return sorted(cells)


def host_platform() -> str:
    machine = platform.machine().lower()
    if sys.platform.startswith("linux"):
        return "linux-aarch64" if machine in ("aarch64", "arm64") else "linux-x86_64"
    if sys.platform == "darwin":
        return "macos-arm64" if machine == "arm64" else "macos-x86_64"
    return "windows-amd64"


def host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def select_cell(recipe: Recipe, selector: str | None) -> Cell:
    """Pick one cell: by id, by 'axis=value,...', or (no selector) the one for this host.

    Without a selector the host's python and platform are preferred, then the first
    CUDA lane and torch version the recipe lists.
    """
    cells = expand_cells(recipe)
    if selector:
        by_id = [cell for cell in cells if cell.id == selector]
        if by_id:
            return by_id[0]
        if "=" not in selector:
            raise UsageError(
                f"--cell {selector!r} matches no cell of {recipe.name}.",
                hint="Valid cells: " + ", ".join(cell.id for cell in cells),
            )
        wanted: dict[str, str] = {}
        for part in selector.split(","):
            axis, _, value = part.partition("=")
            axis = axis.strip()
            if axis not in ("python", "cuda", "torch", "platform"):
                raise UsageError(
                    f"--cell: unknown axis {axis!r}.",
                    hint="Axes are python, cuda, torch and platform, e.g. --cell python=3.11.",
                )
            wanted[axis] = value.strip()
        matching = [c for c in cells if all(c.axes()[a] == v for a, v in wanted.items())]
        if not matching:
            raise UsageError(
                f"--cell {selector!r} matches no cell of {recipe.name}.",
                hint="Valid cells: " + ", ".join(cell.id for cell in cells),
            )
        cells = matching
    preferred = [
        c for c in cells if c.python == host_python() and c.platform == host_platform()
    ] or [c for c in cells if c.platform == host_platform()]
    if not preferred:
        raise UsageError(
            f"{recipe.name} has no cell for this host ({host_platform()}, python {host_python()}).",
            hint="Valid cells: " + ", ".join(cell.id for cell in cells),
        )
    return preferred[0]
