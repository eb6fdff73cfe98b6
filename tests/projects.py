"""Test projects generated on demand: the packages and recipes integration tests build.

Each test used to write its own inline package. A :class:`Project` is a set of files
plus the recipe that builds it; tests start from a generator below (a setuptools C
extension, a CMake C library, a pure-Python backend) and add or replace files, so what
every test builds is visible in one place and costs the same everywhere.

    project = c_extension("remote-demo", tus=4)
    tree, recipe = project.generate(tmp_path, cache={"backend": "ccache"})
    total = project.expected  # what the module's total() returns
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PYPROJECT_SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
    '[project]\nname = "{name}"\nversion = "0.1"\n'
)


@dataclass
class Project:
    """Files relative to the project root, and what its recipe says besides the source."""

    name: str
    files: dict[str, str] = field(default_factory=dict)
    recipe: dict[str, Any] = field(default_factory=dict)
    expected: Any = None
    """What the built module computes (the generator's own promise), if anything."""

    def with_files(self, **files: str) -> Project:
        """A copy with *files* added or replaced (keys use ``__`` for ``/``)."""
        merged = dict(self.files)
        merged.update({key.replace("__", "/"): text for key, text in files.items()})
        return Project(self.name, merged, dict(self.recipe), self.expected)

    def write_tree(self, root: Path) -> Path:
        """Writes the files under ``root/<name>`` and returns that directory."""
        tree = root / self.name
        for relative, text in self.files.items():
            path = tree / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        tree.mkdir(parents=True, exist_ok=True)
        return tree

    def write_recipe(self, tree: Path, path: Path | None = None, **sections: Mapping[str, Any]) -> Path:
        """The recipe ``<tree>/../<name>.toml``: the project's sections, then *sections*
        (merged key by key), with ``[source] path`` pointing at *tree*."""
        merged: dict[str, dict[str, Any]] = {"source": {"path": str(tree)}}
        for name, values in [*self.recipe.items(), *sections.items()]:
            merged.setdefault(name, {}).update(values)
        recipe = path or tree.parent / f"{self.name}.toml"
        recipe.write_text(recipe_toml(self.name, merged))
        return recipe

    def generate(self, root: Path, **sections: Mapping[str, Any]) -> tuple[Path, Path]:
        """Writes the tree and its recipe under *root*: ``(tree, recipe)``."""
        tree = self.write_tree(root)
        return tree, self.write_recipe(tree, **sections)


def recipe_toml(name: str, sections: Mapping[str, Mapping[str, Any]]) -> str:
    """A recipe in TOML. Values are strings, numbers, booleans, lists of those, or
    inline tables of strings (JSON's quoting is valid TOML for these)."""
    lines = [f"name = {json.dumps(name)}"]
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(value)


def c_extension(name: str, tus: int = 4, *, module: str | None = None) -> Project:
    """A setuptools package with one C extension module ``<module>._core`` built from
    *tus* C files: ``src/core.c`` and ``src/part1.c``..``src/part<tus-1>.c``. The
    module's ``total()`` returns the sum of ``part<i>() = 10 * i`` (``expected``)."""
    module = module or name.replace("-", "_")
    parts = [f"src/part{i}.c" for i in range(1, tus)]
    declarations = "".join(f"int part{i}(void);\n" for i in range(1, tus))
    total = " + ".join(f"part{i}()" for i in range(1, tus)) or "0"
    files = {
        "pyproject.toml": PYPROJECT_SETUPTOOLS.format(name=name),
        "setup.py": (
            "from setuptools import setup, Extension\n"
            f"setup(ext_modules=[Extension('{module}._core', ['src/core.c', *{parts!r}])],\n"
            f"      packages=['{module}'], package_dir={{'': 'src'}})\n"
        ),
        f"src/{module}/__init__.py": f"from {module}._core import total\n",
        "src/core.c": (
            "#include <Python.h>\n" + declarations
            + "static PyObject *total(PyObject *m, PyObject *a) "
            f"{{ return PyLong_FromLong({total}); }}\n"
            'static PyMethodDef methods[] = {{"total", total, METH_NOARGS, 0}, {0}};\n'
            'static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", 0, -1, methods};\n'
            "PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&module); }\n"
        ),
    }
    for i in range(1, tus):
        files[f"src/part{i}.c"] = f"int part{i}(void) {{ return {i * 10}; }}\n"
    return Project(name, files, expected=sum(10 * i for i in range(1, tus)))


def pybind11_extension(name: str, tus: int = 3) -> Project:
    """A setuptools package whose C++ TUs include a header from a build requirement in
    the build environment: ``src/part1.cpp``..``src/part<tus-1>.cpp`` include pybind11's
    ``detail/common.h`` (by ``pybind11.get_include()``), its cheapest header to compile
    (about a second, where ``pybind11.h`` costs seven here), and return
    ``part<i>() = 10 * i``; ``src/core.cpp`` is a plain C-API module whose ``total()``
    returns their sum (``expected``)."""
    module = name.replace("-", "_")
    parts = [f"src/part{i}.cpp" for i in range(1, tus)]
    declarations = "".join(f'extern "C" int part{i}();\n' for i in range(1, tus))
    total = " + ".join(f"part{i}()" for i in range(1, tus)) or "0"
    files = {
        "pyproject.toml": (
            '[build-system]\nrequires = ["setuptools>=64", "pybind11>=2.12"]\n'
            'build-backend = "setuptools.build_meta"\n'
            f'[project]\nname = "{name}"\nversion = "0.1"\n'
        ),
        "setup.py": (
            "import pybind11\n"
            "from setuptools import setup, Extension\n"
            f"setup(ext_modules=[Extension('{module}._core', ['src/core.cpp', *{parts!r}],\n"
            "                             include_dirs=[pybind11.get_include()],\n"
            "                             language='c++')],\n"
            f"      packages=['{module}'], package_dir={{'': 'src'}})\n"
        ),
        f"src/{module}/__init__.py": f"from {module}._core import total\n",
        "src/core.cpp": (
            "#include <Python.h>\n" + declarations
            + "static PyObject *total(PyObject *, PyObject *) "
            f"{{ return PyLong_FromLong({total}); }}\n"
            'static PyMethodDef methods[] = {{"total", total, METH_NOARGS, 0}, {0}};\n'
            'static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", 0, -1, methods};\n'
            'extern "C" PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&module); }\n'
        ),
    }
    for i in range(1, tus):
        files[f"src/part{i}.cpp"] = (
            "#include <pybind11/detail/common.h>\n"
            f'extern "C" int part{i}() {{ return PYBIND11_VERSION_MAJOR > 0 ? {i * 10} : 0; }}\n'
        )
    return Project(name, files, expected=sum(10 * i for i in range(1, tus)))


def setup_py_only(name: str, setup_py: str) -> Project:
    """A legacy setuptools package: a ``setup.py`` and nothing else (no pyproject.toml),
    for tests whose point is what ``setup.py`` sees while it runs."""
    return Project(name, {"setup.py": setup_py})


def cmake_c(name: str, cmakelists: str, sources: Mapping[str, str]) -> Project:
    """A plain CMake project: *cmakelists* and its C sources, for tests that run CMake
    under kiln's launchers without a Python build backend."""
    return Project(name, {"CMakeLists.txt": cmakelists, **sources})
