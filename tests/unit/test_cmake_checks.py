"""Kept CMake check results: only a check's whole answer is kept, it is seeded into the
next fresh configure of the same source on the same system, and a header installed
where the compiler searches (or another source) makes the check run again."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from wheelkiln import run
from wheelkiln.builder import cmake_checks, cmake_id

DATA = Path(__file__).resolve().parents[1] / "data"


def test_whole_answers_are_read_from_the_configure_log_of_cmake_4(tmp_path: Path) -> None:
    """From CMake 3.26 on: try_compile events whose check is "Performing Test <var>" or
    "Looking for ...", cached; never a try_run, check_type_size's size, or an
    identification step (the log is a real CMake 4.4 one, trimmed)."""
    files = tmp_path / "CMakeFiles"
    files.mkdir()
    shutil.copy(DATA / "cmake-4.4-configure-log.yaml", files / "CMakeConfigureLog.yaml")
    assert cmake_checks.checked_variables(tmp_path) == [
        "HAVE_KILN_PROBE",
        "HAVE_PTHREAD_H",
        "HAVE_KILN_ABSENT",
        "HAVE_SYS_TYPES_H",
        "HAVE_STDINT_H",
        "HAVE_STDDEF_H",
        "CMAKE_HAVE_LIBC_PTHREAD",
    ]
    (tmp_path / "CMakeCache.txt").write_text(
        "//Test HAVE_KILN_PROBE\nHAVE_KILN_PROBE:INTERNAL=\n"
        "HAVE_PTHREAD_H:INTERNAL=1\nHAVE_SIZEOF_LONG:INTERNAL=TRUE\nSIZEOF_LONG:INTERNAL=8\n"
        "RUNS_TRIVIAL:INTERNAL=1\nRUNS_TRIVIAL_EXITCODE:INTERNAL=0\n"
        "HAVE_STDINT_H:BOOL=ON\n"  # set by the project, not by the check: not kept
    )
    assert cmake_checks.check_results(tmp_path) == [
        "HAVE_KILN_PROBE:INTERNAL=",
        "HAVE_PTHREAD_H:INTERNAL=1",
    ]


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        "project(p CXX)\n"
        "include(CheckCXXSourceCompiles)\n"
        'check_cxx_source_compiles("#include <kiln_probe.h>\\nint main() { return 0; }"'
        " HAVE_KILN_PROBE)\n"
        "find_package(Threads REQUIRED)\n"
        'message(STATUS "kiln-probe=[${HAVE_KILN_PROBE}]")\n'
    )
    return tree


def _configure(tree: Path, build: Path, env: dict[str, str]) -> tuple[str, list[str]]:
    """The probe's value and the checks this configure performed."""
    done = run.run(["cmake", "-S", str(tree), "-B", str(build)], env=env, check=True)
    found = re.search(r"kiln-probe=\[(.*)\]", done.output)
    assert found, done.output
    return found[1], re.findall(r"-- Performing Test (\w+)$", done.output, re.MULTILINE)


@pytest.mark.compile
@pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
def test_kept_results_are_seeded_until_a_header_appears_or_the_source_changes(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path)
    include = tmp_path / "include"  # searched by the compiler (CPATH): an implicit dir
    include.mkdir()
    env = {**os.environ, "CPATH": str(include)}
    env.pop("CMAKE_ARGS", None)
    store_root = tmp_path / "cmake-id"
    build_env = tmp_path / "env"

    def prepare(build: Path, digest: str, recache: bool = False) -> cmake_id.Kept:
        kept = cmake_id.prepare(
            build, tree, env, build_env, [], store_root, source_digest=digest, recache=recache
        )
        assert kept is not None
        return kept

    performed = ["HAVE_KILN_PROBE", "CMAKE_HAVE_LIBC_PTHREAD"]
    first = prepare(tmp_path / "b1", "digest-1")
    assert first.checks is None, "no identification kept yet: nothing names the system"
    assert _configure(tree, tmp_path / "b1", env) == ("", performed)
    cmake_id.keep_all(first, tmp_path / "b1")
    assert not list(first.identification.glob("checks-*")), "no key read before the checks"

    # The identification is kept: the next configure reads the system first, runs the
    # checks (none kept yet) and keeps their answers under that key.
    second = prepare(tmp_path / "b2", "digest-1")
    assert second.checks is not None
    assert _configure(tree, tmp_path / "b2", env) == ("", performed)
    cmake_id.keep_all(second, tmp_path / "b2")
    kept_checks = second.checks
    assert (kept_checks / "cache.txt").read_text() == (
        "CMAKE_HAVE_LIBC_PTHREAD:INTERNAL=1\nHAVE_KILN_PROBE:INTERNAL=\n"
    )

    # The same source on the same system: both answers seeded, no check performed.
    third = prepare(tmp_path / "b2b", "digest-1")
    assert third.checks == kept_checks
    assert _configure(tree, tmp_path / "b2b", env) == ("", [])

    # Another source: its checks run again.
    assert prepare(tmp_path / "b3", "digest-2").checks != kept_checks
    assert _configure(tree, tmp_path / "b3", env)[1] == performed

    # The header the failed check wanted is installed: another key, the check runs and
    # now succeeds; kept, the success is what the next configure gets.
    (include / "kiln_probe.h").write_text("#define KILN_PROBE 1\n")
    fourth = prepare(tmp_path / "b4", "digest-1")
    assert fourth.checks not in (None, kept_checks)
    assert _configure(tree, tmp_path / "b4", env) == ("1", performed)
    cmake_id.keep_all(fourth, tmp_path / "b4")
    assert prepare(tmp_path / "b5", "digest-1").checks == fourth.checks
    assert _configure(tree, tmp_path / "b5", env) == ("1", [])

    # A kept result gone stale unseen (a header written in place): --recache runs the
    # checks again and its results replace the kept ones.
    assert fourth.checks is not None
    (fourth.checks / "cache.txt").write_text("HAVE_KILN_PROBE:INTERNAL=\n")
    assert prepare(tmp_path / "b6", "digest-1").checks == fourth.checks
    assert _configure(tree, tmp_path / "b6", env) == ("", ["CMAKE_HAVE_LIBC_PTHREAD"])
    again = prepare(tmp_path / "b7", "digest-1", recache=True)
    assert _configure(tree, tmp_path / "b7", env) == ("1", performed)
    cmake_id.keep_all(again, tmp_path / "b7")
    assert (fourth.checks / "cache.txt").read_text() == (
        "CMAKE_HAVE_LIBC_PTHREAD:INTERNAL=1\nHAVE_KILN_PROBE:INTERNAL=1\n"
    )


def test_the_system_signature_follows_headers_libraries_and_the_linker(tmp_path: Path) -> None:
    include, deep, link = tmp_path / "inc", tmp_path / "inc" / "sub", tmp_path / "lib"
    for directory in (deep, link, tmp_path / "bin"):
        directory.mkdir(parents=True)
    identification = tmp_path / "id"
    identification.mkdir()
    (identification / "CMakeCXXCompiler.cmake").write_text(
        f'set(CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES "{include};{deep}")\n'
        f'set(CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES "{link}")\n'
    )
    assert cmake_checks.system_directories(identification) == ([str(include)], [str(link)])
    (deep / "a.h").write_text("int a;\n")
    (link / "libx.so").write_text("x")
    ld = tmp_path / "bin" / "ld"
    ld.write_text("#!/bin/sh\n")
    ld.chmod(0o755)
    env = {"PATH": str(tmp_path / "bin")}

    def signature() -> str:
        return cmake_checks.system_signature(identification, env)

    base = signature()
    assert signature() == base
    (deep / "b.h").write_text("int b;\n")  # installed, below the top
    changed = signature()
    assert changed != base
    (deep / "b.h").rename(deep / "c.h")
    assert signature() != changed
    (deep / "c.h").unlink()
    changed = signature()
    time.sleep(0.01)
    (deep / "a.h").write_text("int c;\n")  # written in place: not seen (module doc)
    assert signature() == changed
    (link / "liby.so").write_text("y")
    changed_again = signature()
    assert changed_again != changed, "a library in a link directory"
    # The linker does not search below a link directory, and programs write there at run
    # time (Chromium's first start creates /usr/lib/chromium/extensions): not seen.
    (link / "chromium").mkdir()
    assert signature() == changed_again
    (link / "chromium" / "extensions").mkdir()
    (link / "chromium" / "libz.so").write_text("z")
    assert signature() == changed_again
    ld.write_text("#!/bin/sh\n# another linker\n")
    assert signature() != changed_again


def test_no_checks_are_kept_where_the_include_directories_are_too_large_to_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPATH naming a whole tree (``/usr``, a home) would make reading the system cost
    more than the checks: the key is None, so nothing is seeded or kept."""
    identification = tmp_path / "id"
    identification.mkdir()
    (identification / "complete").write_text("3.25.1\n")
    include = tmp_path / "inc"
    for index in range(5):
        (include / f"d{index}" / "deeper").mkdir(parents=True)
    (identification / "CMakeCXXCompiler.cmake").write_text(
        f'set(CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES "{include}")\n'
    )
    env = {"PATH": ""}
    assert cmake_checks.store_for(identification, "d", tmp_path / "env", env) is not None
    monkeypatch.setattr(cmake_checks, "MOST_DIRECTORIES", 10)
    assert cmake_checks.store_for(identification, "d", tmp_path / "env", env) is None
