"""The results of a CMake project's own checks, kept between configures of one source
on one system.

Every kiln build configures in a fresh build directory, so each check the project makes
builds its test program again: pybind11's ``HAS_FLTO_AUTO`` (an LTO link) and
FindThreads' ``CMAKE_HAVE_LIBC_PTHREAD`` took 0.28 s of a hot demo-kernels build's 0.9 s
build step. A check macro skips its test when its result variable is already in the
cache, as with a preloaded cache (``cmake -C``). kiln keeps those cache entries after a
successful build, beside the kept compiler identification (:mod:`cmake_id`), and seeds
them into the next fresh build directory whose key matches. The key is read before the
configure whose answers are kept, so a build needs a kept identification (whose files
name the directories to read) to keep its checks.

A check's result is a function of its program, flags and libraries and of the headers,
libraries and tools it finds. The key holds each, as far as kiln can read it:

* the check's source and flags: the project's files (the source tree's digest) and what
  configures it (the identification's key: cmake, compilers, environment variables,
  config settings);
* the build environment's headers, libraries and CMake modules (pybind11's): its path,
  which names its lock;
* the system's headers and libraries, as the compilers' implicit include and link
  directories name them in the kept identification: every directory under an include
  directory (recursively, as ``#include <a/b.h>`` searches) by modification time and
  inode, which change whenever an entry is added, removed or renamed in it; every file
  and link of a link directory (not its subdirectories, as the linker searches) by
  name, type, size, modification time and inode; and the tools the compiler drivers run
  (``ld``, ``as``, ...) on the build's PATH by the same. Package managers install by
  creating and renaming files, so a header or library installed, upgraded or removed is
  another key, and a check that failed for want of a header runs again once the header
  exists.
  Stating every header instead of every directory cost 45 ms more per configure (13,500
  entries on demo-kernels); a header written in place (``cp`` over it) is not seen.

Only entries that are a check's whole answer are kept: checks logged as ``Performing
Test <var>`` (``check_source_compiles``, ``check_compiler_flag``, FindThreads) and, in the
configure log of CMake 3.26 and later, ``Looking for ...`` (``check_include_file``,
``check_symbol_exists``, ``check_function_exists``, ``check_library_exists``). A check
that writes more than its variable (``check_type_size``), one that runs its program
(``try_run``), and every check under CMake 3.25 that its log does not name, runs again.

Not covered: a check against a header or library outside those directories (found by
``find_package`` and handed to ``CMAKE_REQUIRED_INCLUDES``) that changed while nothing
above did.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

CACHE_NAME = "cache.txt"
LEGACY_LOGS = ("CMakeOutput.log", "CMakeError.log")
"""Where CMake before 3.26 logs each check (CMakeFiles/)."""
LEGACY_CHECK = re.compile(
    r"^Performing [A-Za-z+]+ SOURCE FILE Test ([A-Za-z0-9_]+) (?:succeeded|failed) "
    r"with the following output:$",
    re.MULTILINE,
)
"""check_source_compiles (and check_compiler_flag) before 3.26; check_source_runs
writes "... compile output:" and is not kept."""
CONFIGURE_LOG = "CMakeConfigureLog.yaml"
EVENT_START = re.compile(r"^  -\n    kind: ", re.MULTILINE)
TRY_COMPILE = re.compile(
    r'^"try_compile-v1"\n.*?^    checks:\n(?P<checks>(?:^      - "[^\n]*"\n)+)'
    r'.*?^    buildResult:\n      variable: "(?P<variable>[A-Za-z0-9_]+)"\n'
    r"      cached: true$",
    re.MULTILINE | re.DOTALL,
)
WHOLE_ANSWER = re.compile(r'"(?:Performing Test (?P<var>[A-Za-z0-9_]+)|Looking for .*)"')
DIRECTORIES = re.compile(
    r'^set\(CMAKE_[A-Z]+_(?P<kind>IMPLICIT_INCLUDE|TOOLKIT_INCLUDE|(?:HOST_)?IMPLICIT_LINK)'
    r'_DIRECTORIES "(?P<dirs>[^"]*)"\)$',
    re.MULTILINE,
)
DRIVER_TOOLS = ("ld", "ld.bfd", "ld.gold", "ld.lld", "mold", "as", "ar", "nm", "ranlib")


def checked_variables(build_dir: Path) -> list[str]:
    """The cache variables whose entry is a whole check answer (module doc), from the
    configure's log in *build_dir*."""
    files = build_dir / "CMakeFiles"
    configure_log = files / CONFIGURE_LOG
    if configure_log.is_file():
        text = configure_log.read_text(errors="replace")
        names = []
        for event in EVENT_START.split(text)[1:]:
            found = TRY_COMPILE.match(event)
            if found is None:
                continue
            innermost = found["checks"].strip().splitlines()[-1].strip()[2:]
            answer = WHOLE_ANSWER.fullmatch(innermost)
            if answer and answer["var"] in (None, found["variable"]):
                names.append(found["variable"])
        return names
    names = []
    for name in LEGACY_LOGS:
        log = files / name
        if log.is_file():
            names += LEGACY_CHECK.findall(log.read_text(errors="replace"))
    return names


def check_results(build_dir: Path) -> list[str]:
    """The cache lines (``NAME:INTERNAL=value``) of *build_dir*'s whole check answers."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return []
    wanted = set(checked_variables(build_dir))
    lines = []
    for line in cache.read_text(errors="replace").splitlines():
        name, internal, _ = line.partition(":INTERNAL=")
        if internal and name in wanted:
            lines.append(line)
    return lines


def system_directories(identification: Path) -> tuple[list[str], list[str]]:
    """The include directories (walked whole) and link directories (their entries only)
    that the kept identification's compilers search."""
    include: set[str] = set()
    link: set[str] = set()
    for file in sorted(identification.glob("CMake*Compiler.cmake")):
        for found in DIRECTORIES.finditer(file.read_text(errors="replace")):
            into = link if found["kind"].endswith("LINK") else include
            # By real path: /lib is /usr/lib where /usr is merged, read once.
            into.update(os.path.realpath(d) for d in found["dirs"].split(";") if d)
    # A directory below another walked one is walked with it.
    nested = {d for d in include if any(d.startswith(o + os.sep) for o in include)}
    return sorted(include - nested), sorted(link)


class TooLarge(Exception):
    """An include directory holds more than :data:`MOST_DIRECTORIES` directories."""


MOST_DIRECTORIES = 20_000
"""Past this many directories under the include directories (a ``CPATH`` naming ``/usr``
or a home), reading them would cost more than the checks it saves: nothing is kept or
seeded. demo-kernels' (with CUDA's) hold 944."""


def _directories(top: str, into: list[str]) -> None:
    """*top* and every directory below it, by modification time and inode."""
    pending = [top]
    while pending:
        directory = pending.pop()
        try:
            status = os.stat(directory)  # noqa: PTH116 (a str path, as scandir gives)
            with os.scandir(directory) as listing:
                below = [entry.path for entry in listing if entry.is_dir(follow_symlinks=False)]
        except OSError as error:
            into.append(f"{directory} unreadable {error.errno}")
            continue
        into.append(f"{directory} {status.st_mtime_ns} {status.st_ino}")
        if len(into) > MOST_DIRECTORIES:
            raise TooLarge(top)
        pending.extend(sorted(below, reverse=True))  # depth first, in name order


def _entries(directory: str, into: list[str]) -> None:
    """Every entry of *directory* but its subdirectories, by name, type, size, mtime and
    inode. A linker searches a link directory's own files, never below them, and programs
    write below them at run time: Chromium's first start creates
    ``/usr/lib/chromium/extensions``, which changed ``/usr/lib/chromium``'s mtime and so
    the key of every check a build kept before it."""
    try:
        with os.scandir(directory) as listing:
            found = sorted(
                (entry for entry in listing if not entry.is_dir(follow_symlinks=False)),
                key=lambda entry: entry.name,
            )
    except OSError as error:
        into.append(f"{directory} unreadable {error.errno}")
        return
    for entry in found:
        try:
            status = entry.stat(follow_symlinks=False)
        except OSError:
            into.append(f"{entry.path} vanished")
            continue
        into.append(
            f"{entry.path} {status.st_mode:o} {status.st_size} "
            f"{status.st_mtime_ns} {status.st_ino}"
        )


def _tools(environ: Mapping[str, str]) -> Iterable[str]:
    path = environ.get("PATH", os.defpath)
    for name in DRIVER_TOOLS:
        found = shutil.which(name, path=path)
        if found is None:
            yield f"{name} absent"
            continue
        real = os.path.realpath(found)
        status = Path(real).stat()
        yield f"{name} {real} {status.st_size} {status.st_mtime_ns} {status.st_ino}"


def system_signature(identification: Path, environ: Mapping[str, str]) -> str:
    """The digest of the system's headers, libraries and driver tools (module doc)."""
    include, link = system_directories(identification)
    entries: list[str] = [*_tools(environ)]
    for directory in include:
        entries.append(f"include {directory}")
        _directories(directory, entries)
    for directory in link:
        entries.append(f"link {directory}")
        _entries(directory, entries)
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def store_for(
    identification: Path, source_digest: str, build_env: Path, environ: Mapping[str, str]
) -> Path | None:
    """Where this configure's check results are kept: ``<identification>/checks-<key>``;
    None while no identification is kept (its files name the directories searched)."""
    if not (identification / "complete").is_file():
        return None
    try:
        system = system_signature(identification, environ)
    except TooLarge:
        return None
    blob = json.dumps([source_digest, str(build_env), system])
    return identification / f"checks-{hashlib.sha256(blob.encode()).hexdigest()[:20]}"


def seed(store: Path, build_dir: Path) -> int:
    """Add the kept results to a build directory's cache that kiln has just seeded with
    an identification (:func:`cmake_id.seed`); the number of results seeded."""
    kept = store / CACHE_NAME
    if not (store / "complete").is_file() or not kept.is_file():
        return 0
    lines = kept.read_text().splitlines()
    with open(build_dir / "CMakeCache.txt", "a") as cache:
        cache.writelines(f"{line}\n" for line in lines)
    return len(lines)


def kept_files(build_dir: Path) -> dict[str, str]:
    """What a successful configure in *build_dir* keeps: its whole check answers."""
    lines = check_results(build_dir)
    return {CACHE_NAME: "".join(f"{line}\n" for line in lines), "complete": ""}
