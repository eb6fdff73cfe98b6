"""CMake's compiler identification, kept between builds whose compilers are the same.

Every kiln build configures CMake in a fresh build directory, so CMake identifies every
language's compiler and detects its ABI each time: for CUDA that is several nvcc runs,
the largest part of a hot demo-kernels build's fixed cost (measured in the README).
CMake skips both when the build directory already holds what they found
(``CMakeFiles/<version>/CMake<LANG>Compiler.cmake``, ``CMakeSystem.cmake``, the ABI
probes' ``.bin``) and its cache says the platform was initialized. kiln keeps those files
after a successful configure under ``$KILN_HOME/cmake-id/<key>`` and puts them into the
next fresh build directory with the same key.

A kept identification must never outlive a compiler change, so the key holds everything
identification reads that kiln can name: the cmake that runs and its version; every
compiler CMake may pick (``cc``/``c++``/``gcc``/``g++`` on the build's PATH, ``$CC``,
``$CXX``, ``$CUDACXX``, ``$CUDAHOSTCXX``), each by resolved path and ``--version`` output;
the environment variables CMake reads for it (flags, ``CUDAARCHS``, ``CUDA_*``, every
``CMAKE_*`` and ``SKBUILD_*``); the project's top ``CMakeLists.txt`` and
``pyproject.toml`` (languages, variables set before ``project()``, scikit-build-core's
defines) and the backend's config settings. Anything else changes the key only through
these, which is why the files are dropped, not reused, when any is unreadable.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from wheelkiln.builder.probes import probe

COMPILER_NAMES = ("cc", "c++", "gcc", "g++")
COMPILER_VARIABLES = ("CC", "CXX", "CUDACXX", "CUDAHOSTCXX")
READ_VARIABLES = ("CFLAGS", "CXXFLAGS", "CUDAFLAGS", "LDFLAGS", "CUDAARCHS", "CPATH")
READ_PREFIXES = ("CMAKE_", "CUDA_", "SKBUILD_")
PROJECT_FILES = ("CMakeLists.txt", "pyproject.toml")
JOB_VARIABLES = ("SKBUILD_BUILD_DIR",)
"""Read by no identification, and named after the job's directory: left out of the key
(as are the compiler launchers, which CMake does not use to identify), so an unsharded
build, its re-runs and a link job of the same cell share one kept identification."""
SEEDED_CACHE = "CMAKE_PLATFORM_INFO_INITIALIZED:INTERNAL=1\n"
"""The cache entry that makes CMake load the kept files instead of identifying."""
KEPT_CACHE_ENTRY = re.compile(
    r"(CMAKE_EXECUTABLE_FORMAT|CMAKE_UNAME"
    r"|CMAKE_(ADDR2LINE|AR|DLLTOOL|LINKER|NM|OBJCOPY|OBJDUMP|RANLIB|READELF|STRIP)"
    r"|CMAKE_[A-Z]+_COMPILER(_AR|_RANLIB)?)(-ADVANCED)?"
)
"""Cache entries that only identification writes (CMakeDetermineCompilerId.cmake,
CMakeDetermineSystem.cmake, CMakeFindBinUtils.cmake), kept with the files: without
CMAKE_EXECUTABLE_FORMAT=ELF CMake refuses to install an RPATH target under Ninja, and
without CMAKE_STRIP there is no install/strip target. With them, the seeded configure
writes the same build.ninja as a full one (checked on demo-kernels)."""


def find_cmake(build_env: Path, environ: Mapping[str, str]) -> str | None:
    """The cmake a CMake build runs: the build environment's (a PyPI ``cmake``
    requirement) before PATH's."""
    local = build_env / "bin" / "cmake"
    return str(local) if local.exists() else shutil.which("cmake", path=environ.get("PATH"))


def cmake_version(cmake: str) -> str | None:
    """``3.25.1`` from ``cmake --version``; the name of CMake's ``CMakeFiles/<version>``."""
    found = re.search(r"version (\d+\.\d+\.\d+)", probe([cmake, "--version"]).output)
    return found[1] if found else None


def _identity(program: str) -> str:
    real = os.path.realpath(program)
    output = probe([real, "--version"]).output.strip()
    return f"{real}\n{output}"


def compiler_identities(
    environ: Mapping[str, str],
    names: Sequence[str] = COMPILER_NAMES,
    variables: Sequence[str] = COMPILER_VARIABLES,
) -> dict[str, str]:
    """Each compiler a build system may pick, by name on the build's PATH or by
    variable: its resolved path and ``--version`` output, or 'absent'."""
    path = environ.get("PATH", os.defpath)
    compilers: dict[str, str] = {}
    for name in names:
        found = shutil.which(name, path=path)
        compilers[name] = _identity(found) if found else "absent"
    for variable in variables:
        value = environ.get(variable)
        if value:
            program = shutil.which(value.split()[0], path=path)
            compilers[variable] = f"{value}\n{_identity(program) if program else 'absent'}"
    return compilers


def identification_key(
    cmake: str,
    version: str,
    tree: Path,
    environ: Mapping[str, str],
    config_settings: Sequence[tuple[str, str]],
) -> str:
    """The digest of everything CMake's compiler identification reads (module doc)."""
    compilers = compiler_identities(environ)
    read = {
        k: v
        for k, v in sorted(environ.items())
        if (k in READ_VARIABLES or k.startswith(READ_PREFIXES)) and k not in JOB_VARIABLES
        and not k.endswith(("_COMPILER_LAUNCHER", "_LINKER_LAUNCHER"))
    }  # fmt: skip
    project = {}
    for name in PROJECT_FILES:
        file = tree / name
        project[name] = hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else ""
    blob = json.dumps(
        {
            "cmake": [os.path.realpath(cmake), version],
            "compilers": compilers,
            "environment": read,
            "project": project,
            "config_settings": sorted(config_settings),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _kept_files(directory: Path) -> list[Path]:
    return sorted(
        [
            *directory.glob("CMake*Compiler.cmake"),
            *directory.glob("CMakeDetermineCompilerABI_*.bin"),
        ]
        + [p for p in (directory / "CMakeSystem.cmake",) if p.is_file()]
    )


def seed(store: Path, build_dir: Path, version: str) -> bool:
    """Put a kept identification into a fresh *build_dir*; False when none is kept."""
    if not (store / "complete").is_file() or (build_dir / "CMakeCache.txt").exists():
        return False
    target = build_dir / "CMakeFiles" / version
    target.mkdir(parents=True, exist_ok=True)
    for file in _kept_files(store):
        shutil.copy2(file, target / file.name)
    (build_dir / "CMakeCache.txt").write_text(SEEDED_CACHE + (store / "cache.txt").read_text())
    return True


def keep(store: Path, version: str, build_dir: Path) -> None:
    """Keep a successful configure's identification under *store* (written once, whole)."""
    source = build_dir / "CMakeFiles" / version
    files = _kept_files(source)
    if (store / "complete").is_file() or not (source / "CMakeSystem.cmake").is_file():
        return
    if not (build_dir / "CMakeCache.txt").is_file():
        return
    staging = store.with_name(f".{store.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for file in files:
        shutil.copy2(file, staging / file.name)
    cache = (build_dir / "CMakeCache.txt").read_text(errors="replace").splitlines()
    kept = [line for line in cache if KEPT_CACHE_ENTRY.fullmatch(line.split(":", 1)[0])]
    (staging / "cache.txt").write_text("".join(f"{line}\n" for line in kept))
    (staging / "complete").write_text(version + "\n")
    try:
        staging.rename(store)
    except OSError:  # kept meanwhile by a parallel job
        shutil.rmtree(staging, ignore_errors=True)


def prepare(
    build_dir: Path,
    tree: Path,
    environ: Mapping[str, str],
    build_env: Path,
    config_settings: Sequence[tuple[str, str]],
    store_root: Path,
) -> tuple[Path, str] | None:
    """Seed *build_dir* from a kept identification where one matches; returns where to
    keep this build's (``keep(*returned, build_dir)`` after a successful build), or
    ``None`` when no cmake is found."""
    cmake = find_cmake(build_env, environ)
    version = cmake_version(cmake) if cmake else None
    if cmake is None or version is None:
        return None
    store = store_root / identification_key(cmake, version, tree, environ, config_settings)
    seed(store, build_dir, version)
    return store, version
