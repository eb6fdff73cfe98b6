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
``$CXX``, ``$CUDACXX``, ``$CUDAHOSTCXX`` and the other languages', nvcc's
``$NVCC_CCBIN``), each by resolved path and ``--version`` output; the environment
variables CMake reads for it (flags, ``CUDAARCHS``, ``CUDA_*``, every ``CMAKE_*`` and
``SKBUILD_*``) and those the compiler drivers read (``CPATH``, ``CPLUS_INCLUDE_PATH``,
``LIBRARY_PATH``..., nvcc's ``NVCC_PREPEND_FLAGS`` and ``NVCC_APPEND_FLAGS``); the
project's top ``CMakeLists.txt`` and ``pyproject.toml`` (languages, variables set before
``project()``, scikit-build-core's defines) and the backend's config settings. Anything
else changes the key only through these, which is why the files are dropped, not reused,
when any is unreadable.

FindPython's answers about the build's interpreter are kept the same way, beside the
identification (:func:`interpreter_answers`). A fresh build directory made FindPython
start the interpreter six times (version, ABI, paths, SOABI) and pybind11 twice more
(debug build, module suffix): 0.3 s of a hot demo-kernels configure at load 5. Those
answers are a function of the interpreter alone, so their key is the identification's
and the interpreter's (:func:`python_key`): the path CMake is given (the build
environment's, named after its lock) and the binary it resolves to by path, inode, size
and modification time, with the venv's ``pyvenv.cfg``. FindPython and pybind11 also
check the kept answers themselves: both ask again when the executable they are given is
not the one the answers came from.

The results of the project's own checks (``try_compile``: pybind11's ``HAS_FLTO_AUTO``,
FindThreads' ``CMAKE_HAVE_LIBC_PTHREAD``) are kept beside the identification too, under a
key that adds the source, the build environment and the system's headers and libraries
(:mod:`wheelkiln.builder.cmake_checks`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from wheelkiln import holds
from wheelkiln.builder import cmake_checks
from wheelkiln.builder.compiler_answers import DRIVER_VARIABLES
from wheelkiln.builder.probes import probe
from wheelkiln.cache.launch import NVCC_ENV_FLAGS

COMPILER_NAMES = ("cc", "c++", "gcc", "g++")
COMPILER_VARIABLES = (
    "CC", "CXX", "CUDACXX", "CUDAHOSTCXX", "FC", "HIPCXX", "HIPHOSTCXX", "OBJC", "OBJCXX",
    "ASM", "ISPC", "SWIFTC", "NVCC_CCBIN",
)  # fmt: skip
"""Where CMake (``<LANG>`` compilers, CUDA's and HIP's host compiler) or nvcc
(``NVCC_CCBIN``, its host compiler) reads a compiler from the environment."""
READ_VARIABLES = (
    # CMake's per-language flags and architectures.
    "CFLAGS", "CXXFLAGS", "CUDAFLAGS", "FFLAGS", "HIPFLAGS", "OBJCFLAGS", "OBJCXXFLAGS",
    "ASMFLAGS", "ISPCFLAGS", "SWIFTFLAGS", "LDFLAGS", "CUDAARCHS", "HIPARCHS",
    # What the compiler drivers read, which lands in the identification: gcc's and
    # clang's search paths become the implicit include and link directories, nvcc's
    # variables are options on every call (NVCC_PREPEND_FLAGS=-I<dir> adds <dir> to
    # CUDA's implicit include directories).
    *DRIVER_VARIABLES, *NVCC_ENV_FLAGS,
)  # fmt: skip
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


FINDPYTHON_ENTRY = re.compile(r"(_Python[23]?)(_[A-Za-z0-9_]+)?")
"""FindPython's INTERNAL cache entries (``_Python_EXECUTABLE``, its properties, the
signatures it checks them by); group 1 is the module's prefix."""
PYBIND11_ENTRY = re.compile(
    r"PYTHON_IS_DEBUG|PYTHON_MODULE_(EXTENSION|DEBUG_POSTFIX)"
    r"|PYBIND11_PYTHON_EXECUTABLE_LAST|_PYBIND11_CROSSCOMPILING"
)
"""pybind11's INTERNAL answers about the interpreter, and the executable they came from."""


@dataclass(frozen=True)
class Kept:
    """Where a build's identification (and its interpreter's answers) are kept."""

    identification: Path
    """``$KILN_HOME/cmake-id/<identification key>``."""
    version: str
    """CMake's version: the name of ``CMakeFiles/<version>``."""
    python: Path | None = None
    """``<identification>/python-<key>`` (:func:`python_key`), or None without an
    interpreter to key by."""
    interpreter: Path | None = None
    """The interpreter the backend hands CMake, whose answers are kept."""
    checks: Path | None = None
    """``<identification>/checks-<key>`` (:func:`cmake_checks.store_for`), its key read
    before the configure. None where no identification was kept before this build: the
    key reads the system through the identification's directories, and read after a
    build of hours it could name a system the checks never saw."""
    recache: bool = False
    """``--recache``: no check result was seeded, and this build's replace those kept."""
    seeded: bool = False
    """Whether the build directory was seeded with the kept identification."""
    checks_seeded: int = 0
    """How many kept check results were seeded with it."""

    def as_record(self) -> dict[str, object]:
        """What the build record says of it: what the configure was given, and from where."""
        return {
            "identification": str(self.identification) if self.seeded else None,
            "checks": str(self.checks) if self.checks_seeded else None,
            "checks_seeded": self.checks_seeded,
        }


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


def python_key(python: Path) -> str | None:
    """The digest of what FindPython's answers depend on in *python*, the interpreter
    CMake is given (``Python_EXECUTABLE``): that path, the binary it resolves to (path,
    inode, size, mtime) and the ``pyvenv.cfg`` beside or above it. None when the
    interpreter cannot be read (nothing is kept or seeded then)."""
    try:
        binary = Path(os.path.realpath(python))
        status = binary.stat()
        venv = python.parent.parent / "pyvenv.cfg"
        config = venv.read_text(errors="replace") if venv.is_file() else ""
    except OSError:
        return None
    blob = json.dumps(
        [str(python), str(binary), status.st_ino, status.st_size, status.st_mtime_ns, config]
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


def seed(store: Path, build_dir: Path, version: str, python: Path | None = None) -> bool:
    """Put a kept identification (and, from *python*, a kept interpreter's answers) into
    a fresh *build_dir*; False when no identification is kept."""
    if not (store / "complete").is_file() or (build_dir / "CMakeCache.txt").exists():
        return False
    target = build_dir / "CMakeFiles" / version
    target.mkdir(parents=True, exist_ok=True)
    for file in _kept_files(store):
        shutil.copy2(file, target / file.name)
    answers = ""
    if python is not None and (python / "complete").is_file():
        answers = (python / "cache.txt").read_text()
    cache = SEEDED_CACHE + (store / "cache.txt").read_text() + answers
    (build_dir / "CMakeCache.txt").write_text(cache)
    return True


def _write_whole(store: Path, files: Mapping[str, str | Path]) -> None:
    """Write *store* once, whole: staged, then renamed (a parallel job may win)."""
    staging = store.with_name(f".{store.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, content in files.items():
        if isinstance(content, Path):
            shutil.copy2(content, staging / name)
        else:
            (staging / name).write_text(content)
    try:
        staging.rename(store)
    except OSError:  # kept meanwhile by a parallel job
        shutil.rmtree(staging, ignore_errors=True)


def interpreter_answers(cache: Sequence[str], python: Path) -> list[str]:
    """The lines of a CMake cache that hold what FindPython and pybind11 asked *python*:
    only those whose recorded executable is *python* itself. Answers about another
    interpreter (one FindPython searched for, ``find_package(Python2)``) depend on what
    else is installed, which the key does not cover."""
    entries = [line.split(":INTERNAL=", 1) for line in cache if ":INTERNAL=" in line]
    values = {name: value for name, value in entries}
    given = str(python)
    kept: list[str] = []
    for name, value in entries:
        findpython = FINDPYTHON_ENTRY.fullmatch(name)
        if findpython:
            source = values.get(f"{findpython[1]}_EXECUTABLE")
        elif PYBIND11_ENTRY.fullmatch(name):
            source = values.get("PYBIND11_PYTHON_EXECUTABLE_LAST")
        else:
            continue
        if source == given:
            kept.append(f"{name}:INTERNAL={value}")
    return kept


def keep_python(store: Path, build_dir: Path, python: Path) -> None:
    """Keep a successful configure's answers about *python* (:func:`interpreter_answers`)."""
    if (store / "complete").is_file() or not (build_dir / "CMakeCache.txt").is_file():
        return
    cache = (build_dir / "CMakeCache.txt").read_text(errors="replace").splitlines()
    kept = interpreter_answers(cache, python)
    if not kept:
        return  # FindPython did not run, or not for this interpreter
    _write_whole(store, {"cache.txt": "".join(f"{line}\n" for line in kept), "complete": ""})


def keep(store: Path, version: str, build_dir: Path) -> None:
    """Keep a successful configure's identification under *store* (written once, whole)."""
    source = build_dir / "CMakeFiles" / version
    files = _kept_files(source)
    if (store / "complete").is_file() or not (source / "CMakeSystem.cmake").is_file():
        return
    if not (build_dir / "CMakeCache.txt").is_file():
        return
    cache = (build_dir / "CMakeCache.txt").read_text(errors="replace").splitlines()
    kept = [line for line in cache if KEPT_CACHE_ENTRY.fullmatch(line.split(":", 1)[0])]
    _write_whole(
        store,
        {
            **{file.name: file for file in files},
            "cache.txt": "".join(f"{line}\n" for line in kept),
            "complete": version + "\n",
        },
    )


def keep_all(kept: Kept, build_dir: Path) -> None:
    """After a successful build: keep its identification, its interpreter answers and
    its check results."""
    keep(kept.identification, kept.version, build_dir)
    if not (kept.identification / "complete").is_file():
        return
    if kept.python is not None and kept.interpreter is not None:
        keep_python(kept.python, build_dir, kept.interpreter)
    checks = kept.checks
    if checks is None:
        return
    if kept.recache:
        shutil.rmtree(checks, ignore_errors=True)
    if not (checks / "complete").is_file():
        _write_whole(checks, cmake_checks.kept_files(build_dir))


def prepare(
    build_dir: Path,
    tree: Path,
    environ: Mapping[str, str],
    build_env: Path,
    config_settings: Sequence[tuple[str, str]],
    store_root: Path,
    python: Path | None = None,
    source_digest: str | None = None,
    recache: bool = False,
) -> Kept | None:
    """Seed *build_dir* from a kept identification where one matches, with the kept
    answers of *python* (the interpreter the backend hands CMake) and the kept check
    results of this *source_digest* where they match too (not with *recache*: the
    project's checks run again and their results replace the kept ones); returns where
    to keep this build's (:func:`keep_all` after a successful build), or ``None`` when no
    cmake is found."""
    cmake = find_cmake(build_env, environ)
    version = cmake_version(cmake) if cmake else None
    if cmake is None or version is None:
        return None
    store = store_root / identification_key(cmake, version, tree, environ, config_settings)
    holds.hold(store_root, store.name)  # before it is read: `kiln answers prune` waits
    interpreter = python_key(python) if python is not None else None
    answers = store / f"python-{interpreter}" if interpreter is not None else None
    checks = cmake_checks.store_for(store, source_digest, build_env, environ) if source_digest else None
    seeded = seed(store, build_dir, version, answers)
    checks_seeded = 0
    if seeded and checks is not None and not recache:
        checks_seeded = cmake_checks.seed(checks, build_dir)
    return Kept(store, version, answers, python, checks, recache, seeded, checks_seeded)
