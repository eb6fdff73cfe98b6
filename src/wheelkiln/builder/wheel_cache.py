"""A wheel cache keyed by a cell's input digest: identical inputs skip the whole build.

The input digest covers everything that can change the wheel's bytes: the source tree
(content digest), the recipe (its full validated model), the cell, the build
environment (its key, which names the interpreter, and its ``pip freeze``), the tool
versions (compiler, nvcc, cmake, cache, wheelkiln) and the build-affecting environment
variables, ``SOURCE_DATE_EPOCH`` among them (it sets the timestamps inside the wheel).
Missing one of these would serve a wheel built from other inputs, so the list errs on
the side of including.

Entries are ``ROOT/<2 hex>/<digest>/`` holding the wheel under its own file name and
``record.json`` (the build record, plus ``input_digest``). An entry is written in a
temporary directory and renamed into place, so a reader sees a whole entry or none; a
lookup checks the wheel's sha256 against the record and drops an entry that does not
match instead of serving it.

Only full builds belong here: a shard job's wheel (stub objects) never does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheelkiln.builder.cmake_id import (
    COMPILER_VARIABLES,
    JOB_VARIABLES,
    READ_PREFIXES,
    READ_VARIABLES,
)
from wheelkiln.digest import sha256_file
from wheelkiln.paths import wheel_cache_dir

if TYPE_CHECKING:
    from wheelkiln.builder.cell import BuildOutcome
    from wheelkiln.builder.environment import BuildEnvironment
    from wheelkiln.builder.toolchain import Toolchain
    from wheelkiln.cells import Cell
    from wheelkiln.recipe.load import LoadedRecipe
    from wheelkiln.settings import BuildOptions

DIGEST_VERSION = 3
"""Bumped when what goes into the digest changes, so old entries stop matching."""

MESON_PROGRAM_VARIABLES = ("CC", "CXX", "NVCC", "OBJC", "OBJCXX", "FC", "CYTHON", "RUSTC")
"""Where meson reads a language's compiler; ``<name>_LD`` names its linker."""
BUILD_AFFECTING_ENV = (
    # CMake's compilers, flags and architectures, the compiler drivers' search paths and
    # nvcc's options: the identification's list (cmake_id), which shares the drivers'.
    *COMPILER_VARIABLES, *READ_VARIABLES,
    # setuptools (sysconfig's customize_compiler) and meson: tools, flags, linkers and
    # where pkg-config looks.
    "CPP", "CPPFLAGS", "LDSHARED", "LDCXXSHARED", "AR", "ARFLAGS", "STRIP", "CUFLAGS",
    "CYTHONFLAGS", *(f"{name}_LD" for name in MESON_PROGRAM_VARIABLES), "NVCC", "CYTHON",
    "PKG_CONFIG", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "PKG_CONFIG_SYSROOT_DIR",
    "ARCHFLAGS", "_PYTHON_HOST_PLATFORM",
    # torch's extension builder and packages built with it.
    "TORCH_CUDA_ARCH_LIST", "PYTORCH_NVCC", "PYTORCH_ROCM_ARCH", "ROCM_HOME", "CUDNN_HOME",
    "NVCC_FLAGS", "NVCC_THREADS",
    "SOURCE_DATE_EPOCH",
)  # fmt: skip
"""Environment variables read by compilers and build backends that change the output."""
BUILD_AFFECTING_PREFIXES = READ_PREFIXES
"""``CMAKE_*``, ``CUDA_*`` (``CUDA_HOME`` and the toolkit's other roots) and
``SKBUILD_*`` (scikit-build-core's settings) variables: all keyed but the ones below."""
NOT_BUILD_AFFECTING = (
    *JOB_VARIABLES, "CMAKE_BUILD_PARALLEL_LEVEL", "CMAKE_INSTALL_PARALLEL_LEVEL",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING",
    "CUDA_CACHE_DISABLE", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_PATH",
)  # fmt: skip
"""Variables under those prefixes that set how a build runs (its parallelism, the job's
directory, which GPU runs) or how a program runs on a GPU, never what is built; with
them keyed, every fleet job would miss every other's wheels. Compiler launchers are left
out too (a launcher caches; it does not change the object)."""


def build_affecting_env(
    environ: Mapping[str, str], *, source_date_epoch: int, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The part of an environment that goes into the input digest."""
    chosen = {
        name: value
        for name, value in environ.items()
        if (name in BUILD_AFFECTING_ENV or name.startswith(BUILD_AFFECTING_PREFIXES))
        and name not in NOT_BUILD_AFFECTING
        and not name.endswith(("_COMPILER_LAUNCHER", "_LINKER_LAUNCHER"))
    }
    chosen.update(extra or {})
    chosen["SOURCE_DATE_EPOCH"] = str(source_date_epoch)
    return chosen


def input_digest(
    source_digest: str,
    recipe_json: str,
    cell_id: str,
    build_env_freeze: str,
    tool_versions: Mapping[str, str],
    env: Mapping[str, str],
) -> str:
    """sha256 over every input of one cell's build (canonical JSON, sorted keys)."""
    blob = json.dumps(
        {
            "version": DIGEST_VERSION,
            "source": source_digest,
            "recipe": recipe_json,
            "cell": cell_id,
            "build_env": build_env_freeze,
            "tools": dict(tool_versions),
            "env": dict(env),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _cell_digest(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    source_digest: str,
    environment: BuildEnvironment,
    versions: Mapping[str, str],
) -> str:
    from wheelkiln.builder.job_env import expand_recipe_env

    recipe = loaded.recipe
    # The recipe's env as the build sees it: {build_env} and {site_packages} filled in.
    recipe_env = expand_recipe_env(recipe.build.env, environment.path, loaded.path)
    env = {**os.environ, **recipe_env}
    if cell.arch_list and "TORCH_CUDA_ARCH_LIST" not in env:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(cell.arch_list)
    return input_digest(
        source_digest,
        recipe.model_dump_json(),
        cell.id,
        f"{environment.path.name}\n{environment.frozen()}",
        versions,
        build_affecting_env(
            env,
            source_date_epoch=options.source_date_epoch,
            extra={**recipe_env, **options.job.extra_env},
        ),
    )


def fetched_source_digest(loaded: LoadedRecipe) -> str | None:
    """The source digest of a recipe whose source kiln fetched (a PyPI sdist, a git rev),
    which every build's private copy of it digests to; None for a local ``source.path``.

    A fetched tree is kiln's, unpacked once and never written again, so its digest can be
    taken once for the wheel-cache lookup and the build both (``build_cell``'s
    ``known_digest``; 0.25 s for awkward-cpp's 1,918 files). A local tree is the user's and
    may change while kiln builds: the build digests its own copy, which is what it built.
    """
    from wheelkiln.builder.source import fetch_source, source_digest
    from wheelkiln.paths import sources_dir

    if loaded.recipe.source.path is not None:
        return None
    return source_digest(fetch_source(loaded, sources_dir()), loaded.recipe.source.exclude)


def plan_input_digest(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    toolchain: Toolchain | None = None,
    *,
    known_digest: str | None = None,
) -> str | None:
    """The input digest ``build_cell(loaded, cell, options)`` will have, before it runs.

    Uses what the build will use: the pristine source's digest (the build's private
    copy leaves out the same build leftovers), the stable build environment for this
    cell, and the tool versions. ``None`` when that environment does not exist yet:
    making it here would run the backend's hooks in the pristine tree (for a local
    source, the user's checkout), so the caller builds, and stores the wheel under
    :func:`outcome_input_digest` afterwards. *known_digest*: the source's digest, when
    the caller has it (:func:`fetched_source_digest`).
    """
    from wheelkiln.builder.cell import job_toolchain
    from wheelkiln.builder.environment import existing_environment, frontend_requires
    from wheelkiln.builder.frontend import frontend_mode
    from wheelkiln.builder.source import fetch_source, source_digest
    from wheelkiln.paths import envs_dir, sources_dir

    if options.job.prepare_tree is not None or options.job.seat_wrapper:
        raise ValueError("shard jobs (prepare_tree / seat wrapper) must not use the wheel cache")
    recipe = loaded.recipe
    pristine = fetch_source(loaded, sources_dir())
    environment = existing_environment(
        pristine,
        cell.python,
        [*recipe.build.requires, *frontend_requires(recipe.build.frontend, frontend_mode(os.environ))],
        envs_dir(),
        config_settings=recipe.build.config_settings,
    )
    if environment is None:
        return None
    versions = (toolchain or job_toolchain(loaded, options)).as_dict()
    digest = known_digest or source_digest(pristine, loaded.recipe.source.exclude)
    return _cell_digest(loaded, cell, options, digest, environment, versions)


def outcome_input_digest(loaded: LoadedRecipe, outcome: BuildOutcome, options: BuildOptions) -> str:
    """The input digest of a finished build (to store its wheel under)."""
    return _cell_digest(
        loaded, outcome.cell, options, outcome.source_digest, outcome.environment, outcome.versions
    )


@dataclass(frozen=True)
class CachedWheel:
    """A wheel served from the cache, with the record of the build that made it."""

    digest: str
    wheel: Path
    record: dict[str, Any]


class WheelCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or wheel_cache_dir()

    def entry(self, digest: str) -> Path:
        if len(digest) < 8 or not all(c in "0123456789abcdef" for c in digest):
            raise ValueError(f"not an input digest: {digest!r}")
        return self.root / digest[:2] / digest

    def lookup(self, digest: str) -> CachedWheel | None:
        """The cached wheel for ``digest``, or ``None``. A damaged entry is dropped."""
        entry = self.entry(digest)
        try:
            record = json.loads((entry / "record.json").read_text(encoding="utf-8"))
            wheel = entry / record["wheel"]["name"]
            expected = record["wheel"]["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            if entry.exists():
                shutil.rmtree(entry, ignore_errors=True)
            return None
        if not wheel.is_file() or sha256_file(wheel) != expected:
            shutil.rmtree(entry, ignore_errors=True)
            return None
        return CachedWheel(digest, wheel, record)

    def store(self, digest: str, wheel_path: Path, record: Mapping[str, Any]) -> CachedWheel:
        """Keep ``wheel_path`` and its build record under ``digest`` (atomically)."""
        entry = self.entry(digest)
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=entry.parent))
        try:
            kept = staging / wheel_path.name
            shutil.copy2(wheel_path, kept)
            stored = json.loads(json.dumps(dict(record), default=str))
            wheel_facts = dict(stored.get("wheel") or {})
            wheel_facts.update(
                {"name": wheel_path.name, "sha256": sha256_file(kept), "size": kept.stat().st_size}
            )
            wheel_facts.pop("path", None)
            stored["wheel"] = wheel_facts
            stored["input_digest"] = digest
            stored["cached_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            text = json.dumps(stored, indent=2, sort_keys=True) + "\n"
            (staging / "record.json").write_text(text, encoding="utf-8")
            try:
                staging.rename(entry)
            except OSError:
                # Same inputs were stored meanwhile (or a stale entry is in the way).
                existing = self.lookup(digest)
                if existing is not None:
                    return existing
                shutil.rmtree(entry, ignore_errors=True)
                staging.rename(entry)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return CachedWheel(digest, entry / wheel_path.name, stored)
