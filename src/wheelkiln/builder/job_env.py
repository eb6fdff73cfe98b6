"""The environment a build job hands to the package's build: what kiln keeps from the
caller's, what the recipe's ``build.env`` adds (with placeholders into the build
environment), and how many compile jobs every backend is told to run.

A compiler cache keys a compile by its command line, its inputs and a short list of
environment variables; anything else in the environment that changes the compiler's
output can serve a stale object. The audit behind :data:`SCRUBBED`, checked against
ccache 4.14's source (``hash_common_info``, ``get_manifest_key``) and with real
compiles in ``tests/integration/test_env_key.py``:

* ``CPATH``, ``C_INCLUDE_PATH``, ``CPLUS_INCLUDE_PATH`` (and the Objective-C ones):
  ccache hashes them in direct and depend mode, and preprocessor mode sees their
  effect. Kept.
* ``GCC_EXEC_PREFIX``, ``COMPILER_PATH``: ccache hashes them for every compile. Kept.
* ``LIBRARY_PATH``: read by links only, which no cache stores; a compile's object
  does not depend on it. Kept.
* ``SOURCE_DATE_EPOCH``: kiln sets it for every build; ccache hashes it (with the
  date) for sources that use ``__DATE__``/``__TIME__``.
* ``NVCC_PREPEND_FLAGS``, ``NVCC_APPEND_FLAGS``, ``NVCC_CCBIN``: read by nvcc, hashed
  by no cache. kiln's nvcc launcher moves them onto the command line per call
  (:data:`wheelkiln.cache.launch.NVCC_ENV_FLAGS`).
* ``DEPENDENCIES_OUTPUT``, ``SUNPRO_DEPENDENCIES``: make gcc write a dependency file
  beside every compile; ccache refuses to cache any compile while one is set
  (``unsupported_environment_variable``), so a sharded build would compile everything
  again in its link job without a single miss to show for it. Removed.
* ``CCACHE_*`` and ``SCCACHE_*`` from the caller: ``CCACHE_DISABLE``, ``CCACHE_RECACHE``,
  ``CCACHE_NODEPEND``, ``CCACHE_SLOPPINESS``, ``CCACHE_BASEDIR``, ``CCACHE_DIR``,
  ``CCACHE_CONFIGPATH`` ... would override kiln's correctness settings or send entries
  elsewhere. Removed, except diagnostics and size limits
  (:data:`wheelkiln.cache.backend.USER_CACHE_SETTINGS_KEPT`); kiln then sets its own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wheelkiln.cache.backend import scrub_cache_settings
from wheelkiln.cache.launch import NvccEnvironmentError, nvcc_environment_args
from wheelkiln.errors import RecipeError, UsageError
from wheelkiln.recipe.load import PLACEHOLDER, check_recipe_env

SCRUBBED = (
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "PIP_REQUIRE_VIRTUALENV",
    "DEPENDENCIES_OUTPUT",
    "SUNPRO_DEPENDENCIES",
    # The cache the CC/CXX fronts compile through (builder/toolchain.py), which kiln sets
    # for each job that has one: one left in the caller's shell must not reach a job
    # that has none.
    "KILN_FRONT_CACHE",
    # Marks a compile one call of a shard started for another (shard/ahead.py): left in
    # the caller's shell, every compile of a shard would be logged as one and none claimed.
    "KILN_AHEAD_CHILD",
)
"""Caller's variables that never reach a build (besides foreign cache settings)."""


def inherited_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment as a build starts from it (see the module docstring)."""
    env = scrub_cache_settings(environ)
    for name in SCRUBBED:
        env.pop(name, None)
    return env


def check_nvcc_flags(env: Mapping[str, str]) -> None:
    """Refuse, before the build starts, nvcc flag variables that every nvcc call would
    refuse (:func:`wheelkiln.cache.launch.nvcc_environment_args`)."""
    try:
        nvcc_environment_args([], env)
    except NvccEnvironmentError as error:
        raise UsageError(
            str(error), hint="Change the variable in the environment you run kiln from."
        ) from None


# --------------------------------------------------------------------------- placeholders
# What a recipe's build.env may hold is checked where the recipe is loaded
# (wheelkiln.recipe.load.check_recipe_env), so `kiln recipe check` and a build agree.


def site_packages(build_env: Path) -> Path:
    """The site-packages directory of a build environment (a venv: one ``python3.X``)."""
    found = sorted(build_env.glob("lib/python3*/site-packages"))
    return found[0] if found else build_env / "lib" / "site-packages"


def placeholder_values(build_env: Path) -> dict[str, str]:
    return {"build_env": str(build_env), "site_packages": str(site_packages(build_env))}


def expand_recipe_env(
    env: Mapping[str, str], build_env: Path, recipe_path: Path | str
) -> dict[str, str]:
    """The recipe's ``build.env`` with its placeholders filled in for *build_env*.

    The build environment's path is a hash of its requirements and interpreter, so a
    recipe cannot spell it: ``CPATH = "{site_packages}/nvidia/nccl/include"`` says it
    for every cell. ``{{`` and ``}}`` stand for literal braces.
    """
    check_recipe_env(env, recipe_path)
    values = placeholder_values(build_env)

    def fill(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return values[match.group(1)]

    return {key: PLACEHOLDER.sub(fill, value) for key, value in env.items()}


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class JobCount:
    """How many compile jobs a build runs, and which setting said so."""

    jobs: int
    source: str
    """'--jobs', 'build.jobs', 'build.env.MAX_JOBS', 'MAX_JOBS in the environment' or
    'cores'."""


def resolve_jobs(
    cli_jobs: int | None,
    recipe_jobs: int | None,
    recipe_env: Mapping[str, str],
    environ: Mapping[str, str],
    recipe_path: Path | str = "recipe",
) -> JobCount:
    """The compile job count, by an explicit precedence (first that is set wins):

    1. the command line (``kiln build --jobs``; the local executor always passes it to
       its shard jobs, so the executor's plan holds);
    2. the recipe's ``build.jobs``;
    3. ``MAX_JOBS`` in the recipe's ``build.env``;
    4. ``MAX_JOBS`` in the environment kiln was started from;
    5. the machine's core count.

    Whichever wins is then given to every backend in the form it reads
    (:func:`jobs_environment`): a ``MAX_JOBS`` in the recipe no longer overrides
    ``--jobs`` behind its back.
    """
    if cli_jobs:
        return JobCount(cli_jobs, "--jobs")
    if recipe_jobs:
        return JobCount(recipe_jobs, "build.jobs")
    for text, source in (
        (recipe_env.get("MAX_JOBS"), "build.env.MAX_JOBS"),
        (environ.get("MAX_JOBS"), "MAX_JOBS in the environment"),
    ):
        if text is None or not text.strip():
            continue
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            where = f"{recipe_path}: build.env.MAX_JOBS" if source.startswith("build") else source
            raise RecipeError(
                f"{where} is {text!r}, not a positive number of jobs.",
                hint="Give a whole number ≥ 1, or leave it out and pass --jobs.",
            )
        return JobCount(value, source)
    return JobCount(os.cpu_count() or 1, "cores")


def jobs_environment(jobs: int) -> dict[str, str]:
    """The job count in every form a backend reads it.

    * ``MAX_JOBS``: torch.utils.cpp_extension's ninja build (and setup.py scripts that
      copied it);
    * ``CMAKE_BUILD_PARALLEL_LEVEL``: ``cmake --build`` (scikit-build-core, and setup.py
      scripts that drive CMake), which passes it to ninja or make as ``-j``.

    meson-python runs ninja itself; its ``-j`` is a ``compile-args`` config setting.
    """
    return {"MAX_JOBS": str(jobs), "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs)}
