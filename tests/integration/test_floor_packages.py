"""The hot floor's packages (``benchmarks/floor``), which ``bench_cache.py --floor``
measures: each builds from its recipe, passes its smoke test, computes its answer, and
builds again hot, in another work directory, with every compile (and Cython transpile) a
hit.

floor-kernels' CUDA TU is part of a pybind11 module, so CMake hands nvcc the build
environment's include directory as ``-isystem=DIR``, a spelling ccache leaves absolute:
before kiln's launcher respelled it, that TU missed in every other directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, Kiln

FLOOR = ROOT / "benchmarks" / "floor"


def _cold_then_hot(kiln: Kiln, recipe: Path, tmp_path: Path) -> tuple[dict, dict]:
    def build(name: str) -> dict:
        return kiln.json("build", recipe, "--out", tmp_path / f"out-{name}", "--workdir",
                         tmp_path / name, "--cache-dir", tmp_path / "ccache",
                         "--no-wheel-cache", "--smoke")  # fmt: skip

    return build("cold"), build("hot")


@pytest.mark.compile
def test_floor_cython_builds_hot_with_one_hit_of_each_kind(kiln: Kiln, tmp_path: Path, installed) -> None:
    cold, hot = _cold_then_hot(kiln, FLOOR / "floor-cython.toml", tmp_path)
    assert (cold["cache"]["misses"], cold["cython"]["misses"]) == (1, 1)
    assert (hot["cache"]["hits"], hot["cache"]["misses"]) == (1, 0)
    assert (hot["cython"]["hits"], hot["cython"]["misses"]) == (1, 0)
    assert installed(hot["wheel"]["path"], "import floor_cython; print(floor_cython.answer())") == "42"


@pytest.mark.cuda
@pytest.mark.parametrize("generator", ["Ninja", "Unix Makefiles"])
def test_floor_kernels_builds_hot_with_its_two_tus_hits(
    kiln: Kiln, tmp_path: Path, installed, generator: str
) -> None:
    """Under CMake's Makefile generator the CUDA TU's includes are in an options file
    (``includes_CUDA.rsp``), spelled ``-isystem="DIR"``: kiln reads it in, respelled."""
    shutil.copytree(FLOOR / "floor-kernels", tmp_path / "floor-kernels")
    recipe = (FLOOR / "floor-kernels.toml").read_text().replace('env = { CMAKE_CUDA_ARCHITECTURES = "80" }',
                            f'env = {{ CMAKE_CUDA_ARCHITECTURES = "80", CMAKE_GENERATOR = "{generator}" }}')
    assert generator in recipe
    (tmp_path / "floor-kernels.toml").write_text(recipe)
    cold, hot = _cold_then_hot(kiln, tmp_path / "floor-kernels.toml", tmp_path)
    makefile = Path(hot["log"]).parent / "build" / "Makefile"
    assert makefile.is_file() == (generator == "Unix Makefiles")
    assert (cold["cache"]["misses"], cold["cache"]["hits"]) == (2, 0)
    assert (hot["cache"]["hits"], hot["cache"]["misses"]) == (2, 0)
    assert installed(hot["wheel"]["path"], "import floor_kernels; print(floor_kernels.answer())") == "42"
