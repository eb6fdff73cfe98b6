"""meson's compiler sanity checks, skipped where the same compilers passed them before.

``meson setup`` checks that every compiler works, in every fresh build directory and once
per machine (host and build): C compiles and runs an executable, Cython (meson ≥ 1.10)
transpiles a module and compiles it into an extension. kiln builds in a fresh directory
every time, and a sanity compile is a compile and link in one call, which no compiler
cache stores. In a hot demo-cython build they were 4.9 s of meson's 6 s setup (two
Cython transpiles through kiln's front, two uncached extension builds). A sanity check
only passes or fails; it changes nothing meson writes.

After a successful build kiln marks the compilers' key as checked under
``$KILN_HOME/meson-sanity/<key>``; a later build with the same key gives meson a native
file with ``skip_sanity_check = true`` in ``[properties]`` (meson honours it in native
builds too, for both machines). The key holds what the checks depend on: every
compiler meson may pick (``cc``/``c++``/``gcc``/``g++`` on the build's PATH, ``$CC``,
``$CXX``, by resolved path and ``--version`` output), the ``cython`` on PATH (kiln's
front, content-addressed) and the build environment (its path is its lock: meson,
Cython), the variables meson's compiler detection and checks read (flags, linkers,
pkg-config), and the backend's config settings (:data:`UNREAD_SETTINGS` aside). A changed compiler, Cython or flag is
another key, whose first build checks again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from wheelkiln import holds
from wheelkiln.builder.cmake_id import compiler_identities
from wheelkiln.builder.compiler_answers import DRIVER_VARIABLES

READ_VARIABLES = (
    "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CC_LD", "CXX_LD", "CYTHON",
    *DRIVER_VARIABLES,
)  # fmt: skip
READ_PREFIXES = ("PKG_CONFIG", "MESON")
NATIVE_FILE = "[properties]\nskip_sanity_check = true\n"
UNREAD_SETTINGS = ("build-dir", "compile-args")
"""meson-python settings no sanity check reads: where the job builds (named after the
job's directory, so a tree elsewhere, a shard and its link job share one key) and
ninja's arguments."""


def sanity_key(
    environ: Mapping[str, str],
    build_env: Path,
    config_settings: Sequence[tuple[str, str]],
) -> str:
    """The digest of what meson's sanity checks depend on (module doc)."""
    cython = shutil.which("cython", path=environ.get("PATH", os.defpath))
    read = {
        k: v
        for k, v in sorted(environ.items())
        if k in READ_VARIABLES or k.startswith(READ_PREFIXES)
    }
    blob = json.dumps(
        {
            "compilers": compiler_identities(environ, variables=("CC", "CXX")),
            "cython": os.path.realpath(cython) if cython else "absent",
            "build_env": str(build_env),
            "environment": read,
            "config_settings": sorted(s for s in config_settings if s[0] not in UNREAD_SETTINGS),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def skip_settings(marker: Path, native_file: Path) -> tuple[tuple[str, str], ...]:
    """The config settings that skip meson's sanity checks when *marker* says the same
    compilers passed them; none otherwise (meson checks, and :func:`mark` records it)."""
    if not marker.is_file():
        return ()
    holds.hold(marker.parent, marker.name)  # its use, for `kiln answers prune`
    native_file.write_text(NATIVE_FILE)
    return (("setup-args", f"--native-file={native_file}"),)


def mark(marker: Path) -> None:
    """Record that a build with *marker*'s key passed meson's sanity checks."""
    if marker.is_file():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    staged = marker.with_name(f".{marker.name}.{os.getpid()}")
    staged.write_text("passed\n")
    staged.replace(marker)
