"""The recipe's ``build.linker``: mold or lld in place of the compiler's default linker.

Linking is what a link job does after every compile hits, so a fast linker shortens it
directly. gcc (12 and later) and clang pick the linker with ``-fuse-ld=NAME``, which runs
``ld.NAME`` from PATH. How each build system gets it:

* setuptools (and torch's cpp_extension) and meson: ``-fuse-ld=`` appended to
  ``LDFLAGS``, which both add to every link they run;
* CMake 3.29 and later: ``CMAKE_LINKER_TYPE`` (``MOLD``/``LLD``), CMake's own setting;
  older CMake: ``-fuse-ld=`` in ``CMAKE_{EXE,SHARED,MODULE}_LINKER_FLAGS_INIT``, the
  values CMake starts those flags from (beside ``LDFLAGS``), so a project's or user's own
  linker flags are kept, not replaced.

CUDA device links (``nvcc -dlink``, nvlink) are untouched: the flags reach host links
only. A linker that is not installed is refused before the build starts, naming the
recipe and what to install; its version goes into the tool versions, and so into the
toolchain fingerprint shards and link jobs compare.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from wheelkiln.builder.probes import probe
from wheelkiln.errors import ToolNotFoundError

PROGRAMS = {"mold": "ld.mold", "lld": "ld.lld"}
"""What ``-fuse-ld=NAME`` makes gcc run."""
PACKAGES = {"mold": "mold", "lld": "lld"}
LINKER_TYPE_MIN_CMAKE = (3, 29)
CMAKE_LINK_KINDS = ("EXE", "SHARED", "MODULE")


def find_linker(linker: str, environ: Mapping[str, str], recipe: Path | str) -> str:
    """The linker program on the build's PATH, or a clear refusal."""
    program = PROGRAMS[linker]
    found = shutil.which(program, path=environ.get("PATH", os.defpath))
    if found is None:
        raise ToolNotFoundError(
            f"{recipe}: build.linker = {linker!r}, but {program} is not on PATH.",
            hint=f"Install {linker} (e.g. `apt-get install {PACKAGES[linker]}`), or set "
            'build.linker = "default".',
        )
    return found


def linker_version(program: str) -> str:
    """The first line of ``PROGRAM --version`` (``mold 1.10.1 (compatible with GNU ld)``)."""
    lines = probe([program, "--version"]).output.strip().splitlines()
    return lines[0].strip() if lines else "unknown"


def cmake_version(build_env: Path, environ: Mapping[str, str]) -> tuple[int, int] | None:
    """(major, minor) of the cmake a CMake build will run; ``None`` when there is none."""
    from wheelkiln.builder import cmake_id

    cmake = cmake_id.find_cmake(build_env, environ)
    version = cmake_id.cmake_version(cmake) if cmake else None
    if version is None:
        return None
    major, minor, _ = version.split(".", 2)
    return int(major), int(minor)


def linker_environment(
    linker: str,
    kind: str,
    environ: Mapping[str, str],
    *,
    cmake: tuple[int, int] | None = None,
) -> dict[str, str]:
    """The variables that make a *kind* build ('cmake', 'meson', 'setuptools') link with
    *linker*, given the build's environment so far (its LDFLAGS and CMAKE_ARGS are kept)."""
    if linker == "default":
        return {}
    flag = f"-fuse-ld={linker}"
    if kind != "cmake":
        return {"LDFLAGS": " ".join(p for p in (environ.get("LDFLAGS", ""), flag) if p)}
    if cmake is not None and cmake >= LINKER_TYPE_MIN_CMAKE:
        args = [f"-DCMAKE_LINKER_TYPE={linker.upper()}"]
    else:
        args = [f"-DCMAKE_{kind_}_LINKER_FLAGS_INIT={flag}" for kind_ in CMAKE_LINK_KINDS]
    return {
        "CMAKE_ARGS": " ".join(p for p in (environ.get("CMAKE_ARGS", ""), shlex.join(args)) if p)
    }


def linker_versions(linker: str, recipe: Path | str, environ: Mapping[str, str]) -> dict[str, str]:
    """``{"linker": "mold 1.10.1 ..."}`` for a chosen linker (refused when absent), else
    nothing: added to a build's tool versions, so to the wheel cache's input digest and
    the toolchain fingerprint."""
    if linker == "default":
        return {}
    return {"linker": linker_version(find_linker(linker, environ, recipe))}
