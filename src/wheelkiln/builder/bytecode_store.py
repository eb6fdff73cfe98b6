"""Compiled bytecode shared between build environments, by distribution.

Every environment's modules are compiled to bytecode (``environment.compile_bytecode``):
about 0.3-0.7 s of a new small environment's way to its backend hook, and 30 s beside
the build for a CUDA torch one. A new environment mostly holds distributions an earlier
one held too, and uv installs a distribution's files as hard links to its package
cache, so two environments made from one cache entry hold the same source files, with
the same modification time. Python accepts a ``.pyc`` whose header records its source's
modification time and size (``timestamp`` pycs), wherever it was compiled, and fixes
the file name its code objects carry when it loads it.

So compiled files are kept once per distribution under
``$KILN_HOME/bytecode/<name>-<version>-<digest of its modules' hashes>/`` (hard links,
at their path under ``site-packages``; :func:`keep`), and a new environment gets every
kept file whose header matches its own source (:func:`seed`): its backend's package
before the hook imports it, the rest as its compile beside the build starts (linking
a CUDA torch environment's 20,000 files took 1.4 s, too long to wait for). A file whose
header does not match (the source came from another cache entry) is left out and
compiled as before; Python checks each one at import either way. Nothing writes into a
``.pyc`` in place (Python and ``py_compile`` write a new file and rename it), so a file
linked into several environments never changes under one of them.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import struct
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

_DIST_INFO = re.compile(r"(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)\.dist-info")
_HEADER = struct.Struct("<4sIII")
"""A pyc's header (PEP 552): magic, flags (0: checked by timestamp), the source's
modification time and size, each truncated to 32 bits."""


def store_for(envs_root: Path) -> Path:
    """Where the bytecode of the environments under *envs_root* is kept: beside them
    (``$KILN_HOME/bytecode`` for ``$KILN_HOME/envs``)."""
    return envs_root.parent / "bytecode"


def _site_and_tag(environment: Path) -> tuple[Path, str] | None:
    """The environment's site-packages and CPython's cache tag for it (``cpython-311``);
    None for another implementation or an unexpected layout."""
    try:
        config = (environment / "pyvenv.cfg").read_text(errors="replace")
    except OSError:
        return None
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == "implementation" and value.strip().lower() != "cpython":
            return None
    sites = sorted(environment.glob("lib/python3.*/site-packages"))
    if len(sites) != 1:
        return None
    version = sites[0].parent.name.removeprefix("python")
    return sites[0], "cpython-" + version.replace(".", "")


def _distributions(site: Path) -> Iterator[tuple[str, list[Path]]]:
    """The store's name for each distribution in *site*, with the modules it installed
    (``.py`` files under site-packages, from its ``RECORD``): ``name-version-<digest>``,
    the digest over those ``RECORD`` rows (each with its file's hash), so two builds of
    one version with different sources never share bytecode, whatever their files'
    times."""
    for info in sorted(site.glob("*.dist-info")):
        found = _DIST_INFO.fullmatch(info.name)
        if not found:
            continue
        try:
            with (info / "RECORD").open(newline="", errors="replace") as record:
                rows = sorted(
                    row
                    for row in csv.reader(record)
                    if row and row[0].endswith(".py") and not row[0].startswith(("/", ".."))
                )
        except OSError:
            continue
        digest = hashlib.sha256()
        for row in rows:
            digest.update(",".join(row).encode() + b"\n")
        name = f"{found['name'].lower()}-{found['version']}-{digest.hexdigest()[:12]}"
        yield name, [Path(row[0]) for row in rows]


def _matches(pyc: Path, source: Path) -> bool:
    """True when *pyc* is a timestamp pyc of *source* as it is now."""
    try:
        with pyc.open("rb") as handle:
            header = handle.read(_HEADER.size)
        stat = source.stat()
    except OSError:
        return False
    if len(header) != _HEADER.size:
        return False
    flags: int
    mtime: int
    size: int
    _, flags, mtime, size = _HEADER.unpack(header)
    return (
        flags == 0
        and mtime == int(stat.st_mtime) & 0xFFFFFFFF
        and size == stat.st_size & 0xFFFFFFFF
    )


def _source_of(pyc_relative: Path) -> Path:
    """``pkg/mod.py`` for ``pkg/__pycache__/mod.cpython-311.pyc``."""
    return pyc_relative.parent.parent / (pyc_relative.name.split(".", 1)[0] + ".py")


def seed(environment: Path, store: Path, packages: Sequence[str] = ()) -> int:
    """Link into *environment* every kept ``.pyc`` of its distributions whose header
    matches the environment's source and that it lacks, or only those under the
    top-level *packages* (``setuptools``); the number linked."""
    found = _site_and_tag(environment)
    if found is None or not store.is_dir():
        return 0
    site, tag = found
    linked = 0
    for name_version, _ in _distributions(site):
        kept = store / name_version
        tops = [kept / package for package in packages] if packages else [kept]
        for folder, _, names in (entry for top in tops for entry in os.walk(top)):
            for name in names:
                if not name.endswith(f".{tag}.pyc"):
                    continue
                stored = Path(folder) / name
                relative = stored.relative_to(kept)
                target = site / relative
                if (
                    stored.is_symlink()  # only files kiln linked in are taken
                    or target.exists()
                    or not _matches(stored, site / _source_of(relative))
                ):
                    continue
                try:
                    target.parent.mkdir(exist_ok=True)
                    os.link(stored, target, follow_symlinks=False)
                except FileExistsError:
                    continue
                except OSError:
                    return linked  # another file system, or not writable: compile instead
                linked += 1
    return linked


def keep(environment: Path, store: Path) -> int:
    """Link each compiled module of *environment* into *store* under its distribution,
    where the store lacks it or holds one compiled from another copy of the source;
    the number kept."""
    found = _site_and_tag(environment)
    if found is None:
        return 0
    site, tag = found
    kept = 0
    for name_version, modules in _distributions(site):
        for module in modules:
            relative = module.parent / "__pycache__" / f"{module.stem}.{tag}.pyc"
            compiled, source = site / relative, site / module
            target = store / name_version / relative
            if compiled.is_symlink() or not _matches(compiled, source):
                continue
            try:
                if target.exists() and (
                    target.samefile(compiled) or _matches(target, source)
                ):
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                staged = target.with_name(
                    f".{target.name}.{os.getpid()}.{threading.get_ident()}"
                )
                staged.unlink(missing_ok=True)
                os.link(compiled, staged, follow_symlinks=False)
                staged.replace(target)
            except OSError:
                return kept  # another file system, or not writable: nothing to share
            kept += 1
    return kept


def compiled_already(environment: Path, tops: list[Path]) -> bool:
    """True when every module under *tops* (directories in *environment*'s
    site-packages) has a current ``.pyc``: a compile there would only check them."""
    found = _site_and_tag(environment)
    if found is None:
        return False
    _, tag = found
    for top in tops:
        for folder, _, names in os.walk(top):
            for name in names:
                if name.endswith(".py") and not _matches(
                    Path(folder) / "__pycache__" / f"{name[:-3]}.{tag}.pyc", Path(folder) / name
                ):
                    return False
    return True
