"""kiln bench with real builds: nested scenarios recorded, and a leaky TU caught by warm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Kiln, copy_example, recipe_for

pytestmark = pytest.mark.compile


def test_all_scenarios_three_times_on_demo_cpp(kiln: Kiln, tmp_path: Path) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    store = tmp_path / "results.jsonl"
    kiln("bench", recipe, "--scenario", "all", "--repeat", "3", "--store", store,
         "--workdir", tmp_path / "work", "--cache-dir", tmp_path / "bench-cache")
    records = [json.loads(line) for line in store.read_text().splitlines()]
    assert len(records) == 9
    assert sorted(r["scenario"] for r in records) == ["cold"] * 3 + ["hot"] * 3 + ["warm"] * 3
    assert all(r["status"] == "ok" for r in records)
    for record in records:
        if record["scenario"] == "cold":
            assert record["cache"]["hits"] == 0 and record["cache"]["misses"] >= 24
        else:
            assert record["cache"]["misses"] == 0 and record["cache"]["hits"] >= 24
    assert {r["hot_kind"] for r in records if r["scenario"] == "hot"} == {"all-hits"}
    report = json.loads(kiln("bench", "report", "--format", "json", "--store", store).stdout)
    groups = {g["scenario"]: g for g in report["groups"]}
    assert {name: groups[name]["n"] for name in ("cold", "warm", "hot")} == {"cold": 3, "warm": 3, "hot": 3}
    markdown = kiln("bench", "report", "--store", store).stdout
    rows = [line for line in markdown.splitlines() if line.startswith("| demo-cpp-py3.11")]
    assert [row.split(" | ")[5:7] for row in rows[:3]] == [["cold", "3"], ["warm", "3"], ["hot", "3"]]
    assert any(" | warm/hot | " in row for row in rows)


LEAKY = {
    "pyproject.toml": """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"
[project]
name = "leaky"
version = "0.1"
""",
    # One TU is compiled with the commit's timestamp on its command line, as some
    # packages stamp their version: a per-commit value in a cache key.
    "setup.py": """
import os
from setuptools import setup, Extension
stamp = os.environ.get("SOURCE_DATE_EPOCH", "0")
setup(ext_modules=[
    Extension("leaky._clean", ["src/clean.c"]),
    Extension("leaky._stamped", ["src/stamped.c"], extra_compile_args=[f"-DBUILD_STAMP={stamp}"]),
], packages=["leaky"], package_dir={"": "src"})
""",
    "src/leaky/__init__.py": "",
    "src/clean.c": """
#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_clean", 0, -1, 0};
PyMODINIT_FUNC PyInit__clean(void) { return PyModule_Create(&m); }
""",
    "src/stamped.c": """
#include <Python.h>
static struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "_stamped", 0, -1, 0};
PyMODINIT_FUNC PyInit__stamped(void) {
    PyObject *mod = PyModule_Create(&m);
    PyModule_AddIntConstant(mod, "stamp", BUILD_STAMP);
    return mod;
}
""",
}


def test_leaky_tu_fails_warm_and_is_named(kiln: Kiln, tmp_path: Path) -> None:
    tree = tmp_path / "leaky"
    for name, text in LEAKY.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    recipe = tmp_path / "leaky.toml"
    recipe.write_text(f'name = "leaky"\n[source]\npath = "{tree}"\n')
    store = tmp_path / "results.jsonl"
    result = kiln("bench", recipe, "--scenario", "all", "--store", store, "--workdir", tmp_path / "work",
                  "--cache-dir", tmp_path / "bench-cache", check=False)
    assert result.returncode != 0
    assert "src/stamped.c" in result.stderr
    warm = [json.loads(line) for line in store.read_text().splitlines() if '"warm"' in line]
    assert len(warm) == 1 and warm[0]["status"] == "failed"
    assert warm[0]["cache"]["misses"] == 1
    assert any("stamped.c" in tu for tu in warm[0]["cache"]["missed_tus"])
    assert not any("clean.c" in tu for tu in warm[0]["cache"]["missed_tus"])
