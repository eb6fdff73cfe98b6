"""A job asks each program for its version once; the next job asks again, so a compiler
changed in place between two jobs (same path, a long-lived Dask worker) is seen."""

from __future__ import annotations

from pathlib import Path

from wheelkiln.builder import probes
from wheelkiln.builder.cmake_id import identification_key


def _fake_gcc(directory: Path, version: str) -> Path:
    """A ``gcc`` that counts its runs in ``runs`` beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "gcc"
    tool.write_text(f"#!/bin/sh\necho run >> {directory / 'runs'}\necho 'gcc (Fake) {version}'\n")
    tool.chmod(0o755)
    for name in ("cc", "c++", "g++"):
        (directory / name).unlink(missing_ok=True)
        (directory / name).symlink_to(tool)
    return tool


def test_a_probe_runs_once_per_job_and_again_in_the_next(tmp_path: Path) -> None:
    tool = _fake_gcc(tmp_path / "bin", "12.2.0")
    probes.start_job()
    assert probes.probe([str(tool), "--version"]).output == "gcc (Fake) 12.2.0\n"
    assert probes.probe([str(tool), "--version"]).output == "gcc (Fake) 12.2.0\n"
    assert (tmp_path / "bin" / "runs").read_text() == "run\n"
    # Other arguments are another question.
    probes.probe([str(tool), "-dumpfullversion"])
    assert (tmp_path / "bin" / "runs").read_text() == "run\nrun\n"
    _fake_gcc(tmp_path / "bin", "12.3.0")  # upgraded in place, same path
    probes.start_job()
    assert probes.probe([str(tool), "--version"]).output == "gcc (Fake) 12.3.0\n"


def test_cmake_identification_asks_each_compiler_once_and_sees_a_change_next_job(tmp_path: Path) -> None:
    """cc, c++, gcc and g++ resolve to one program here: asked once in a job. The kept
    identification's key changes when that compiler changes between jobs."""
    _fake_gcc(tmp_path / "bin", "12.2.0")
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text("project(x CXX)\n")
    env = {"PATH": str(tmp_path / "bin")}
    cmake = str(tmp_path / "bin" / "gcc")  # any file: its path and the version name it
    probes.start_job()
    base = identification_key(cmake, "3.25.1", tree, env, [])
    assert identification_key(cmake, "3.25.1", tree, env, []) == base
    assert (tmp_path / "bin" / "runs").read_text() == "run\n"
    _fake_gcc(tmp_path / "bin", "12.3.0")
    probes.start_job()
    assert identification_key(cmake, "3.25.1", tree, env, []) != base
