"""The link job explains a miss with ccache's view of the missed compile, and pays for
that view only when something missed: a link job with all hits writes no ccache log.
Real setuptools, gcc and ccache; two small extension modules, N = 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Kiln
from tests.projects import Project
from wheelkiln.shard.partition import shard_of, tu_key

pytestmark = pytest.mark.compile

CELL = "explain-demo-py3.11-linux-x86_64"
FLAGGED = ("src/flag1.c", "src/flag2.c")
"""The TUs of ``_flagged``, compiled with ``$EXPLAIN_DEMO_FLAG`` (``-DVALUE=5`` unless set):
both use ``VALUE``, so another value changes what they compile to."""


def _project() -> Project:
    setup = (
        "import os\n"
        "from setuptools import setup, Extension\n"
        "flag = os.environ.get('EXPLAIN_DEMO_FLAG', '-DVALUE=5')\n"
        "setup(ext_modules=[\n"
        "    Extension('explain_demo._core', ['src/core.c', 'src/part1.c']),\n"
        "    Extension('explain_demo._flagged', ['src/flag1.c', 'src/flag2.c'], extra_compile_args=[flag]),\n"
        "], packages=['explain_demo'], package_dir={'': 'src'})\n"
    )

    def module(name: str, body: str) -> str:
        return (
            "#include <Python.h>\n" + body
            + 'static PyMethodDef methods[] = {{"value", value, METH_NOARGS, 0}, {0}};\n'
            + f'static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "{name}", 0, -1, methods}};\n'
            + f"PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&module); }}\n"
        )

    files = {
        "pyproject.toml": (
            '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
            '[project]\nname = "explain-demo"\nversion = "0.1"\n'
        ),
        "setup.py": setup,
        "src/explain_demo/__init__.py": "",
        "src/core.c": module(
            "_core",
            "int part1(void);\nstatic PyObject *value(PyObject *m, PyObject *a) "
            "{ return PyLong_FromLong(part1()); }\n",
        ),
        "src/part1.c": "int part1(void) { return 7; }\n",
        "src/flag1.c": module(
            "_flagged",
            "int flag2(void);\nstatic PyObject *value(PyObject *m, PyObject *a) "
            "{ return PyLong_FromLong(flag2() + VALUE); }\n",
        ),
        "src/flag2.c": "int flag2(void) { return VALUE; }\n",
    }
    return Project("explain-demo", files)


def test_link_explains_a_miss_and_writes_no_log_without_one(kiln: Kiln, tmp_path: Path) -> None:
    tree, recipe = _project().generate(
        tmp_path, sharding={"count": 2, "partition": "seat"}, verify={"import": "explain_demo"}
    )
    work, shards = tmp_path / "work", tmp_path / "shards"
    for index in range(2):
        kiln("shard", recipe, "--index", str(index), "--count", "2", "--out", shards, "--workdir", work)

    # All hits: nothing to explain, so no ccache log anywhere in the job's directories.
    linked = kiln.json("link", recipe, "--archives", shards, "--out", tmp_path / "ok", "--workdir", work)
    assert linked["cache"]["misses"] == 0 and linked["cache"]["hits"] == 4
    assert linked["link"]["gate"]["passed"]
    assert not [p for p in work.rglob("*") if "ccache" in p.name and p.name.endswith(".log")]

    # The link job compiles _flagged with another flag: its two TUs miss, and each is
    # explained by the flag that differs from the shard that compiled it.
    result = kiln("link", recipe, "--archives", shards, "--out", tmp_path / "missed", "--workdir", work,
                  "--json", check=False, env={"EXPLAIN_DEMO_FLAG": "-DVALUE=6"})
    assert result.returncode == 5, result.stderr
    record = json.loads((tmp_path / "missed" / f"{CELL}.link.json").read_text())
    assert record["cache"]["misses"] == 2 and record["cache"]["hits"] == 2
    difference = "only in the shard: -DVALUE=5; only in the link job: -DVALUE=6"
    owners = {tu: shard_of(tu_key(tree / tu, tree), 2) for tu in FLAGGED}
    assert record["link"]["gate"]["missed"] == [
        {"tu": tu, "shard": owners[tu], "difference": difference} for tu in FLAGGED
    ]
    for tu in FLAGGED:
        assert f"missed {tu} (shard {owners[tu] + 1}): {difference}" in result.stderr
    assert ("2 cache miss(es): each compiled by a shard with a compile that differs from the "
            "link job's (what differs is said with each TU)") in result.stderr
    assert "misses again however often that shard runs" in result.stderr


def test_second_pass_runs_only_the_missed_ninja_compiles_again(tmp_path: Path) -> None:
    """Where the build ran ninja, the missed TU's compile runs again exactly as ninja ran
    it (its directory, its command), through ccache with the log on; the other TUs and
    the job's stats log are left alone."""
    from wheelkiln.cache.backend import find_tool
    from wheelkiln.run import run
    from wheelkiln.shard import explain

    ccache = find_tool("ccache", "")
    (tmp_path / "src").mkdir()
    for name in ("a", "b"):
        (tmp_path / "src" / f"{name}.c").write_text(f"int {name}(void) {{ return V; }}\n")
    build = tmp_path / "build"
    build.mkdir()
    (build / "build.ninja").write_text(
        f"rule cc\n  command = {ccache} gcc -DV=7 -MD -MF $out.d -c $in -o $out\n"
        "build a.o: cc ../src/a.c\nbuild b.o: cc ../src/b.c\n"
    )
    stats_log = tmp_path / "stats.log"
    env = {
        **os.environ,
        "CCACHE_DIR": str(tmp_path / "cache"),
        "CCACHE_CONFIGPATH": os.devnull,
        "CCACHE_BASEDIR": str(tmp_path),
        "CCACHE_STATSLOG": str(stats_log),
    }
    run(["ninja", "-C", str(build)], env=env)
    logged_by_build = stats_log.read_text()

    compiles = explain.missed_compiles(["../src/a.c"], "", tmp_path / "src", [build], env)
    assert [(c.cwd, c.argv[:2]) for c in compiles] == [(str(build), ("/bin/sh", "-c"))]
    commands = explain.log_compiles(compiles, env, tmp_path / "ccache.log")
    assert commands == {
        "../src/a.c": (
            [ccache, "gcc", "-DV=7", "-MD", "-MF", "a.o.d", "-c", "../src/a.c", "-o", "a.o"],
            str(build),
        )
    }
    assert stats_log.read_text() == logged_by_build


def test_a_prefix_map_of_each_job_s_own_directory_is_no_difference() -> None:
    """ccache hashes only that ``-fdebug-prefix-map`` is there, and every job maps its own
    directory: only the flags that change the key are named."""
    from wheelkiln.shard.link import _difference

    shard = ["gcc", "-DVALUE=5", "-c", "a.c", "-fdebug-prefix-map=/w/x-shard-0-of-2=."]
    link = ["gcc", "-DVALUE=6", "-c", "a.c", "-fdebug-prefix-map=/w/x-link=."]
    assert _difference(shard, link) == "only in the shard: -DVALUE=5; only in the link job: -DVALUE=6"
    assert _difference(shard, [*link[:1], "-DVALUE=5", *link[2:]]).startswith("same arguments")
    assert _difference(shard, [a for a in link if "prefix-map" not in a]) == (
        "only in the shard: -DVALUE=5 -fdebug-prefix-map=/w/x-shard-0-of-2=.; "
        "only in the link job: -DVALUE=6"
    )
