"""A package's requires-python, checked against the cell's Python before any build."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelkiln.builder.requires_python import Constraint, check_requires_python, read_constraint
from wheelkiln.errors import BuildError


def _tree(tmp_path: Path, pyproject: str | None = None, pkg_info: str | None = None) -> Path:
    tree = tmp_path / "pkg"
    tree.mkdir()
    if pyproject is not None:
        (tree / "pyproject.toml").write_text(pyproject)
    if pkg_info is not None:
        (tree / "PKG-INFO").write_text(pkg_info)
    return tree


def test_the_constraint_is_read_from_pyproject_first(tmp_path: Path) -> None:
    tree = _tree(
        tmp_path,
        '[project]\nname = "p"\nrequires-python = ">=3.12"\n',
        "Metadata-Version: 2.1\nName: p\nRequires-Python: >=3.8\n",
    )
    assert read_constraint(tree) == Constraint(
        ">=3.12", f"{tree / 'pyproject.toml'}: [project] requires-python"
    )


@pytest.mark.parametrize(
    "pyproject",
    [
        None,
        '[build-system]\nrequires = ["setuptools"]\n',
        '[project]\nname = "p"\ndynamic = ["requires-python"]\nrequires-python = ">=3.13"\n',
        "not [valid toml",
    ],
)
def test_without_a_static_one_the_sdist_metadata_says(tmp_path: Path, pyproject: str | None) -> None:
    tree = _tree(tmp_path, pyproject, "Metadata-Version: 2.1\nName: p\nRequires-Python: >=3.12, <4\n")
    assert read_constraint(tree) == Constraint(">=3.12, <4", f"{tree / 'PKG-INFO'}: Requires-Python")


def test_a_package_that_states_none_is_not_checked(tmp_path: Path) -> None:
    tree = _tree(tmp_path, '[project]\nname = "p"\n', "Metadata-Version: 2.1\nName: p\n")
    assert read_constraint(tree) is None
    check_requires_python(tree, "3.11.7", "p-py3.11-linux-x86_64")


def test_an_excluded_python_is_refused_naming_the_file_and_what_to_do(tmp_path: Path) -> None:
    tree = _tree(tmp_path, '[project]\nname = "p"\nrequires-python = ">=3.12"\n')
    with pytest.raises(BuildError) as refused:
        check_requires_python(tree, "3.11.7", "p-py3.11-linux-x86_64")
    assert refused.value.message == (
        f"The package supports Python >=3.12 ({tree / 'pyproject.toml'}: [project] "
        "requires-python); cell p-py3.11-linux-x86_64 builds with Python 3.11.7, so no wheel "
        "can be made for it."
    )
    assert refused.value.hint == (
        "Pick a cell with a Python it supports (--cell python=X.Y), or take 3.11 out of the "
        "recipe's [matrix] python."
    )
    check_requires_python(tree, "3.12.0", "p-py3.12-linux-x86_64")
    check_requires_python(tree, "3.13.0rc1", "p-py3.13-linux-x86_64")  # a prerelease is in


def test_a_constraint_that_is_no_specifier_is_left_to_the_backend(tmp_path: Path) -> None:
    tree = _tree(tmp_path, '[project]\nname = "p"\nrequires-python = "three point twelve"\n')
    check_requires_python(tree, "3.11.7", "p-py3.11-linux-x86_64")


def test_metadata_that_is_no_small_regular_file_is_not_read(tmp_path: Path) -> None:
    # A source is untrusted: a link to /dev/zero would never end.
    tree = tmp_path / "pkg"
    tree.mkdir()
    (tree / "pyproject.toml").symlink_to("/dev/zero")
    (tree / "PKG-INFO").write_text("Requires-Python: >=3.12\n" + "x" * (2 << 20))
    assert read_constraint(tree) is None


_SETUP_PY = """\
from setuptools import setup
import setuptools

VERSION = "1.0"
setuptools.setup(
    name="p",
    version=VERSION,
    python_requires=">=3.12",
    ext_modules=[],
)
"""


def test_a_checkout_says_it_in_setup_py_which_is_read_never_run(tmp_path: Path) -> None:
    tree = _tree(tmp_path, '[build-system]\nrequires = ["setuptools"]\n')
    (tree / "setup.py").write_text('raise SystemExit("setup.py was run")\n' + _SETUP_PY)
    (tree / "setup.cfg").write_text("[options]\npython_requires = >=3.8\n")
    assert read_constraint(tree) == Constraint(
        ">=3.12", f"{tree / 'setup.py'}: setup(python_requires=...)"
    )
    with pytest.raises(BuildError) as refused:
        check_requires_python(tree, "3.11.7", "p-py3.11-linux-x86_64")
    assert refused.value.message.startswith(
        f"The package supports Python >=3.12 ({tree / 'setup.py'}: setup(python_requires=...)); "
    )


def test_else_setup_cfg_says_it(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    (tree / "setup.py").write_text("from setuptools import setup\nsetup(python_requires=computed())\n")
    (tree / "setup.cfg").write_text("[metadata]\nname = p\n\n[options]\npython_requires = >=3.12\n")
    assert read_constraint(tree) == Constraint(
        ">=3.12", f"{tree / 'setup.cfg'}: [options] python_requires"
    )


@pytest.mark.parametrize(
    "setup_py",
    [
        "setup(python_requires=PYTHONS)\n",  # computed: only running it would tell
        "def setup(**kw): pass\nsetup(name='p'\n",  # does not parse
        "setup(name='p')\n" + "(" * 200_000,  # nests past the parser's limits
        "other(python_requires='>=3.12')\n",  # not setup()
    ],
)
def test_a_setup_py_that_states_no_literal_is_not_read_further(tmp_path: Path, setup_py: str) -> None:
    tree = _tree(tmp_path)
    (tree / "setup.py").write_text(setup_py)
    (tree / "setup.cfg").write_text("[options\nbroken")
    assert read_constraint(tree) is None


def test_a_project_table_keeps_setuptools_files_out_unless_it_is_dynamic(tmp_path: Path) -> None:
    tree = _tree(tmp_path, '[project]\nname = "p"\n')
    (tree / "setup.py").write_text("from setuptools import setup\nsetup(python_requires='>=3.12')\n")
    assert read_constraint(tree) is None
    (tree / "pyproject.toml").write_text('[project]\nname = "p"\ndynamic = ["requires-python"]\n')
    assert read_constraint(tree) == Constraint(
        ">=3.12", f"{tree / 'setup.py'}: setup(python_requires=...)"
    )
