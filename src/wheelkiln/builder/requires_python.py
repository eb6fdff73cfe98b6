"""The Pythons a package says it supports, checked against a cell's before it is built.

A package whose ``requires-python`` excludes the cell's interpreter cannot give that cell
a wheel: meson-python refuses after the environment is made and the project configured
(pywavelets 1.10 on Python 3.11: numpy and Cython installed, meson run, then "requires
Python version >=3.12"), setuptools builds a wheel pip will not install. A sharded build
learnt it from each shard's gate, which found its slice never compiled. kiln reads the
constraint where a frontend would, before any of that work:

* ``[project] requires-python`` in ``pyproject.toml``, unless the project marks it
  ``dynamic``;
* otherwise ``Requires-Python`` in the sdist's ``PKG-INFO`` (what setuptools' own
  ``python_requires`` becomes in an sdist);
* otherwise, in a checkout without a ``[project]`` table (or whose table lists
  ``requires-python`` as dynamic), setuptools' ``python_requires``: a string literal
  given to ``setup()`` in ``setup.py`` (read as a syntax tree, never run), which wins
  over ``[options]`` in ``setup.cfg`` as it does in setuptools. A value setup.py
  computes is not read: only running it would tell.

A constraint that is not a version specifier is left to the backend, which refuses it
with its own message.
"""

from __future__ import annotations

import ast
import configparser
import os
import tomllib
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from wheelkiln.errors import BuildError
from wheelkiln.holds import open_regular


@dataclass(frozen=True)
class Constraint:
    """A package's supported Pythons, and where it says so."""

    specifier: str
    where: str
    """``<file>: <key>``, as an error names it."""


MOST_BYTES = 1 << 20
"""A metadata file larger than this is not read here (the build reads it, or fails)."""


def small_file(path: Path) -> bytes | None:
    """*path*'s bytes where it is a regular file (or a link to one) of at most
    :data:`MOST_BYTES`; None otherwise. A source is untrusted: a link to ``/dev/zero``
    or a FIFO would never end, so the file is opened without waiting for a writer,
    checked once open, and read no further than the limit."""
    try:
        with os.fdopen(open_regular(path, follow_links=True), "rb") as handle:
            data = handle.read(MOST_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= MOST_BYTES else None


def _small_text(path: Path) -> str | None:
    """*path*'s text where :func:`small_file` reads it; None otherwise."""
    data = small_file(path)
    return None if data is None else data.decode("utf-8", errors="replace")


def _setup_call_keyword(source: str, keyword: str) -> str | None:
    """The string literal given as *keyword* to a ``setup(...)`` or ``x.setup(...)`` call
    in *source*; None where there is no such literal (or the file does not parse)."""
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(module):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        name = function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)
        if name != "setup":
            continue
        for given in node.keywords:
            if given.arg == keyword and isinstance(given.value, ast.Constant):
                value = given.value.value
                return value if isinstance(value, str) else None
    return None


def _setuptools_constraint(tree: Path) -> Constraint | None:
    """setuptools' ``python_requires`` in a checkout (module doc)."""
    setup_py = tree / "setup.py"
    declared = _setup_call_keyword(_small_text(setup_py) or "", "python_requires")
    if declared is not None and declared.strip():
        return Constraint(declared.strip(), f"{setup_py}: setup(python_requires=...)")
    setup_cfg = tree / "setup.cfg"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_small_text(setup_cfg) or "")
    except configparser.Error:
        return None
    declared = parser.get("options", "python_requires", fallback="").strip()
    return Constraint(declared, f"{setup_cfg}: [options] python_requires") if declared else None


def read_constraint(tree: Path) -> Constraint | None:
    """The package's ``requires-python`` (module doc); None where it states none."""
    pyproject = tree / "pyproject.toml"
    try:
        project = tomllib.loads(_small_text(pyproject) or "").get("project")
    except (ValueError, RecursionError):  # TOMLDecodeError, an integer too long to convert
        project = None  # unreadable: read_build_system says why
    # With a [project] table, setuptools takes requires-python from setup.py or
    # setup.cfg only where the table lists it as dynamic.
    setuptools_may_say = True
    if isinstance(project, dict):
        dynamic = project.get("dynamic")
        setuptools_may_say = isinstance(dynamic, list) and "requires-python" in dynamic
        declared = project.get("requires-python")
        if isinstance(declared, str) and not setuptools_may_say:
            return Constraint(declared, f"{pyproject}: [project] requires-python")
    pkg_info = tree / "PKG-INFO"
    text = _small_text(pkg_info)
    if text is None:  # a checkout
        return _setuptools_constraint(tree) if setuptools_may_say else None
    declared = HeaderParser().parsestr(text).get("Requires-Python")
    if declared is None or not str(declared).strip():
        return None
    return Constraint(str(declared).strip(), f"{pkg_info}: Requires-Python")


def check_requires_python(tree: Path, version: str, cell_id: str) -> None:
    """Raise :class:`BuildError` when the package in *tree* excludes Python *version*
    (the cell's interpreter, e.g. ``3.11.7``), before anything is built for it."""
    constraint = read_constraint(tree)
    if constraint is None:
        return
    try:
        allowed = SpecifierSet(constraint.specifier)
        excluded = not allowed.contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return
    if excluded:
        minor = ".".join(version.split(".")[:2])
        raise BuildError(
            f"The package supports Python {constraint.specifier} ({constraint.where}); "
            f"cell {cell_id} builds with Python {version}, so no wheel can be made for it.",
            hint=f"Pick a cell with a Python it supports (--cell python=X.Y), or take "
            f"{minor} out of the recipe's [matrix] python.",
        )
