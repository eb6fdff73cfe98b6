"""What a real `kiln build` hands the package's build: the recipe's placeholders filled
in with the cell's build environment, the job count by its precedence, and none of the
caller's compiler-cache settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import Kiln
from tests.projects import setup_py_only

SETUP_PY = '''
import json, os
from setuptools import setup

names = ["NCCL_ROOT", "ENV_ROOT", "MAX_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL", "CCACHE_DISABLE",
         "CCACHE_SLOPPINESS", "CCACHE_CONFIGPATH"]
os.makedirs("envseen", exist_ok=True)
with open(os.path.join("envseen", "__init__.py"), "w") as handle:
    handle.write("SEEN = %r\\n" % json.dumps({name: os.environ.get(name) for name in names}))
setup(name="envseen", version="0.1", packages=["envseen"])
'''
PROJECT = setup_py_only("envseen", SETUP_PY)


def test_build_sees_placeholders_jobs_and_no_foreign_cache_settings(
    kiln: Kiln, tmp_path: Path, installed: Any
) -> None:
    _, recipe = PROJECT.generate(tmp_path, build={"env": {
        "NCCL_ROOT": "{site_packages}/nvidia/nccl", "ENV_ROOT": "{build_env}", "MAX_JOBS": "7",
    }})  # fmt: skip
    result = kiln(
        "build", recipe, "--jobs", "3", "--out", tmp_path / "out", "--workdir", tmp_path / "w",
        "--cache-dir", tmp_path / "cache", "--no-wheel-cache", "--json",
        env={"CCACHE_DISABLE": "1", "CCACHE_SLOPPINESS": "time_macros", "MAX_JOBS": "9"},
    )  # fmt: skip
    report = json.loads(result.stdout)
    seen = json.loads(installed(report["wheel"]["path"], "import envseen; print(envseen.SEEN)"))
    # The build sees its environment through the workdir (the record names the real one).
    build_env = (tmp_path / "w").resolve() / ".envs" / Path(report["build_env"]).name
    assert build_env.resolve() == Path(report["build_env"])
    site = next(build_env.glob("lib/python3*/site-packages"))
    assert seen == {
        "NCCL_ROOT": f"{site}/nvidia/nccl",
        "ENV_ROOT": str(build_env),
        "MAX_JOBS": "3",  # --jobs over the recipe's MAX_JOBS and the caller's
        "CMAKE_BUILD_PARALLEL_LEVEL": "3",
        "CCACHE_DISABLE": None,
        "CCACHE_SLOPPINESS": "include_file_ctime",  # kiln's, not the caller's
        "CCACHE_CONFIGPATH": "/dev/null",
    }


def test_an_unknown_placeholder_is_a_recipe_error(kiln: Kiln, tmp_path: Path) -> None:
    _, recipe = PROJECT.generate(tmp_path, build={"env": {"NCCL_ROOT": "{buildenv}/nccl"}})
    result = kiln("build", recipe, "--workdir", tmp_path / "w", "--no-wheel-cache", check=False)
    assert result.returncode == 2
    assert f"{recipe}: build.env.NCCL_ROOT uses the placeholder {{buildenv}}" in result.stderr
    assert "Traceback" not in result.stderr
