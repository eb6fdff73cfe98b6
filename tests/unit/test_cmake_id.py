"""A kept CMake compiler identification: keyed by the compilers, seeded only into a
fresh build directory, never reused after a compiler change."""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from wheelkiln import run
from wheelkiln.builder.cmake_id import (
    Kept,
    cmake_version,
    identification_key,
    keep,
    keep_all,
    python_key,
    seed,
)


def fake_compilers(directory: Path, version: str) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("cc", "c++", "gcc", "g++", "nvcc"):
        tool = directory / name
        tool.write_text(f"#!/bin/sh\necho '{name} (Fake) {version}'\n")
        tool.chmod(0o755)
    return {"PATH": str(directory)}


def test_the_key_follows_the_compilers_and_what_identification_reads(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text("project(x CXX CUDA)\n")
    env = fake_compilers(tmp_path / "bin", "12.2.0")
    cmake = str(tmp_path / "bin" / "cc")  # any file: its path and the version name it

    def key(environ: dict[str, str]) -> str:
        return identification_key(cmake, "3.25.1", tree, environ, [])

    base = key(env)
    assert key(dict(env)) == base
    # What identification does not read (and names the job) leaves the key alone.
    assert key({**env, "SKBUILD_BUILD_DIR": "/w/job-link/build"}) == base
    assert key({**env, "CMAKE_CXX_COMPILER_LAUNCHER": "/w/job/kiln-bin/cache-front"}) == base
    # A compiler that reports another version, another compiler chosen, other flags,
    # another CUDA architecture list or project: another key.
    assert key(fake_compilers(tmp_path / "bin2", "12.3.0")) != base
    assert key({**env, "CUDACXX": str(tmp_path / "bin" / "nvcc")}) != base
    assert key({**env, "CXXFLAGS": "-O1"}) != base
    assert key({**env, "CMAKE_CUDA_ARCHITECTURES": "90"}) != base
    assert identification_key(cmake, "3.29.0", tree, env, []) != base
    # What the drivers read: gcc's search paths, nvcc's options and host compiler.
    for name, value in (("CPLUS_INCLUDE_PATH", "/opt/inc"), ("LIBRARY_PATH", "/opt/lib"),
                        ("NVCC_PREPEND_FLAGS", "-I/opt/inc"), ("NVCC_APPEND_FLAGS", "-O0"),
                        ("NVCC_CCBIN", str(tmp_path / "bin" / "g++")), ("FC", "gfortran")):
        assert key({**env, name: value}) != base, name
    (tree / "CMakeLists.txt").write_text("project(x CXX)\n")
    assert key(env) != base


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("c++"), reason="needs cmake, c++")
def test_what_the_driver_reads_into_the_identification_is_in_its_key(tmp_path: Path) -> None:
    """gcc adds ``CPLUS_INCLUDE_PATH`` and ``LIBRARY_PATH`` to what CMake records as its
    implicit include and link directories (real cmake, real g++): an identification kept
    without them must not be seeded into a build with them."""
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.20)\nproject(x CXX)\n")
    extra = tmp_path / "extra"
    extra.mkdir()
    cmake = shutil.which("cmake") or "cmake"
    version = cmake_version(cmake)
    assert version is not None

    def identified(name: str, environ: dict[str, str]) -> tuple[str, str]:
        build = tmp_path / f"build-{name}"
        run.run(["cmake", "-S", str(tree), "-B", str(build)], env=environ, check=True)
        (found,) = build.glob("CMakeFiles/*/CMakeCXXCompiler.cmake")
        directories = re.findall(r'IMPLICIT_(?:INCLUDE|LINK)_DIRECTORIES "([^"]*)"', found.read_text())
        key = identification_key(cmake, version, tree, environ, [])
        return ";".join(directories), key

    plain_dirs, plain_key = identified("plain", dict(os.environ))
    assert str(extra) not in plain_dirs
    for name in ("CPLUS_INCLUDE_PATH", "LIBRARY_PATH"):
        dirs, key = identified(name, {**os.environ, name: str(extra)})
        assert str(extra) in dirs.split(";"), (name, dirs)
        assert key != plain_key, name


def test_kept_files_seed_only_a_fresh_build_directory(tmp_path: Path) -> None:
    built = tmp_path / "built"
    files = built / "CMakeFiles" / "3.25.1"
    files.mkdir(parents=True)
    for name in (
        "CMakeSystem.cmake",
        "CMakeCXXCompiler.cmake",
        "CMakeDetermineCompilerABI_CXX.bin",
    ):
        (files / name).write_text(name)
    (built / "CMakeCache.txt").write_text(
        "CMAKE_CXX_COMPILER:FILEPATH=/usr/bin/c++\nCMAKE_EXECUTABLE_FORMAT:INTERNAL=ELF\n"
        "HAS_FLTO:INTERNAL=1\nFOO_DIR:PATH=/env/x\n"
    )
    store = tmp_path / "cmake-id" / "key"
    assert not seed(store, tmp_path / "fresh0", "3.25.1"), "nothing kept yet"
    keep(store, "3.25.1", built)
    fresh = tmp_path / "fresh"
    assert seed(store, fresh, "3.25.1")
    seeded = sorted(p.name for p in (fresh / "CMakeFiles" / "3.25.1").iterdir())
    assert seeded == [
        "CMakeCXXCompiler.cmake",
        "CMakeDetermineCompilerABI_CXX.bin",
        "CMakeSystem.cmake",
    ]
    # Identification's own cache entries only: the project's checks and paths are redone.
    assert (fresh / "CMakeCache.txt").read_text() == (
        "CMAKE_PLATFORM_INFO_INITIALIZED:INTERNAL=1\n"
        "CMAKE_CXX_COMPILER:FILEPATH=/usr/bin/c++\nCMAKE_EXECUTABLE_FORMAT:INTERNAL=ELF\n"
    )
    assert not seed(store, fresh, "3.25.1"), "a configured directory is never seeded"


FIND_PYTHON_PROJECT = """\
cmake_minimum_required(VERSION 3.18)
project(p NONE)
find_package(Python REQUIRED COMPONENTS Interpreter)
message(STATUS "kiln-python=${Python_EXECUTABLE} ${Python_VERSION}")
"""


def logging_python(path: Path, real: str, log: Path) -> Path:
    """An interpreter that notes each start in *log*, then runs *real*."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    path.chmod(0o755)
    return path


def configure(tree: Path, build: Path, python: Path) -> str:
    done = run.run(
        ["cmake", "-S", str(tree), "-B", str(build), f"-DPython_EXECUTABLE={python}"],
        check=True,
    )
    found = re.search(r"kiln-python=(\S+) (\S+)", done.output)
    assert found, done.output
    return f"{found[1]} {found[2]}"


@pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
def test_kept_interpreter_answers_skip_findpython_and_only_for_that_interpreter(
    tmp_path: Path,
) -> None:
    """FindPython's answers, kept after a configure, let the next fresh configure with
    the same interpreter start it once at most; another interpreter (another key, and
    FindPython's own check when answers are seeded anyway) is asked again."""
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(FIND_PYTHON_PROJECT)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    python_a = logging_python(tmp_path / "a" / "python", sys.executable, log_a)
    other = "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else sys.executable
    python_b = logging_python(tmp_path / "b" / "python", other, log_b)
    version_b = run.run([other, "-c", "import platform;print(platform.python_version())"])

    first = configure(tree, tmp_path / "build1", python_a)
    assert first == f"{python_a} {platform.python_version()}"
    asked = len(log_a.read_text().splitlines())
    assert asked >= 2, "FindPython asks the interpreter itself"

    key_a = python_key(python_a)
    assert key_a is not None and key_a == python_key(python_a)
    assert python_key(python_b) != key_a, "another interpreter path, another key"

    identification = tmp_path / "cmake-id" / "key"
    identification.mkdir(parents=True)
    (identification / "cache.txt").write_text("")
    (identification / "complete").write_text("3.25.1\n")
    kept = Kept(identification, "3.25.1", identification / f"python-{key_a}", python_a)
    keep_all(kept, tmp_path / "build1")
    answers = (identification / f"python-{key_a}" / "cache.txt").read_text()
    assert "_Python_INTERPRETER_PROPERTIES:INTERNAL=" in answers
    assert "CMAKE_PLATFORM_INFO_INITIALIZED" not in answers, "interpreter answers only"

    # Same interpreter, seeded: the same answer, and the interpreter started at most
    # once (FindPython checks the version of a kept interpreter again).
    assert seed(identification, tmp_path / "build2", "3.25.1", kept.python)
    log_a.write_text("")
    assert configure(tree, tmp_path / "build2", python_a) == first
    assert len(log_a.read_text().splitlines()) <= 1 < asked

    # Another interpreter gets another key, so it is not seeded from these answers; and
    # seeded with them regardless, FindPython sees the executable changed and asks it.
    assert seed(identification, tmp_path / "build3", "3.25.1", kept.python)
    assert configure(tree, tmp_path / "build3", python_b) == (
        f"{python_b} {version_b.output.strip()}"
    )
    assert log_b.read_text().strip(), "the other interpreter was asked"

    # A changed interpreter binary behind the same path: another key.
    time.sleep(0.01)
    python_a.write_text(python_a.read_text() + "\n")
    assert python_key(python_a) != key_a


def test_interpreter_answers_are_kept_alone_and_only_with_an_identification(
    tmp_path: Path,
) -> None:
    built = tmp_path / "built"
    built.mkdir()
    (built / "CMakeCache.txt").write_text(
        "_Python_EXECUTABLE:INTERNAL=/env/bin/python\n"
        "_Python_INTERPRETER_PROPERTIES:INTERNAL=Python;3;11\n"
        "_Python2_EXECUTABLE:INTERNAL=/usr/bin/python2\n"
        "_Python2_INTERPRETER_PROPERTIES:INTERNAL=Python;2;7\n"
        "PYBIND11_PYTHON_EXECUTABLE_LAST:INTERNAL=/env/bin/python\n"
        "PYTHON_MODULE_EXTENSION:INTERNAL=.cpython-311-x86_64-linux-gnu.so\n"
        "Python_EXECUTABLE:PATH=/env/bin/python\n"
        "HAS_FLTO_AUTO:INTERNAL=1\nCMAKE_HAVE_LIBC_PTHREAD:INTERNAL=1\n"
    )
    identification = tmp_path / "cmake-id" / "key"
    kept = Kept(identification, "3.25.1", identification / "python-k", Path("/env/bin/python"))
    keep_all(kept, built)
    assert not identification.exists(), "no identification kept: no answers either"
    identification.mkdir(parents=True)
    (identification / "complete").write_text("3.25.1\n")
    keep_all(kept, built)
    # FindPython's and pybind11's answers about this interpreter: never those about
    # another one FindPython searched for, never the project's check results, never the
    # executable the backend passes (it is passed again).
    assert (identification / "python-k" / "cache.txt").read_text() == (
        "_Python_EXECUTABLE:INTERNAL=/env/bin/python\n"
        "_Python_INTERPRETER_PROPERTIES:INTERNAL=Python;3;11\n"
        "PYBIND11_PYTHON_EXECUTABLE_LAST:INTERNAL=/env/bin/python\n"
        "PYTHON_MODULE_EXTENSION:INTERNAL=.cpython-311-x86_64-linux-gnu.so\n"
    )
