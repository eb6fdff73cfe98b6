"""A setuptools extension linked with mold through kiln's build.linker wiring."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheelkiln.builder.linker import linker_environment

pytestmark = pytest.mark.compile

MODULE = r"""
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "linked", "", -1, methods};
PyMODINIT_FUNC PyInit_linked(void) { return PyModule_Create(&module); }
"""


@pytest.mark.skipif(shutil.which("ld.mold") is None, reason="mold is not installed")
def test_setuptools_extension_links_with_mold(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    (tmp_path / "linked.c").write_text(MODULE)
    (tmp_path / "setup.py").write_text(
        "from setuptools import Extension, setup\n"
        "setup(name='linked', ext_modules=[Extension('linked', ['linked.c'])])\n"
    )
    env = {**os.environ, **linker_environment("mold", "setuptools", os.environ)}
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp_path, env=env, check=True, capture_output=True,
    )  # fmt: skip
    (built,) = tmp_path.glob("linked*.so")
    comment = subprocess.run(
        ["readelf", "-p", ".comment", str(built)], capture_output=True, text=True, check=True
    ).stdout
    assert "mold" in comment, comment
    answer = subprocess.run(
        [sys.executable, "-c", "import linked; print(linked.answer())"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert answer.strip() == "42"
