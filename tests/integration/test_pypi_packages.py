"""Real packages from PyPI, sharded 3 ways: pycryptodome (setuptools, C) and awkward-cpp
(scikit-build-core + CMake, C++), fetched by the recipes in recipes/.

Each test builds the package twice: unsharded with a private, empty cache (the
reference), and with ``--shards 3``. What "every cacheable TU" means is read from the
builds themselves, not hard-coded:

* The package's own TUs are the TU keys the shards compiled for real (``compile``
  records in their wrapper logs). Each must be compiled by exactly one shard, and
  together they must be exactly the package's TUs in the reference build.
* Build-system probes are compiled by *every* shard and by the link job. Those a probe
  marker names (CMake's compiler-ABI and try_compile checks for awkward-cpp) run past
  the cache; the others go through it: pycryptodome's
  ``compiler_opt.test_compilation``, which writes ``build/test1.c`` again for each
  feature and compiles it (the probes that fail on purpose, such as ``intrin.h`` on
  Linux, are uncacheable and counted by neither ccache nor this test).
* So the link job's total must be the package's TUs plus the cacheable probe compiles of
  one shard, and it must equal the number of distinct compiles of the reference build:
  its misses, its cache being empty. Its total can be larger: a build that makes its
  build environment asks setuptools' requirements hook in the build's own process, and
  pycryptodome's setup.py runs its probes each time it is run, so the same probes compile
  again and hit. The link job runs the same full build, and its misses must be 0.
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RECIPES, Kiln
from wheelkiln.cells import shard_stem
from wheelkiln.shard.wrapper_log import read_wrapper_log

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.compile]


@dataclass(frozen=True)
class Target:
    recipe: str
    cell: str
    package_tus: str
    """Prefix of the package's own TU keys (relative to the package root)."""
    package_tu_count: int
    """Counted from the sdist: pycryptodome's setup.py lists 57 C sources; awkward-cpp has
    146 src/cpu-kernels/*.cpp, 19 src/libawkward/**/*.cpp and 4 src/python/*.cpp."""


TARGETS = {
    "pycryptodome": Target("pycryptodome", "pycryptodome-py3.11-linux-x86_64", "src/", 57),
    "awkward-cpp": Target("awkward-cpp", "awkward-cpp-py3.11-linux-x86_64", "src/", 169),
}


def _smoke(recipe: Path) -> str:
    code: str = tomllib.loads(recipe.read_text())["verify"]["smoke"]
    return code


def _shard_logs(workdir: Path, cell: str) -> list[list[dict[str, Any]]]:
    return [
        read_wrapper_log(workdir / shard_stem(cell, index, 3) / "wrapper.jsonl")
        for index in range(3)
    ]


def _cacheable_probe_compiles(records: list[dict[str, Any]], target: Target) -> int:
    """Probe compiles in one shard that ccache can store: those that succeeded and that no
    probe marker names (those, "probe" records, run past the cache in every job)."""
    return sum(
        1
        for record in records
        if record.get("exit") == 0
        and "-c" in record.get("argv", [])
        and record["action"] in ("compile", "link-probe-rebuild")
        and not str(record.get("tu") or "").startswith(target.package_tus)
    )


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_pypi_package_shards_link_with_zero_misses_and_equivalent_wheel(
    kiln: Kiln, tmp_path: Path, installed: Any, name: str
) -> None:
    target = TARGETS[name]
    recipe = RECIPES / f"{target.recipe}.toml"
    reference = kiln.json("build", recipe, "--no-wheel-cache", "--out", tmp_path / "ref",
                          "--workdir", tmp_path / "refwork", "--cache-dir", tmp_path / "refcache")  # fmt: skip
    assert reference["cache"]["hits"] + reference["cache"]["misses"] == reference["cache"]["total"]

    workdir = tmp_path / "work"
    report = kiln.json("build", recipe, "--shards", "3", "--out", tmp_path / "out",
                       "--workdir", workdir)  # fmt: skip
    assert all(shard["shard"]["gate"]["passed"] for shard in report["shards"])
    link = report["link"]
    assert link["exit_code"] == 0

    # Every package TU compiled for real in exactly one shard.
    logs = _shard_logs(workdir, target.cell)
    compiled = Counter(
        str(record["tu"])
        for records in logs
        for record in records
        if record["action"] == "compile" and str(record.get("tu")).startswith(target.package_tus)
    )
    assert len(compiled) == target.package_tu_count
    assert set(compiled.values()) == {1}, [tu for tu, n in compiled.items() if n > 1]

    # Every shard ran the same probes; the link job hit all of them and every package TU.
    probes = {_cacheable_probe_compiles(records, target) for records in logs}
    assert len(probes) == 1, probes
    cacheable = target.package_tu_count + probes.pop()
    assert link["cache"]["misses"] == 0, link["link"]["gate"]["missed"]
    assert link["cache"]["hits"] == link["cache"]["total"] == cacheable
    assert link["cache"]["total"] == reference["cache"]["misses"]

    verdict = json.loads(
        kiln("verify", link["wheel"]["path"], reference["wheel"]["path"], "--json").stdout
    )
    assert verdict["equivalent"], verdict
    assert not verdict["symbol_differences"] and not verdict["differing"]
    assert installed(link["wheel"]["path"], _smoke(recipe)) == "ok"
