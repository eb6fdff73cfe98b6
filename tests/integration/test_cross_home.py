"""Builders whose KILN_HOMEs differ share compiler-cache entries.

A build environment lives under ``$KILN_HOME/envs/<key>``, and its path reaches the host
TUs' command lines (``pybind11.get_include()``, setuptools' ``<env>/include``) and the
dependency files the cache keeps. Two machines, users or Dask workers with different
homes used to miss each other's entries for every TU that includes from the environment
(``src/part*.cpp`` here, which include pybind11's headers). Builds now see the environment through ``<workdir>/.envs``,
which the cache writes relative to the compile.

Home A builds cold with its default workdir (inside the home); home B, at another depth,
builds with a ``--workdir`` outside its home, also at another depth. They share only the
cache directory. Each makes its own environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln
from tests.projects import pybind11_extension

pytestmark = pytest.mark.compile

PROJECT = pybind11_extension("xhome-demo", tus=3)
TUS = ["src/core.cpp", "src/part1.cpp", "src/part2.cpp"]


def build(home: Path, recipe: Path, out: Path, *args: str | Path) -> dict[str, Any]:
    kiln = Kiln(home, home.parent / f"{home.name}-state")
    record: dict[str, Any] = json.loads(
        kiln("build", recipe, "--out", out, "--no-wheel-cache", "--json", *args).stdout
    )
    return record


@pytest.mark.parametrize(
    "backend",
    # sccache: opt-in, the CI budget holds one of the two (each about 20 s of 2 cores)
    ["ccache", pytest.param("sccache", marks=pytest.mark.slow)],
)
def test_a_build_in_another_home_hits_every_tu(backend: str, tmp_path: Path) -> None:
    _, recipe = PROJECT.generate(tmp_path, cache={"backend": backend})
    cache = ("--cache-dir", tmp_path / "cache")
    home_a, home_b = tmp_path / "a", tmp_path / "bb" / "deeper" / "home"

    cold = build(home_a, recipe, tmp_path / "out-a", *cache)
    hot = build(home_b, recipe, tmp_path / "out-b", *cache,
                "--workdir", tmp_path / "elsewhere" / "work")  # fmt: skip

    # Two environments, one per home, of one key.
    assert Path(cold["build_env"]).parent == home_a / "envs"
    assert Path(hot["build_env"]).parent == home_b / "envs"
    assert Path(cold["build_env"]).name == Path(hot["build_env"]).name
    assert (cold["cache"]["misses"], cold["cache"]["hits"]) == (len(TUS), 0), cold["cache"]
    assert (hot["cache"]["hits"], hot["cache"]["misses"]) == (len(TUS), 0), hot["cache"]
    if backend == "ccache":  # sccache does not say which TU hit
        assert sorted(cold["cache"]["missed_tus"]) == TUS
    # The wheel built from the other home's entries works (unpacked: pip costs seconds).
    with zipfile.ZipFile(next((tmp_path / "out-b").glob("*.whl"))) as wheel:
        wheel.extractall(tmp_path / "site")
    answer = subprocess.run(
        [sys.executable, "-c", "import xhome_demo; print(xhome_demo.total())"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}, cwd=tmp_path,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert answer.strip() == str(PROJECT.expected)
