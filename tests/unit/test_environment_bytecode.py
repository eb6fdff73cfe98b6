"""A build environment's bytecode: compiled beside the build, once, and only as pycs that
Python checks against their sources.

The environments here are directories laid out as a venv's site-packages, run by this
interpreter; no package index is asked.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import struct
import subprocess
import sys
from pathlib import Path

from wheelkiln.builder.environment import (
    BYTECODE_MARKER,
    BuildSystem,
    compile_backend,
    compile_bytecode,
    compile_later,
    finish_bytecode,
)

SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


def environment_at(envs: Path, key: str = "0123456789abcdef") -> Path:
    environment = envs / key
    site = environment / SITE
    for package in ("answer", "fakebackend"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("VALUE = 42\n")
    # A template that is no Python: it must not stop the rest, nor the marker.
    (site / "answer" / "template.py").write_text("def {{ name }}():\n")
    (environment / "bin").mkdir()
    (environment / "bin" / "python").symlink_to(sys.executable)
    return environment


def pyc(environment: Path, package: str) -> Path:
    source = environment / SITE / package / "__init__.py"
    return Path(importlib.util.cache_from_source(str(source)))


def imported_value(environment: Path) -> str:
    """What ``answer.VALUE`` is, imported as a build would (no bytecode written)."""
    code = "import answer; print(answer.VALUE)"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(environment / SITE)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()


def test_an_environment_is_compiled_once_to_pycs_checked_against_their_source(
    tmp_path: Path,
) -> None:
    environment = environment_at(tmp_path)
    # SOURCE_DATE_EPOCH would make py_compile write hash-checked pycs: asked for
    # timestamp pycs, whatever the build's environment says.
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
    assert compile_bytecode(environment, tmp_path, env)
    assert (environment / BYTECODE_MARKER).is_file()
    compiled = pyc(environment, "answer")
    source = environment / SITE / "answer" / "__init__.py"
    magic, flags, mtime, size = struct.unpack("<4sLLL", compiled.read_bytes()[:16])
    assert magic == importlib.util.MAGIC_NUMBER
    assert flags == 0  # timestamp: Python compares the source's mtime and size
    assert (mtime, size) == (int(source.stat().st_mtime), source.stat().st_size)
    assert pyc(environment, "fakebackend").is_file()
    assert not list((environment / SITE / "answer" / "__pycache__").glob("template.*"))
    assert imported_value(environment) == "42"

    # A changed source is not answered by its old pyc.
    source.write_text("VALUE = 'changed'\n")
    assert imported_value(environment) == "changed"
    # Marked: not compiled again (a pyc removed stays removed).
    compiled.unlink()
    assert compile_bytecode(environment, tmp_path, env)
    assert not compiled.exists()


def test_a_compile_that_did_not_end_leaves_no_marker_and_the_next_one_compiles(
    tmp_path: Path,
) -> None:
    environment = environment_at(tmp_path)
    python = environment / "bin" / "python"
    python.unlink()
    python.write_text("#!/bin/sh\nkill -9 $$\n")  # as a compile killed with its build
    python.chmod(0o755)
    assert not compile_bytecode(environment, tmp_path, os.environ)
    assert not (environment / BYTECODE_MARKER).exists()
    python.unlink()
    python.symlink_to(sys.executable)
    assert compile_bytecode(environment, tmp_path, os.environ)
    assert pyc(environment, "answer").is_file()


def test_one_process_compiles_an_environment_and_the_others_go_on(tmp_path: Path) -> None:
    environment = environment_at(tmp_path)
    with (tmp_path / f"{environment.name}.bytecode.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process compiling it
        assert not compile_bytecode(environment, tmp_path, os.environ)
    assert not pyc(environment, "answer").exists()
    assert not (environment / BYTECODE_MARKER).exists()


def test_compiled_beside_the_caller_until_it_waits(tmp_path: Path) -> None:
    environment = environment_at(tmp_path)
    compile_later(environment, tmp_path, os.environ)
    finish_bytecode()
    assert (environment / BYTECODE_MARKER).is_file()
    assert pyc(environment, "answer").is_file()


def test_the_backends_package_is_compiled_first_and_alone(tmp_path: Path) -> None:
    environment = environment_at(tmp_path)
    in_tree = BuildSystem((), "fakebackend.build:hooks", ("backend",))
    compile_backend(environment, in_tree, os.environ)  # its backend is in the tree
    assert not pyc(environment, "fakebackend").exists()
    compile_backend(environment, BuildSystem((), "fakebackend.build:hooks", ()), os.environ)
    assert pyc(environment, "fakebackend").is_file()
    assert not pyc(environment, "answer").exists()
    assert not (environment / BYTECODE_MARKER).exists()  # the rest is still to compile
    # An environment made and compiled for another request: nothing to start.
    pyc(environment, "fakebackend").unlink()
    (environment / BYTECODE_MARKER).write_text("every module compiled\n")
    compile_backend(environment, BuildSystem((), "fakebackend.build:hooks", ()), os.environ)
    assert not pyc(environment, "fakebackend").exists()
