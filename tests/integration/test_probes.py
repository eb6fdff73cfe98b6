"""Build-system probes stay out of the miss count; real TUs stay in it.

A probe compiles a throw-away source in a random directory (CMake's
``CMakeScratch/TryCompile-XXXX``, autoconf's ``conftest``), or one that changes from run
to run, so its cache entry can never be hit again. Counted as a miss, it made "zero
misses" unreachable for a link job whose every real TU hit. kiln runs probes past the
cache, in shard jobs (the seat wrapper) and in link jobs and plain builds (the compiler
fronts of :mod:`wheelkiln.builder.toolchain`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln
from wheelkiln.builder.job_env import inherited_environment
from wheelkiln.builder.toolchain import Launch, toolchain_environment
from wheelkiln.cache.backend import CacheConfig
from wheelkiln.cache.ccache import Ccache

pytestmark = pytest.mark.compile

CMAKE_PROJECT = """
cmake_minimum_required(VERSION 3.20)
project(probes C)
include(CheckCSourceCompiles)
# A probe whose source differs on every configure, like a try_compile in a fresh
# CMakeScratch/TryCompile-XXXX directory: its key is new every time.
string(RANDOM LENGTH 12 ALPHABET 0123456789 salt)
check_c_source_compiles("int main(void) { unsigned long long s = 1${salt}ULL; return s == 0; }"
                        PROBE_OK)
if(NOT PROBE_OK)
  message(FATAL_ERROR "the probe did not compile")
endif()
add_library(real STATIC real.c)
"""


def _cmake_build(root: Path, build_dir: str, cache: Ccache) -> dict[str, int]:
    env = {**inherited_environment(os.environ), **cache.environment()}
    env.update(toolchain_environment(Launch(cache.executable()), "cmake", root / build_dir / "bin"))
    env.pop("KILN_PATH_PREPEND", None)
    cache.zero_stats()
    for command in (
        ["cmake", "-G", "Ninja", "-S", str(root / "src"), "-B", str(root / build_dir)],
        ["cmake", "--build", str(root / build_dir)],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    return cache.stats().as_dict()


@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja is not installed")
def test_cmake_try_compile_probes_are_not_misses(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    (tmp_path / "src" / "real.c").write_text("int real(void) { return 42; }\n")
    cache = Ccache(CacheConfig(cache_dir=tmp_path / "cache", base_dir=tmp_path))
    cold = _cmake_build(tmp_path, "b1", cache)
    assert (cold["misses"], cold["hits"]) == (1, 0)  # real.c only: no probe was cached
    hot = _cmake_build(tmp_path, "b2", cache)
    assert (hot["misses"], hot["hits"]) == (0, 1)
    # The gate still sees real TUs: an edited one misses.
    (tmp_path / "src" / "real.c").write_text("int real(void) { return 43; }\n")
    edited = _cmake_build(tmp_path, "b3", cache)
    assert (edited["misses"], edited["hits"]) == (1, 0)


SETUP_PY = '''
import os, random, subprocess, tempfile
from setuptools import setup, Extension

# A toolchain probe like autoconf's: a source that differs on every run, in a fresh
# directory, compiled with $CC (kiln's compiler front).
probe_dir = tempfile.mkdtemp(prefix="conftest-", dir=os.path.abspath("."))
with open(os.path.join(probe_dir, "conftest.c"), "w") as handle:
    handle.write("int probe_%d(void) { return 1; }\\n" % random.randrange(1 << 30))
subprocess.check_call([os.environ.get("CC", "cc"), "-c", "conftest.c", "-o", "conftest.o"],
                      cwd=probe_dir)
# psutil's: the same source every run, but under a random name in the temp directory.
with tempfile.NamedTemporaryFile(suffix=".c", delete=False, mode="w") as handle:
    handle.write("#include <limits.h>\\nint probe(void) { return INT_MAX > 0; }\\n")
subprocess.check_call([os.environ.get("CC", "cc"), "-c", handle.name,
                       "-o", os.path.join(tempfile.mkdtemp(), "probe.o")])
# ... and one that fails on purpose: its answer is no, and the build goes on.
with tempfile.NamedTemporaryFile(suffix=".c", delete=False, mode="w") as handle:
    handle.write("#include <kiln_no_such_header.h>\\n")
absent = subprocess.call([os.environ.get("CC", "cc"), "-c", handle.name,
                          "-o", os.path.join(tempfile.mkdtemp(), "absent.o")])
assert absent != 0

setup(name="probed", version="0.1", ext_modules=[Extension("probed", ["probed.c"])])
'''

MODULE = """
#include <Python.h>
static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(VALUE); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "probed", 0, -1, methods};
PyMODINIT_FUNC PyInit_probed(void) { return PyModule_Create(&module); }
"""


def _package(root: Path, value: int) -> Path:
    tree = root / "probed"
    tree.mkdir(exist_ok=True)
    (tree / "setup.py").write_text(SETUP_PY)
    (tree / "probed.c").write_text(f"#define VALUE {value}\n" + MODULE)
    return tree


def test_probes_stay_out_of_a_sharded_link_jobs_misses(
    kiln: Kiln, tmp_path: Path, installed: Any
) -> None:
    tree = _package(tmp_path, 7)
    recipe = tmp_path / "probed.toml"
    recipe.write_text(f'name = "probed"\n[source]\npath = "{tree}"\n[sharding]\ncount = 2\n')
    report = kiln.json("build", recipe, "--shards", "2", "--out", tmp_path / "out",
                       "--workdir", tmp_path / "work")  # fmt: skip
    link = report["link"]
    # Each job's conftest probe had a new source: cached, the link job's would have been
    # a miss. The temp-file probe is named the same in every job's own temp directory
    # (the build's TMPDIR): every shard compiles it through the cache, and the link job hits.
    assert link["link"]["gate"]["passed"], link["link"]["gate"]
    assert (link["cache"]["misses"], link["cache"]["hits"]) == (0, 2)
    assert installed(link["wheel"]["path"], "import probed; print(probed.value())") == "7"
    # every shard ran the probe, for real and past the cache
    assert all(s["shard"]["actions"].get("probe", 0) >= 1 for s in report["shards"])
