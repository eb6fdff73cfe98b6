"""The compile ledger in the link gate, with real shard jobs: a shard that stubs every
TU (a wrong index mapping) leaves a whole extension module compiled by no shard, and
the link gate fails naming that module. Real gcc, ccache, setuptools (demo-cpp)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Kiln, copy_example, recipe_for

pytestmark = pytest.mark.compile

EXTRA = "demo_cpp/_extra.cpython-311-x86_64-linux-gnu.so"


def _tus(tree: Path, group: str) -> list[str]:
    sources = [*(tree / "csrc" / group).glob("*.cpp"), *(tree / "csrc" / "generated" / group).glob("*.cpp")]
    return sorted(path.relative_to(tree).as_posix() for path in sources)


def test_a_shard_that_stubs_everything_fails_the_link_gate_naming_the_module(kiln: Kiln, tmp_path: Path) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    core, extra = _tus(tree, "core"), _tus(tree, "extra")
    assert len(extra) == 8
    # The plan: shard 0 owns the _core module, shard 1 the _extra module.
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({**dict.fromkeys(core, 0), **dict.fromkeys(extra, 1)}))
    # Shard 1 gets a wrong mapping through the environment: every TU belongs to shard 0,
    # so it stubs all of them (and still passes its own gate: its links fail as expected).
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(dict.fromkeys(core + extra, 0)))
    common = ["--count", "2", "--partition", "seat", "--out", tmp_path / "shards", "--workdir", tmp_path / "work"]
    first = kiln.json("shard", recipe, "--index", "0", "--partition-map", plan, *common)
    second = kiln.json("shard", recipe, "--index", "1", *common, env={"KILN_PARTITION_MAP": str(wrong)})
    assert first["shard"]["actions"].get("compile") == len(core)
    assert second["shard"]["actions"].get("compile", 0) == 0
    assert second["shard"]["actions"]["stub"] == len(core) + len(extra)

    result = kiln("link", recipe, "--archives", tmp_path / "shards", "--out", tmp_path / "out",
                  "--workdir", tmp_path / "work", "--json", check=False)
    assert result.returncode != 0
    record = json.loads(result.stdout)
    ledger = record["link"]["ledger"]
    assert ledger["problems"] == [
        f"{EXTRA}: no shard compiled any of its 8 TU(s) (csrc/extra/dispatch.cpp, "
        "csrc/extra/module.cpp, csrc/generated/extra/extra_t00.cpp, ...); every shard stubbed "
        "the whole module (a shard index or partition map that sends its TUs to no shard?)"
    ]
    modules = {entry["module"]: entry for entry in ledger["modules"]}
    assert modules[EXTRA]["stubbed_everywhere"] == extra
    core_module = "demo_cpp/_core.cpython-311-x86_64-linux-gnu.so"
    assert (modules[core_module]["tus"], modules[core_module]["compiled"]) == (len(core), len(core))
    assert ledger["problems"][0] in record["link"]["gate"]["problems"]
    assert f"- {EXTRA}: no shard compiled any of its 8 TU(s)" in result.stderr.replace("\n  ", " ")
