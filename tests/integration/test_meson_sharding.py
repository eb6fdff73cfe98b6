"""meson-python sharded as a user would: a recipe with no config_settings, N=3.

examples/demo-meson has C and C++ TUs, kernel.c compiled twice (-DLEVEL=1/2), a
generated table.c, a Cython module and hidden-visibility extension modules, whose
stubbed links fail with GNU ld's "relocation ... against undefined hidden symbol".
"""

from __future__ import annotations

import json
import re
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RECIPES, Kiln, copy_example, expected_checksum, recipe_for
from wheelkiln.cells import shard_stem

pytestmark = pytest.mark.compile

CELL = "demo-meson-py3.11-linux-x86_64"
TU_KEYS = {
    "csrc/kernel.c",  # twice: -DLEVEL=1 and -DLEVEL=2, one key, one owner
    "csrc/dispatch.c", "csrc/module.c", "csrc/blend.cpp", "csrc/cy_helper.c",
    *(f"csrc/parts/part_{part}.c" for part in "abcdef"),
    "<build>/table.c",
    "<build>/_cy.cpython-311-x86_64-linux-gnu.so.p/_cy.pyx.c",
}  # fmt: skip


def _wrapper_records(job_dir: Path) -> list[dict[str, Any]]:
    text = (job_dir / "wrapper.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_meson_python_sharded_three_ways(kiln: Kiln, kiln_home: Path, tmp_path: Path, installed) -> None:
    assert "config_settings" not in tomllib.loads((RECIPES / "demo-meson.toml").read_text())["build"]
    tree = copy_example("demo-meson", tmp_path)
    recipe = recipe_for(tree, "demo-meson", tmp_path)
    reference = kiln.json("build", recipe, "--out", tmp_path / "ref", "--workdir", tmp_path / "refwork",
                          "--cache-dir", tmp_path / "refcache", "--no-wheel-cache", "--smoke", "--jobs", "2")
    assert reference["cache"]["misses"] == reference["cache"]["total"] == 14
    assert "ninja -j2\n" in Path(reference["log"]).read_text(), "--jobs reaches meson's ninja"

    report = kiln.json("build", recipe, "--shards", "3", "--jobs", "1", "--out", tmp_path / "out",
                       "--workdir", tmp_path / "work")
    link = report["link"]
    assert link["cache"]["misses"] == 0, link["cache"]
    assert link["cache"]["hits"] == link["cache"]["total"] == 14

    compiled: list[str] = []
    tolerated: list[str] = []
    deferred: list[str] = []
    for index, shard in enumerate(report["shards"]):
        assert shard["shard"]["gate"]["passed"], shard["shard"]["gate"]
        log = Path(shard["log"]).read_text()
        assert re.search(r"/ninja -j1 -k0\n", log), "shards keep going, at the planned job count"
        records = _wrapper_records(tmp_path / "work" / shard_stem(CELL, index, 3))
        compiled += [r["tu"] for r in records if r["action"] == "compile"]
        tolerated += [s for r in records if r["action"] == "link-unresolved" for s in r["unresolved"]]
        deferred += [Path(r["output"]).name for r in records if r["action"] == "link-deferred"]
    # Every TU compiled in exactly one shard, generated ones keyed relative to the stable
    # build directory (never a random .mesonpy-XXXXXXXX).
    assert len(compiled) == 14 and set(compiled) == TU_KEYS
    # ... and each shard proved it against meson's compile database
    assert sum(s["shard"]["gate"]["slice_compiles"] for s in report["shards"]) == 14
    # A module with a stubbed kernel is left to the link job (its link would fail with GNU
    # ld's relocation form): each shard stubs some kernel, so each defers a module link.
    assert not tolerated, tolerated
    assert len(deferred) >= 3 and all(name.endswith(".so") for name in deferred), deferred

    answer = installed(link["wheel"]["path"], "import demo_meson; print(demo_meson.checksum())")
    assert int(answer) == expected_checksum(tree)
    verdict = json.loads(kiln("verify", link["wheel"]["path"], reference["wheel"]["path"], "--json").stdout)
    assert verdict["equivalent"], verdict
    with zipfile.ZipFile(link["wheel"]["path"]) as wheel:
        config = wheel.read("demo_meson/__config__.py").decode()
    assert re.search(rf'C_COMPILER = "{re.escape(str(kiln_home))}/bin/[0-9a-f]{{20}}/cc"', config), config
    assert str(tmp_path / "work") not in config
