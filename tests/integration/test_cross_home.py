"""Builders whose KILN_HOMEs differ share compiler-cache entries.

A build environment lives under ``$KILN_HOME/envs/<key>``, and its path reaches the host
TUs' command lines (``pybind11.get_include()``, setuptools' ``<env>/include``) and the
dependency files the cache keeps. Two machines, users or Dask workers with different
homes used to miss each other's entries for every TU that includes from the environment
(``src/part*.cpp`` here, which include pybind11's headers). Builds now see the environment through ``<workdir>/.envs``,
which the cache writes relative to the compile.

Home A builds cold with its default workdir (inside the home); home B, at another depth,
builds with a ``--workdir`` outside its home, also at another depth. They share only the
cache directory. Each makes its own environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln
from tests.projects import pybind11_extension
from wheelkiln.cache.backend import CacheConfig, scrub_cache_settings
from wheelkiln.cache.registry import make_backend

pytestmark = pytest.mark.compile

PROJECT = pybind11_extension("xhome-demo", tus=3)
TUS = ["src/core.cpp", "src/part1.cpp", "src/part2.cpp"]


def build(home: Path, recipe: Path, out: Path, *args: str | Path) -> dict[str, Any]:
    kiln = Kiln(home, home.parent / f"{home.name}-state")
    record: dict[str, Any] = json.loads(
        kiln("build", recipe, "--out", out, "--no-wheel-cache", "--json", *args).stdout
    )
    return record


@pytest.mark.parametrize(
    "backend",
    # sccache: opt-in, the CI budget holds one of the two (each about 20 s of 2 cores)
    ["ccache", pytest.param("sccache", marks=pytest.mark.slow)],
)
def test_a_build_in_another_home_hits_every_tu(backend: str, tmp_path: Path) -> None:
    _, recipe = PROJECT.generate(tmp_path, cache={"backend": backend})
    cache = ("--cache-dir", tmp_path / "cache")
    home_a, home_b = tmp_path / "a", tmp_path / "bb" / "deeper" / "home"

    cold = build(home_a, recipe, tmp_path / "out-a", *cache)
    hot = build(home_b, recipe, tmp_path / "out-b", *cache,
                "--workdir", tmp_path / "elsewhere" / "work")  # fmt: skip

    # Two environments, one per home, of one key.
    assert Path(cold["build_env"]).parent == home_a / "envs"
    assert Path(hot["build_env"]).parent == home_b / "envs"
    assert Path(cold["build_env"]).name == Path(hot["build_env"]).name
    assert (cold["cache"]["misses"], cold["cache"]["hits"]) == (len(TUS), 0), cold["cache"]
    assert (hot["cache"]["hits"], hot["cache"]["misses"]) == (len(TUS), 0), hot["cache"]
    if backend == "ccache":  # sccache does not say which TU hit
        assert sorted(cold["cache"]["missed_tus"]) == TUS
    # The wheel built from the other home's entries works (unpacked: pip costs seconds)
    # and, with ccache, names neither home nor workdir, not even in its debug info
    # (setuptools: -g). sccache hashes the prefix map's value, so kiln adds none there.
    with zipfile.ZipFile(next((tmp_path / "out-b").glob("*.whl"))) as wheel:
        wheel.extractall(tmp_path / "site")
    extension = next((tmp_path / "site" / "xhome_demo").glob("_core*.so")).read_bytes()
    assert b".debug_info" in extension
    assert (str(tmp_path).encode() in extension) == (backend == "sccache")
    assert _total(tmp_path, "xhome_demo") == PROJECT.expected


def _total(tmp_path: Path, module: str) -> int:
    """*module*.total() from the wheel unpacked in ``tmp_path/site``."""
    answer = subprocess.run(
        [sys.executable, "-c", f"import {module}; print({module}.total())"],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}, cwd=tmp_path,
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return int(answer)


MESON_PROJECT = pybind11_extension("xhome-meson", tus=3).with_files(
    **{
        "pyproject.toml": (
            '[build-system]\nrequires = ["meson-python>=0.15", "meson>=1.2", "ninja", "pybind11>=2.12"]\n'
            'build-backend = "mesonpy"\n[project]\nname = "xhome-meson"\nversion = "0.1"\n'
        ),
        "setup.py": "",
        "meson.build": (
            "project('xhome-meson', 'cpp', version: '0.1')\n"
            "py = import('python').find_installation(pure: false)\n"
            "pybind11 = dependency('pybind11')\n"
            "py.extension_module('_core', 'src/core.cpp', 'src/part1.cpp', 'src/part2.cpp',\n"
            "  dependencies: [pybind11], install: true, subdir: 'xhome_meson')\n"
            "py.install_sources('src/xhome_meson/__init__.py', subdir: 'xhome_meson')\n"
        ),
    }
)


def test_a_meson_build_that_asks_pybind11_config_hits_every_tu_from_another_home(
    tmp_path: Path,
) -> None:
    """meson finds pybind11 by running the environment's ``pybind11-config`` script,
    which prints pybind11's include directory as its Python sees it. The script now runs
    the Python of the job's view of the environment (``<workdir>/.envs``), where uv's
    relocatable script ran that of ``$KILN_HOME/envs``: every TU that includes from
    pybind11 missed in another home (contourpy: 14 of 14)."""
    _, recipe = MESON_PROJECT.generate(tmp_path)
    cache = ("--cache-dir", tmp_path / "cache")
    home_a, home_b = tmp_path / "a", tmp_path / "bb" / "deeper" / "home"
    cold = build(home_a, recipe, tmp_path / "out-a", *cache)
    hot = build(home_b, recipe, tmp_path / "out-b", *cache, "--workdir", tmp_path / "elsewhere" / "work")
    assert Path(cold["build_env"]).name == Path(hot["build_env"]).name
    assert "pybind11-config found: YES" in (Path(hot["log"]).parent / "build" / "meson-logs"
                                            / "meson-log.txt").read_text()  # fmt: skip
    assert (cold["cache"]["misses"], cold["cache"]["hits"]) == (len(TUS), 0), cold["cache"]
    assert (hot["cache"]["hits"], hot["cache"]["misses"]) == (len(TUS), 0), hot["cache"]
    with zipfile.ZipFile(next((tmp_path / "out-b").glob("*.whl"))) as wheel:
        wheel.extractall(tmp_path / "site")
    assert _total(tmp_path, "xhome_meson") == MESON_PROJECT.expected


def test_sccache_keys_name_no_job_directory(tmp_path: Path) -> None:
    """sccache strips a base directory's prefix (ccache writes the path relative to the
    compile): with the workdir alone, a TU that CMake compiles by absolute path kept its
    job's directory name in the key, and the link job missed what a shard stored."""
    work, outcomes = tmp_path / "work", []
    for job in ("demo-py3.11-linux-x86_64-shard-0of2", "demo-py3.11-linux-x86_64-link"):
        source = work / job / "src" / "x.c"
        source.parent.mkdir(parents=True)
        (source.parent / "x.h").write_text("#define X 3\n")
        source.write_text('#include "x.h"\nint f(void) { return X; }\n')
        (work / job / "build").mkdir()
        outcomes.append(compile_in_job("sccache", tmp_path / "cache", work, job,
                                       ["gcc", "-c", str(source), "-o", "x.o"], "build"))  # fmt: skip
    assert outcomes == [(0, 1), (1, 0)]


def compile_in_job(
    name: str, cache: Path, work: Path, job: str, argv: list[str], cwd: str
) -> tuple[int, int]:
    """One compile through kiln's *name* backend as job *job* under *work* runs it, in
    ``<job>/<cwd>``: (hits, misses)."""
    backend = make_backend(name, CacheConfig(cache_dir=cache, base_dir=work, job_dir=work / job))
    assert backend is not None
    backend.start()
    try:
        backend.zero_stats()
        subprocess.run(
            [backend.executable(), *argv],
            env={**scrub_cache_settings(os.environ), **backend.environment()},
            cwd=work / job / cwd, check=True, capture_output=True,
        )  # fmt: skip
        stats = backend.stats()
    finally:
        backend.stop()
    return stats.hits, stats.misses


def test_shard_and_link_compiles_map_the_job_directory_in_debug_info(tmp_path: Path) -> None:
    """The CC/CXX fronts add -fdebug-prefix-map=<job>=. in both jobs (ccache hashes that
    the option is there, so shards and link job must agree), and nothing without one."""
    from wheelkiln.builder.toolchain import DEBUG_PREFIX, Launch, toolchain_environment

    cache = tmp_path / "fake-ccache"
    cache.write_text("#!/bin/sh\nprintf '[%s]' cache \"$@\"\n")  # one [] per argument
    cache.chmod(0o755)
    shard = toolchain_environment(Launch(str(cache), seat_wrapper=True), "setuptools",
                                  tmp_path / "shard" / "kiln-bin", scripts_dir=tmp_path / "bin")
    link = toolchain_environment(Launch(str(cache)), "setuptools", tmp_path / "link" / "kiln-bin",
                                 scripts_dir=tmp_path / "bin")  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    seat = {"KILN_CACHE": str(cache), "KILN_SHARD_LOG": str(tmp_path / "seat.jsonl"),
            "KILN_PACKAGE_ROOT": str(tmp_path)}  # fmt: skip
    job = tmp_path / "work dir" / "cell-link"  # a space stays one argument
    seen = []
    for env in ({**base, **link}, {**base, **shard, **seat}):
        for prefix in ({DEBUG_PREFIX: str(job)}, {}):
            seen.append(subprocess.run(
                [env["CXX"], "-c", "x.cpp", "-o", "x.o"], env={**env, **prefix}, cwd=tmp_path,
                capture_output=True, text=True, check=True,
            ).stdout.strip())  # fmt: skip
    plain = "[cache][g++][-c][x.cpp][-o][x.o]"
    assert seen == [f"{plain}[-fdebug-prefix-map={job}=.]", plain] * 2


@pytest.mark.parametrize("name", ["ccache", "sccache"])
def test_no_job_gets_the_object_of_another_whose_header_differs(
    tmp_path: Path, name: str
) -> None:
    """Two job directories (two cells' trees, or a shard of one run and the link job of
    the next after an edit) hold one source whose header, found by a relative -I as
    setuptools passes it, differs. Each must get its own object, and a third compile
    like the first hits. (sccache's preprocessor cache mode gave the second the first
    one's object: mozilla/sccache#2863; kiln turns that mode off.)"""
    work, outcomes, objects = tmp_path / "work", [], []
    for job, value in (("a-py3.11-linux-x86_64", 4), ("b-py3.11-linux-x86_64", 8),
                       ("a-py3.11-linux-x86_64", 4)):  # fmt: skip
        tree = work / job / "src"
        (tree / "inc").mkdir(parents=True, exist_ok=True)
        (tree / "inc" / "cfg.h").write_text(f"#define VALUE {value}\n")
        (tree / "x.c").write_text('#include "cfg.h"\nint f(void) { return VALUE; }\n')
        argv = ["gcc", "-O2", "-Iinc", "-c", "x.c", "-o", "x.o"]
        outcomes.append(compile_in_job(name, tmp_path / "cache", work, job, argv, "src"))
        objects.append((tree / "x.o").read_bytes())
    assert outcomes == [(0, 1), (0, 1), (1, 0)]
    assert objects[0] != objects[1] and objects[0] == objects[2]
