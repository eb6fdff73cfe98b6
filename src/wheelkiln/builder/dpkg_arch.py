"""``dpkg-architecture -qDEB_HOST_MULTIARCH`` answered without starting Perl.

On Debian and its derivatives meson asks ``dpkg-architecture -qDEB_HOST_MULTIARCH`` in
every ``meson setup`` for the default ``libdir`` (``lib/x86_64-linux-gnu``): a Perl start
that loads dpkg's modules and asks ``$CC -dumpmachine``, 0.05 s of a hot demo-cython
setup at load 2. In a meson build kiln puts a ``dpkg-architecture`` front first on PATH
that prints the kept answer for exactly that question and ``exec``s the real program for
anything else (as the ``meson`` front does, :mod:`wheelkiln.builder.meson_version`).

The answer is asked once and kept under ``$KILN_HOME/dpkg-architecture/<key>``; the
key holds what it depends on: the real script and ``dpkg`` (resolved path, inode, size,
mtime: an upgrade of dpkg rewrites them), dpkg's architecture tables (each file of
``$DPKG_DATADIR``, by the same identity), the variables it reads (``DEB_*``, ``DPKG_*``,
``CC`` and the compiler ``CC`` names, by path and identity) and the resolved PATH. Only a
bare multiarch triplet is kept; the front holds the answer and the real path, and is
content-addressed like the compiler fronts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from wheelkiln.builder.compiler_answers import file_identity
from wheelkiln.builder.meson_version import answering_front

QUESTION = "-qDEB_HOST_MULTIARCH"
TRIPLET = re.compile(r"[a-z0-9_]+(-[a-z0-9_]+)+\n?")
"""What the answer is: a multiarch triplet alone, on one line."""


def answer_key(real: str, environ: Mapping[str, str]) -> str:
    """The digest of what the answer of *real* depends on (module doc)."""
    path = environ.get("PATH", os.defpath)
    data_dir = Path(environ.get("DPKG_DATADIR", "/usr/share/dpkg"))
    try:
        tables = {entry.name: file_identity(str(entry)) for entry in sorted(data_dir.iterdir())}
    except OSError:
        tables = {}
    compiler = environ.get("CC", "").split()
    blob = json.dumps(
        {
            "script": file_identity(real),
            "dpkg": file_identity(shutil.which("dpkg", path=path)),
            "tables": tables,
            "variables": {
                k: v for k, v in sorted(environ.items()) if k.startswith(("DEB_", "DPKG_"))
            },
            "cc": [environ.get("CC"), file_identity(shutil.which(compiler[0], path=path))]
            if compiler
            else None,
            "path": [os.path.realpath(entry) for entry in path.split(os.pathsep) if entry],
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def dpkg_arch_front(environ: Mapping[str, str], store: Path, scripts_dir: Path) -> str | None:
    """The directory of a ``dpkg-architecture`` front for the build's PATH, or None
    where there is no dpkg-architecture, its answer is not a bare triplet, or it cannot
    be kept (then meson runs the real one)."""
    real = shutil.which("dpkg-architecture", path=environ.get("PATH", os.defpath))
    if real is None:
        return None
    return answering_front(
        "dpkg-architecture", real, QUESTION, store / answer_key(real, environ), TRIPLET,
        environ, scripts_dir,
    )
