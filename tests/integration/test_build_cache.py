"""kiln build with a real compiler cache: wheels that work, all-hit rebuilds, cache
sharing across directories, no stale objects, and compiler changes that miss."""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln, copy_example, expected_checksum, recipe_for

pytestmark = pytest.mark.compile


def build(
    kiln: Kiln,
    recipe: Path,
    tmp_path: Path,
    *extra: str,
    workdir: str = "work",
    env: dict[str, str] | None = None,
) -> dict:
    return kiln.json(
        "build",
        recipe,
        "--out",
        tmp_path / "out",
        "--workdir",
        tmp_path / workdir,
        "--cache-dir",
        tmp_path / "ccache",
        "--no-wheel-cache",
        *extra,
        env=env,
    )


def test_demo_cpp_wheel_works_and_rebuild_is_all_hits(
    kiln: Kiln, tmp_path: Path, installed
) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    cold = build(kiln, recipe, tmp_path)
    assert cold["cache"]["misses"] == cold["cache"]["total"] >= 17
    assert cold["cache"]["hits"] == 0
    answer = installed(cold["wheel"]["path"], "import demo_cpp; print(demo_cpp.checksum())")
    assert int(answer) == expected_checksum(tree)
    # pybind11's headers come from the build requirement: the stable build environment
    # keeps their path, so the second build is all hits.
    hot = build(kiln, recipe, tmp_path)
    assert hot["cache"]["hits"] == cold["cache"]["total"]
    assert hot["cache"]["misses"] == 0
    assert hot["build_env"] == cold["build_env"]
    assert hot["extensions"] == cold["extensions"] and len(hot["extensions"]) >= 2


def test_two_absolute_directories_share_entries(kiln: Kiln, tmp_path: Path) -> None:
    first = copy_example("demo-cpp", tmp_path / "a")
    second = copy_example("demo-cpp", tmp_path / "b" / "deeper")
    cold = build(kiln, recipe_for(first, "demo-cpp", tmp_path / "a"), tmp_path, workdir="w1")
    hot = build(
        kiln, recipe_for(second, "demo-cpp", tmp_path / "b"), tmp_path, workdir="elsewhere/w2"
    )
    assert cold["cache"]["misses"] > 0
    assert hot["cache"]["misses"] == 0
    assert hot["cache"]["hits"] == cold["cache"]["total"]


def _host_only_constant_edit(tree: Path, suffix: str) -> Path:
    """Change one number inside a host-only (#ifndef __CUDA_ARCH__) block of one TU."""
    for path in sorted((tree / "csrc" / "generated").rglob(f"*{suffix}")):
        text = path.read_text()
        match = re.search(r"#ifndef __CUDA_ARCH__\n(.*?)#endif", text, re.S)
        if match and re.search(r"HOST_SALT\s+\S+", match.group(1)):
            block = match.group(1)
            edited = re.sub(
                r"(HOST_SALT\s+)(0x[0-9a-fA-F]+|\d+)",
                lambda m: m.group(1) + str(int(m.group(2), 0) + 1),
                block,
                count=1,
            )
            path.write_text(text.replace(block, edited))
            return path
    raise AssertionError(f"no TU with a host-only HOST_SALT block under {tree}")


@pytest.mark.cuda
def test_cmake_nvcc_host_only_edit_is_not_a_stale_hit(
    kiln: Kiln, tmp_path: Path, installed, kernels_cold: dict[str, Any]
) -> None:
    # The session's cold build, continued in copies of its tree and cache: another
    # directory, so the rebuild's hits also show that keys do not name the tree. In the
    # cold build's KILN_HOME: under xdist that may be another worker's, and the build
    # environment's path (pybind11's -isystem) is part of the host TUs' keys.
    kiln = Kiln(kernels_cold["home"], tmp_path / "state")
    tree = tmp_path / "demo-kernels"
    shutil.copytree(kernels_cold["tree"], tree)
    shutil.copytree(kernels_cold["cache"], tmp_path / "ccache")
    recipe = recipe_for(tree, "demo-kernels", tmp_path)
    cold = kernels_cold["record"]
    assert cold["cache"]["misses"] == cold["cache"]["total"] and cold["cache"]["hits"] == 0
    code = "import demo_kernels; print(demo_kernels.checksum())"
    old_answer = int(installed(cold["wheel"]["path"], code))
    assert old_answer == expected_checksum(tree)
    hot = build(kiln, recipe, tmp_path)
    assert hot["cache"]["misses"] == 0 and hot["cache"]["hits"] == cold["cache"]["total"] >= 26
    assert hot["extensions"] == cold["extensions"]
    edited = _host_only_constant_edit(tree, ".cu")
    after = build(kiln, recipe, tmp_path)
    assert after["cache"]["misses"] == 1, after["cache"]
    assert any(edited.name in tu for tu in after["cache"]["missed_tus"])
    new_answer = int(installed(after["wheel"]["path"], code))
    assert new_answer == expected_checksum(tree)
    assert new_answer != old_answer


SETUPTOOLS_NVCC = {
    "pyproject.toml": """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"
[project]
name = "nvccpkg"
version = "0.1"
""",
    "setup.py": '''
import os, subprocess
from setuptools import setup, Extension
from setuptools.command.build_ext import build_ext

class BuildWithNvcc(build_ext):
    """Compiles .cu sources with `nvcc` from PATH, as many CUDA setup.py files do:
    no depfile is asked for."""
    def build_extension(self, ext):
        cu = [s for s in ext.sources if s.endswith(".cu")]
        ext.sources = [s for s in ext.sources if not s.endswith(".cu")]
        objects = []
        for source in cu:
            out = os.path.join(self.build_temp, os.path.splitext(source)[0] + ".o")
            os.makedirs(os.path.dirname(out), exist_ok=True)
            subprocess.check_call([os.environ.get("NVCC", "nvcc"), "-c", source, "-o", out,
                                   "-arch=sm_80", "-Xcompiler", "-fPIC", "-O2"])
            objects.append(out)
        ext.extra_objects = objects
        ext.libraries = ["cudart", "stdc++"]
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        ext.library_dirs = [os.path.join(cuda, "lib64")]
        ext.runtime_library_dirs = [os.path.join(cuda, "lib64")]
        super().build_extension(ext)

setup(ext_modules=[Extension("nvccpkg", ["host.c", "k.cu"])], cmdclass={"build_ext": BuildWithNvcc})
''',
    "k.cu": """
__global__ void kernel(int *out) { *out = 7; }
#ifndef __CUDA_ARCH__
#define HOST_SALT 111
extern "C" long host_value(void) {
    void (*k)(int *) = kernel;
    return HOST_SALT + (k != 0);
}
#endif
""",
    "host.c": """
#include <Python.h>
long host_value(void);
static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(host_value()); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "nvccpkg", 0, -1, methods};
PyMODINIT_FUNC PyInit_nvccpkg(void) { return PyModule_Create(&module); }
""",
}


@pytest.mark.cuda
def test_setuptools_nvcc_host_only_edit_is_not_a_stale_hit(
    kiln: Kiln, tmp_path: Path, installed
) -> None:
    tree = tmp_path / "nvccpkg"
    tree.mkdir()
    for name, text in SETUPTOOLS_NVCC.items():
        (tree / name).write_text(text)
    recipe = tmp_path / "nvccpkg.toml"
    recipe.write_text(f'name = "nvccpkg"\n[source]\npath = "{tree}"\n')
    cold = build(kiln, recipe, tmp_path)
    code = "import nvccpkg; print(nvccpkg.value())"
    assert installed(cold["wheel"]["path"], code) == "112"
    hot = build(kiln, recipe, tmp_path)
    assert hot["cache"]["misses"] == 0 and hot["cache"]["hits"] == cold["cache"]["total"] >= 2
    (tree / "k.cu").write_text(SETUPTOOLS_NVCC["k.cu"].replace("111", "222"))
    edited = build(kiln, recipe, tmp_path)
    assert edited["cache"]["misses"] == 1
    assert any(tu.endswith("k.cu") for tu in edited["cache"]["missed_tus"])
    assert installed(edited["wheel"]["path"], code) == "223"


def shim_compiler(path: Path, real: str, before: str) -> Path:
    """A compiler at *path* that runs the shell line *before*, then *real* with its
    arguments."""
    path.write_text(f'#!/bin/sh\n{before}\nexec {shutil.which(real)} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_changed_compiler_version_misses(kiln: Kiln, tmp_path: Path) -> None:
    """A compiler whose --version output changes (same path, same mtime) must miss."""
    version_file = tmp_path / "version.txt"
    version_file.write_text("shimcc 1.0\n")
    (tmp_path / "bin").mkdir()
    for name in ("gcc", "g++"):
        shim_compiler(tmp_path / "bin" / name, name,
                      f'if [ "$1" = "--version" ]; then cat {version_file}; exit 0; fi')  # fmt: skip
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    env = {
        "KILN_HOST_CC": str(tmp_path / "bin" / "gcc"),
        "KILN_HOST_CXX": str(tmp_path / "bin" / "g++"),
    }
    first = build(kiln, recipe, tmp_path, workdir="w", env=env)
    same = build(kiln, recipe, tmp_path, workdir="w", env=env)
    assert same["cache"]["misses"] == 0 and same["cache"]["hits"] == first["cache"]["total"]
    version_file.write_text("shimcc 2.0\n")
    changed = build(kiln, recipe, tmp_path, workdir="w", env=env)
    assert changed["cache"]["hits"] == 0
    assert changed["cache"]["misses"] == first["cache"]["total"]


def test_the_recipes_cc_is_the_compiler_behind_the_fronts(
    kiln: Kiln, tmp_path: Path, installed
) -> None:
    """A recipe's build.env CC and CXX reach setuptools through kiln's fronts: every TU
    compiles with them, through the cache. The fronts used to put gcc there instead,
    saying nothing."""
    log = tmp_path / "compiles.log"
    (tmp_path / "bin").mkdir()
    for name, real in (("my-cc", "gcc"), ("my-c++", "g++")):
        shim_compiler(tmp_path / "bin" / name, real,
                      f'case " $* " in *" -c "*) echo "{name} $*" >> {log};; esac')  # fmt: skip
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(
        tree, "demo-cpp", tmp_path,
        **{"env = {}": f'env = {{ CC = "{tmp_path}/bin/my-cc", CXX = "{tmp_path}/bin/my-c++" }}'},
    )  # fmt: skip
    cold = build(kiln, recipe, tmp_path)
    compiled = log.read_text().splitlines()
    assert len(compiled) == cold["cache"]["total"] >= 24
    assert all(line.startswith("my-c++ ") for line in compiled if ".cpp" in line)
    answer = installed(cold["wheel"]["path"], "import demo_cpp; print(demo_cpp.checksum())")
    assert int(answer) == expected_checksum(tree)
    hot = build(kiln, recipe, tmp_path)
    assert hot["cache"]["misses"] == 0 and hot["cache"]["hits"] == cold["cache"]["total"]
    assert len(log.read_text().splitlines()) == len(compiled)  # hits run no compiler
    # Its version is one of the build's inputs (the wheel cache's digest), beside gcc's.
    assert cold["tool_versions"]["cc"].startswith(f"{tmp_path}/bin/my-cc: gcc (")
    assert cold["tool_versions"]["c++"].startswith(f"{tmp_path}/bin/my-c++: g++ (")


def test_sccache_backend_rebuild_is_all_hits(kiln: Kiln, tmp_path: Path, installed) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    recipe = recipe_for(tree, "demo-cpp", tmp_path)
    args = ("--cache", "sccache", "--cache-dir", tmp_path / "sccache")
    cold = kiln.json(
        "build",
        recipe,
        "--out",
        tmp_path / "out",
        "--workdir",
        tmp_path / "w1",
        "--no-wheel-cache",
        *args,
    )
    hot = kiln.json(
        "build",
        recipe,
        "--out",
        tmp_path / "out",
        "--workdir",
        tmp_path / "w2",
        "--no-wheel-cache",
        *args,
    )
    assert cold["cache"]["backend"] == "sccache"
    assert cold["cache"]["misses"] >= 24 and cold["cache"]["hits"] == 0
    assert hot["cache"]["hits"] == cold["cache"]["misses"] and hot["cache"]["misses"] == 0
    assert "sccache" in hot["tool_versions"]
    answer = installed(hot["wheel"]["path"], "import demo_cpp; print(demo_cpp.checksum())")
    assert int(answer) == expected_checksum(tree)


def test_smoke_runs_the_recipe_code_against_the_wheel(kiln: Kiln, tmp_path: Path) -> None:
    tree = copy_example("demo-cpp", tmp_path)
    good = recipe_for(tree, "demo-cpp", tmp_path)
    record = build(kiln, good, tmp_path, "--smoke")
    assert record["exit_code"] == 0
    (tmp_path / "bad").mkdir()
    bad = recipe_for(tree, "demo-cpp", tmp_path / "bad", **{"kernel_count() == 24": "kernel_count() == 25"})
    result = kiln("build", bad, "--out", tmp_path / "out2", "--workdir", tmp_path / "work",
                  "--cache-dir", tmp_path / "ccache", "--no-wheel-cache", "--smoke", check=False)
    assert result.returncode == 4
    assert "The smoke test of demo_cpp-0.1.0-cp311-cp311-linux_x86_64.whl failed" in result.stderr
    assert "AssertionError" in result.stderr
    assert not (tmp_path / "out2").exists(), "a wheel that fails its smoke test is not published"


@pytest.mark.cuda
def test_a_hot_cmake_build_is_seeded_with_the_kept_identification_and_checks(
    kiln: Kiln, kernels_cold: dict[str, Any], tmp_path: Path
) -> None:
    """After two builds of a CMake package on one system, the next fresh configure gets
    CMake's kept compiler identification and the project's kept check results, runs
    neither, and its record says from where.

    The shared cold build may have run in another xdist worker's KILN_HOME, so this test
    makes its own two: the first keeps the identification, the second its checks, under
    a key read before its configure. Its tree's CMakeLists.txt ends in a comment of its
    own, so the identification's key is its own too: under xdist, another worker's
    builds of the shared tree in this KILN_HOME (`kernels_cold["home"]`) keep theirs."""
    cache = tmp_path / "ccache"
    shutil.copytree(kernels_cold["cache"], cache)
    tree = tmp_path / "demo-kernels"
    shutil.copytree(kernels_cold["tree"], tree)
    with (tree / "CMakeLists.txt").open("a") as lists:
        lists.write(f"# {uuid.uuid4()}: a key of this test's own\n")
    recipe = recipe_for(tree, "demo-kernels", tmp_path)

    def build(name: str) -> dict[str, Any]:
        return kiln.json("build", recipe, "--out", tmp_path / f"out-{name}",
                         "--workdir", tmp_path / name, "--cache-dir", cache, "--no-wheel-cache")

    assert build("first")["cmake"]["identification"] is None
    assert build("second")["cmake"]["identification"] is not None
    hot = build("third")
    assert hot["cache"]["misses"] == 0 and hot["cache"]["hits"] == hot["cache"]["total"] > 0
    seeded = hot["cmake"]
    assert seeded["identification"] is not None and seeded["checks"] is not None
    # pybind11's HAS_FLTO_AUTO and FindThreads' CMAKE_HAVE_LIBC_PTHREAD, seeded: not performed.
    assert seeded["checks_seeded"] == 2
    kept = (Path(seeded["checks"]) / "cache.txt").read_text().splitlines()
    assert sorted(line.split(":")[0] for line in kept) == ["CMAKE_HAVE_LIBC_PTHREAD", "HAS_FLTO_AUTO"]
    log = Path(hot["log"]).read_text()
    assert "Performing Test" not in log and "Detecting CXX compiler ABI" not in log
    assert "-- Configuring done" in log

    # Unused for two days (as its mark says): `kiln answers prune` removes it, and the
    # next build identifies the compilers again and keeps the identification again.
    identification = Path(seeded["identification"])
    mark = identification.with_name(f"{identification.name}.inuse")
    two_days_ago = time.time() - 2 * 86400
    os.utime(mark, (two_days_ago, two_days_ago))
    pruned = kiln.json("answers", "prune", "--unused-for", "1d")
    outcome = {Path(e["path"]): e["outcome"] for e in pruned["entries"]}
    assert outcome[identification] == "removed" and not identification.exists()
    again = build("fourth")
    assert again["cmake"]["identification"] is None and again["cache"]["misses"] == 0
    assert "Detecting CXX compiler ABI" in Path(again["log"]).read_text()
    assert (identification / "complete").is_file(), "kept again"
    listed = {Path(e["path"]): e for e in kiln.json("answers", "list")}
    assert time.time() - listed[identification]["last_used"] < 600
