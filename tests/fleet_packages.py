"""Small generated C packages for fleet-run tests: two recipes whose builds take a second
or two of real compiling each, so a sampler sees the CPU busy."""

from __future__ import annotations

from pathlib import Path

PYPROJECT = """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"
[project]
name = "{name}"
version = "0.1"
"""

SETUP = """
from setuptools import setup, Extension
setup(ext_modules=[Extension("{module}._work", [{sources}], extra_compile_args=["-O2"])],
      packages=["{module}"], package_dir={{"": "src"}})
"""

MODULE = """
#include <Python.h>
{declarations}
static PyObject *total(PyObject *self, PyObject *args) {{
    long sum = 0;
{calls}
    return PyLong_FromLong(sum);
}}
static PyMethodDef methods[] = {{{{"total", total, METH_NOARGS, 0}}, {{0}}}};
static struct PyModuleDef m = {{PyModuleDef_HEAD_INIT, "_work", 0, -1, methods}};
PyMODINIT_FUNC PyInit__work(void) {{ return PyModule_Create(&m); }}
"""


def _unit(index: int, functions: int) -> str:
    """A TU that takes the optimizer a while: many small functions with loops to unroll."""
    body = []
    for f in range(functions):
        body.append(
            f"long f{index}_{f}(long n) {{ long a = {f}; "
            f"for (long i = 0; i < n; ++i) {{ a = a * 3 + (i ^ {f}); if (a > 1000003) a %= 1000003; }}"
            f" return a; }}"
        )
    body.append(f"long unit{index}(void) {{ long s = 0;"
                + "".join(f" s += f{index}_{f}({f % 7 + 1});" for f in range(functions))
                + " return s; }")
    return "\n".join(body) + "\n"


def expected_total(units: int, functions: int) -> int:
    def f(seed: int, n: int) -> int:
        a = seed
        for i in range(n):
            a = a * 3 + (i ^ seed)
            if a > 1000003:
                a %= 1000003
        return a

    return units * sum(f(k, k % 7 + 1) for k in range(functions))


def write_package(root: Path, name: str, *, units: int = 3, functions: int = 400) -> Path:
    """A setuptools package ``name`` with ``units`` TUs; returns its recipe's path."""
    module = name.replace("-", "_")
    tree = root / name
    (tree / "src" / module).mkdir(parents=True)
    (tree / "src" / module / "__init__.py").write_text("")
    sources = [f"src/unit{i}.c" for i in range(units)] + ["src/module.c"]
    (tree / "pyproject.toml").write_text(PYPROJECT.format(name=name))
    (tree / "setup.py").write_text(SETUP.format(
        module=module, sources=", ".join(f'"{s}"' for s in sources)))
    for i in range(units):
        (tree / f"src/unit{i}.c").write_text(_unit(i, functions))
    (tree / "src/module.c").write_text(MODULE.format(
        declarations="\n".join(f"long unit{i}(void);" for i in range(units)),
        calls="\n".join(f"    sum += unit{i}();" for i in range(units))))
    recipe = root / f"{name}.toml"
    recipe.write_text(
        f'name = "{name}"\n[source]\npath = "{tree}"\n[verify]\nimport = "{module}"\n'
        f'extension_modules = ["{module}/_work*.so"]\n'
    )
    return recipe
