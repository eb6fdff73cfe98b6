"""A package whose build backend copies its tree into a ``tempfile.TemporaryDirectory``
and builds there (frozenlist's, yarl's and propcache's in-tree backend does): the
transpile's key and the compile's paths held a random name, so another directory never
hit, and sharded, the link job failed its gate. The build's TMPDIR is the job's own temp
directory, where the site hook names temp files the same way in every job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln

pytestmark = pytest.mark.compile

BACKEND = '''\
import os
import shutil
import tempfile

from setuptools import build_meta as _setuptools



def get_requires_for_build_wheel(config_settings=None):
    return []  # what [build-system] requires is all (setup.py runs in the copy alone)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    wheel_directory = os.path.abspath(wheel_directory)
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix=".tmp-tmptree-pep517-") as tmp:
        copy = os.path.join(tmp, "src")
        shutil.copytree(here, copy)
        os.chdir(copy)
        try:
            return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
        finally:
            os.chdir(here)
'''

FILES = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools>=64", "Cython>=3"]\n'
        'backend-path = ["_backend"]\nbuild-backend = "tmptree_backend"\n'
        '[project]\nname = "tmptree"\nversion = "0.1"\n'
    ),
    "_backend/tmptree_backend.py": BACKEND,
    "setup.py": (
        "from setuptools import Extension, setup\nfrom Cython.Build import cythonize\n"
        "setup(packages=['tmptree'], ext_modules=cythonize("
        "[Extension('tmptree._calc', ['tmptree/_calc.pyx'])]))\n"
    ),
    "tmptree/__init__.py": "from tmptree._calc import answer\n",
    "tmptree/_calc.pyx": "def answer():\n    cdef int total = 40\n    return total + 2\n",
}


def _tree(root: Path) -> Path:
    tree = root / "tmptree"
    for name, text in FILES.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    return tree


def _recipe(tmp_path: Path) -> Path:
    recipe = tmp_path / "tmptree.toml"
    recipe.write_text(
        f'name = "tmptree"\n[source]\npath = "{_tree(tmp_path)}"\n[verify]\n'
        'extension_modules = ["tmptree/_calc*.so"]\n'
    )
    return recipe


def test_a_tree_built_in_a_temp_directory_hits_from_another_directory(
    kiln: Kiln, tmp_path: Path, installed: Any
) -> None:
    recipe = _recipe(tmp_path)
    records = {}
    for run in ("cold", "hot"):
        records[run] = kiln.json("build", recipe, "--out", tmp_path / f"out-{run}", "--workdir",
                                 tmp_path / f"work-{run}", "--cache-dir", tmp_path / "ccache",
                                 "--no-wheel-cache")  # fmt: skip
    cold, hot = records["cold"], records["hot"]
    assert (cold["cython"]["misses"], cold["cache"]["misses"]) == (1, 1)
    assert (hot["cython"]["hits"], hot["cython"]["misses"]) == (1, 0), hot["cython"]
    assert (hot["cache"]["hits"], hot["cache"]["misses"]) == (1, 0), hot["cache"]
    # The key names the temp copy by the job's temp directory and the same name in both.
    log = (Path(hot["log"]).parent / "cython.jsonl").read_text()
    assert '"source": "<tmp>/.tmp-tmptree-pep517-' in log
    assert installed(hot["wheel"]["path"], "import tmptree; print(tmptree.answer())") == "42"


def test_a_tree_built_in_a_temp_directory_shards_with_no_link_misses(
    kiln: Kiln, tmp_path: Path, installed: Any
) -> None:
    report = kiln.json("build", _recipe(tmp_path), "--shards", "2", "--out", tmp_path / "out",
                       "--workdir", tmp_path / "work")  # fmt: skip
    link = report["link"]
    assert link["link"]["gate"]["passed"], link["link"]["gate"]
    assert (link["cache"]["misses"], link["cache"]["hits"]) == (0, 1)
    assert (link["cython"]["misses"], link["cython"]["hits"]) == (0, 1)
    assert installed(link["wheel"]["path"], "import tmptree; print(tmptree.answer())") == "42"
