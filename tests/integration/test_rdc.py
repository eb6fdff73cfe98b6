"""CMake CUDA with separable compilation (examples/demo-rdc), sharded: the device link
(nvcc -dlink -> cmake_device_link.o) of stubbed objects fails with nvlink's own
undefined-reference error in a shard, and the seat wrapper tolerates it like the host
link. Real nvcc, nvlink, ccache and CMake 3.25; no GPU (the answer is host-side)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln, copy_example, expected_checksum, recipe_for

pytestmark = [pytest.mark.compile, pytest.mark.cuda]

MODULE_PREFIX = "demo_rdc/_core."


def _verify(kiln: Kiln, wheel_a: str, wheel_b: str) -> dict[str, Any]:
    result = kiln("verify", wheel_a, wheel_b, "--json", check=False)
    verdict: dict[str, Any] = json.loads(result.stdout)
    assert (result.returncode == 0) is verdict["equivalent"], result.stderr
    return verdict


def test_rdc_sharded_with_device_links_equals_unsharded(kiln: Kiln, tmp_path: Path, installed) -> None:
    tree = copy_example("demo-rdc", tmp_path)
    recipe = recipe_for(tree, "demo-rdc", tmp_path)
    unsharded = kiln.json("build", recipe, "--out", tmp_path / "out-whole", "--workdir", tmp_path / "work",
                          "--cache-dir", tmp_path / "ccache-whole", "--no-wheel-cache")
    report = kiln.json("build", recipe, "--shards", "3", "--out", tmp_path / "out-3",
                       "--workdir", tmp_path / "work")
    link = report["link"]
    assert link["link"]["gate"]["passed"], link["link"]["gate"]
    assert link["cache"]["misses"] == 0
    assert link["cache"]["hits"] == link["cache"]["total"] == unsharded["cache"]["total"] > 0

    # Every shard ran CMake's device link through the wrapper; the shards whose slice
    # lacks device_math.cu saw nvlink's undefined reference and went on.
    shards = report["shards"]
    assert all(s["shard"]["gate"]["passed"] for s in shards)
    assert sum(s["shard"]["actions"].get("compile", 0) for s in shards) == 7
    (module,) = link["link"]["ledger"]["modules"]
    assert module["module"].startswith(MODULE_PREFIX)
    assert (module["tus"], module["compiled"], module["stubbed_everywhere"]) == (7, 7, [])
    assert module["device_links"] == 3 and module["device_links_tolerated"] >= 1

    answer = installed(link["wheel"]["path"], "import demo_rdc; print(demo_rdc.answer())")
    assert int(answer) == expected_checksum(tree)
    verdict = _verify(kiln, link["wheel"]["path"], unsharded["wheel"]["path"])
    assert verdict["equivalent"], verdict
    assert verdict["differing"] == [] and verdict["symbol_differences"] == {}

    # A genuinely different build (one device-and-host constant changed) still differs.
    stage = tree / "csrc" / "stages" / "gamma.cu"
    stage.write_text(stage.read_text().replace("#define RDC_WEIGHT 7", "#define RDC_WEIGHT 8"))
    changed = kiln.json("build", recipe, "--out", tmp_path / "out-changed", "--workdir", tmp_path / "work",
                        "--cache-dir", tmp_path / "ccache-whole", "--no-wheel-cache")
    verdict = _verify(kiln, link["wheel"]["path"], changed["wheel"]["path"])
    assert not verdict["equivalent"]
    assert [name.startswith(MODULE_PREFIX) for name in verdict["differing"]] == [True]
