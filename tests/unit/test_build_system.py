"""A package's ``[build-system]`` table, read before anything is built: the package is
untrusted, so every way the file can be wrong is a named refusal (file and key), never a
traceback and never a wrong guess (a ``requires`` string read letter by letter)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wheelkiln.builder.environment import (
    DEFAULT_BACKEND,
    DEFAULT_REQUIRES,
    BuildSystem,
    read_build_system,
)
from wheelkiln.builder.requires_python import read_constraint
from wheelkiln.errors import RecipeError


def test_the_table_is_read_and_defaults_fill_what_it_leaves_out(tmp_path: Path) -> None:
    assert read_build_system(tmp_path) == BuildSystem(DEFAULT_REQUIRES, DEFAULT_BACKEND, ())
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert read_build_system(tmp_path) == BuildSystem(DEFAULT_REQUIRES, DEFAULT_BACKEND, ())
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["scikit-build-core>=0.10", "pybind11"]\n'
        'build-backend = "backend"\nbackend-path = ["_build"]\n'
    )
    assert read_build_system(tmp_path) == BuildSystem(
        ("scikit-build-core>=0.10", "pybind11"), "backend", ("_build",)
    )


WRONG = {
    "a requires string": (
        '[build-system]\nrequires = "setuptools>=64"\n',
        "[build-system] requires must be a list of strings, not a string.",
    ),
    "a requires number": (
        "[build-system]\nrequires = 5\n",
        "[build-system] requires must be a list of strings, not an integer.",
    ),
    "a requires array of tables": (
        '[build-system]\nrequires = ["setuptools", {name = "x"}, 3]\n',
        "[build-system] requires must be a list of strings, not an array holding a "
        "table and an integer.",
    ),
    "a build-system number": (
        "build-system = 1\n",
        "[build-system] must be a table, not an integer.",
    ),
    "a build-backend array": (
        '[build-system]\nrequires = []\nbuild-backend = ["setuptools.build_meta"]\n',
        "[build-system] build-backend must be a string, not an array.",
    ),
    "a backend-path string": (
        '[build-system]\nrequires = []\nbackend-path = "."\n',
        "[build-system] backend-path must be a list of strings, not a string.",
    ),
    "a date": (
        "[build-system]\nrequires = 2024-01-01\n",
        "[build-system] requires must be a list of strings, not a date or time.",
    ),
    "an integer past Python's limit": (
        "[build-system]\nrequires = []\nx = " + "9" * 5000 + "\n",
        "not valid TOML: Exceeds the limit (4300 digits) for integer string conversion: "
        "value has 5000 digits.",
    ),
    "arrays nested past the recursion limit": (
        "x = " + "[" * 5000 + "]" * 5000 + "\n",
        "not valid TOML: nested too deeply to read.",
    ),
    "invalid TOML": ("[build-system\n", "not valid TOML: Expected ']' at the end of a table"),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_wrong_table_is_refused_naming_the_file_and_key(tmp_path: Path, case: str) -> None:
    text, message = WRONG[case]
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(text)
    with pytest.raises(RecipeError) as raised:
        read_build_system(tmp_path)
    assert raised.value.message.startswith(f"{pyproject}: {message}"), raised.value.message
    assert read_constraint(tmp_path) is None  # read first in a build: no traceback there


def test_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_bytes(b'[build-system]\nrequires = ["caf\xe9"]\n')
    with pytest.raises(RecipeError) as raised:
        read_build_system(tmp_path)
    assert raised.value.message == f"{pyproject}: not UTF-8 text (byte 31)."


MAKERS = {
    "a link to /dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "a FIFO": os.mkfifo,
    "a directory": Path.mkdir,
    "over 1 MiB": lambda path: path.write_text("# " + "x" * (1 << 20) + "\n"),
    "a dangling link": lambda path: path.symlink_to(path.with_name("gone")),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_only_a_small_regular_file_is_read(tmp_path: Path, kind: str) -> None:
    """A link to /dev/zero or a FIFO would never end (the test would hang); a directory
    or a dangling link is no file to read, and nothing to read is no default either."""
    pyproject = tmp_path / "pyproject.toml"
    MAKERS[kind](pyproject)
    with pytest.raises(RecipeError) as raised:
        read_build_system(tmp_path)
    assert raised.value.message == f"{pyproject}: not read: it is no regular file of at most 1 MiB."
