"""A synthetic recipe farm: 44 recipes written as TOML, with their expected job counts.

Four recipes are modelled on real farms (flash-attn, natten, spconv, cumm); 40 more vary
every axis the matrix has: python sets, CUDA lanes (none, one, two), torch with
links_torch true and false, platforms (Linux x86_64/aarch64, Windows, macOS), sharding
count, sharding platforms and filter, and the source kind (a local tree or a PyPI sdist
with a fake sha256).

The expected counts are computed here from the spec by plain arithmetic, independently
of :mod:`wheelkiln.matrix`, so the tests compare two derivations.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FAKE_SHA256 = "ab" * 32
LANES = {
    "12.8": ("8.0", "9.0"),
    "13.0": ("9.0", "10.0"),
}


@dataclass(frozen=True)
class FarmRecipe:
    name: str
    python: tuple[str, ...] = ("3.11",)
    cuda: tuple[str, ...] = ()
    torch: tuple[str, ...] = ()
    links_torch: bool = False
    platforms: tuple[str, ...] = ("linux-x86_64",)
    shard_count: int = 1
    shard_platforms: tuple[str, ...] = ()
    shard_partition: str = "seat"
    pypi: bool = False

    # --- expectations, by arithmetic -----------------------------------------------
    @property
    def torches(self) -> int:
        return len(self.torch) if self.links_torch else 1

    @property
    def cells(self) -> int:
        return len(self.python) * max(1, len(self.cuda)) * self.torches * len(self.platforms)

    @property
    def sharded_cells(self) -> int:
        if self.shard_count <= 1:
            return 0
        sharding = len(self.shard_platforms or self.platforms)
        return len(self.python) * max(1, len(self.cuda)) * self.torches * sharding

    def expected(self) -> dict[str, int]:
        sharded = self.sharded_cells
        return {
            "shard": sharded * self.shard_count,
            "link": sharded,
            "build": self.cells - sharded,
        }

    # --- the TOML -------------------------------------------------------------------
    def toml(self) -> str:
        def strings(values: tuple[str, ...]) -> str:
            return "[" + ", ".join(f'"{v}"' for v in values) + "]"

        lines = [f'name = "{self.name}"', "", "[source]"]
        if self.pypi:
            lines += [f'pypi = "{self.name}==1.0.0"', f'sha256 = "{FAKE_SHA256}"']
        else:
            lines.append(f'path = "../sources/{self.name}"')
        lines += ["", "[build]", 'env = { MAX_JOBS = "2" }', "", "[matrix]"]
        lines.append(f"python = {strings(self.python)}")
        if self.torch:
            lines.append(f"torch = {strings(self.torch)}")
        lines.append(f"links_torch = {'true' if self.links_torch else 'false'}")
        lines.append(f"platforms = {strings(self.platforms)}")
        for lane in self.cuda:
            lines += ["", "[[matrix.cuda]]", f'version = "{lane}"',
                      f"arch_list = {strings(LANES[lane])}"]
        lines += ["", "[sharding]", f"count = {self.shard_count}",
                  f'partition = "{self.shard_partition}"']
        if self.shard_platforms:
            lines.append(f"platforms = {strings(self.shard_platforms)}")
        if self.shard_partition == "source":
            lines.append('source_globs = ["csrc/generated/**/*.cu"]')
        return "\n".join(lines) + "\n"


NAMED = (
    FarmRecipe(
        "flash-attn", python=("3.11", "3.12"), cuda=("12.8", "13.0"), torch=("2.8", "2.9"),
        links_torch=True, platforms=("linux-x86_64", "linux-aarch64"), shard_count=8,
    ),
    FarmRecipe(
        "natten", python=("3.12",), cuda=("13.0",), torch=("2.9",), links_torch=True,
        platforms=("linux-x86_64", "windows-amd64"), shard_count=20,
        shard_platforms=("linux-x86_64",), shard_partition="source",
    ),
    FarmRecipe(
        "spconv", python=("3.11", "3.12"), cuda=("12.8", "13.0"), torch=("2.9",),
        links_torch=False, platforms=("linux-x86_64", "linux-aarch64"), shard_count=10,
        shard_partition="source", pypi=True,
    ),
    FarmRecipe(
        "cumm", python=("3.11", "3.12"), cuda=("12.8", "13.0"), links_torch=False,
        platforms=("linux-x86_64",),
    ),
)

_PYTHONS = (("3.11",), ("3.11", "3.12"), ("3.10", "3.11", "3.12"), ("3.12", "3.13"))
_CUDAS: tuple[tuple[str, ...], ...] = ((), ("12.8",), ("12.8", "13.0"), ("13.0",), ())
_TORCHES = (("2.8",), ("2.8", "2.9"), ("2.9",))
_PLATFORMS = (
    ("linux-x86_64",),
    ("linux-x86_64", "linux-aarch64"),
    ("linux-x86_64", "windows-amd64"),
    ("linux-x86_64", "linux-aarch64", "windows-amd64"),
    ("linux-x86_64", "macos-arm64"),
    ("macos-arm64", "macos-x86_64"),
)
_COUNTS = (1, 2, 4, 1, 6, 3, 1)


def _generated(index: int) -> FarmRecipe:
    cuda = _CUDAS[index % len(_CUDAS)]
    platforms = _PLATFORMS[index % len(_PLATFORMS)]
    # torch only where there is CUDA; links_torch on two of three of those
    torch = _TORCHES[index % len(_TORCHES)] if cuda else ()
    links_torch = bool(torch) and index % 3 != 0
    count = _COUNTS[index % len(_COUNTS)]
    shard_platforms = (platforms[0],) if count > 1 and index % 2 else ()
    return FarmRecipe(
        name=f"kern{index:02d}",
        python=_PYTHONS[index % len(_PYTHONS)],
        cuda=cuda,
        torch=torch,
        links_torch=links_torch,
        platforms=platforms,
        shard_count=count,
        shard_platforms=shard_platforms,
        shard_partition="source" if count > 1 and index % 5 == 0 else "seat",
        pypi=index % 4 == 1,
    )


FARM: tuple[FarmRecipe, ...] = NAMED + tuple(_generated(i) for i in range(40))


def write_recipe(root: Path, spec: FarmRecipe) -> Path:
    """Write one recipe (and its source tree, for a path source) under ``root``."""
    recipes = root / "recipes"
    recipes.mkdir(parents=True, exist_ok=True)
    if not spec.pypi:
        (root / "sources" / spec.name).mkdir(parents=True, exist_ok=True)
    path = recipes / f"{spec.name}.toml"
    path.write_text(spec.toml(), encoding="utf-8")
    return path


def write_farm(root: Path, specs: tuple[FarmRecipe, ...] = FARM) -> list[Path]:
    """Write every recipe as ``root/recipes/NAME.toml``; return their paths, sorted."""
    return sorted(write_recipe(root, spec) for spec in specs)


def expected_totals(specs: tuple[FarmRecipe, ...] = FARM) -> dict[str, int]:
    totals = {"cells": 0, "sharded_cells": 0, "shard": 0, "link": 0, "build": 0}
    for spec in specs:
        totals["cells"] += spec.cells
        totals["sharded_cells"] += spec.sharded_cells
        for kind, n in spec.expected().items():
            totals[kind] += n
    return totals
