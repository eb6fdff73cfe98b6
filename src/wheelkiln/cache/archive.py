"""Cache handoff archives: a shard's cache directory plus a manifest, and safe unpacking.

An archive is a gzip'd tar with ``manifest.json`` at the top and the cache under
``cache/``. Unpacking checks every member first and refuses absolute paths, ``..``,
links and devices, so a tampered archive writes nothing anywhere.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from wheelkiln.errors import GateError

MANIFEST = "manifest.json"
CACHE_PREFIX = "cache"
EXTRA_PREFIX = "extra"


def pack(
    cache_dir: Path, manifest: dict[str, Any], out_path: Path, extras: dict[str, Path] | None = None
) -> Path:
    """Write ``out_path`` atomically: manifest, the cache tree, and named extra files."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    with tarfile.open(partial, "w:gz", compresslevel=3) as tar:
        blob = json.dumps(manifest, indent=2, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        for path in sorted(cache_dir.rglob("*")):
            if path.is_file() and not path.is_symlink():
                tar.add(
                    path,
                    arcname=f"{CACHE_PREFIX}/{path.relative_to(cache_dir).as_posix()}",
                    recursive=False,
                )
        for name, path in (extras or {}).items():
            if path.is_file():
                tar.add(path, arcname=f"{EXTRA_PREFIX}/{name}", recursive=False)
    partial.replace(out_path)
    return out_path


def _check_member(archive: Path, member: tarfile.TarInfo) -> None:
    name = member.name
    parts = PurePosixPath(name).parts
    problem = None
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        problem = "an absolute path"
    elif ".." in parts:
        problem = "a '..' component"
    elif member.issym() or member.islnk():
        problem = "a link"
    elif not (member.isfile() or member.isdir()):
        problem = "a device or special file"
    if problem:
        raise GateError(
            f"{archive}: member {name!r} is {problem}; the archive was rejected and nothing "
            "was extracted.",
            hint="Shard archives are written by `kiln shard`; rebuild that shard rather than "
            "trusting this file.",
        )


def read_manifest(archive: Path) -> dict[str, Any]:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            member = tar.getmember(MANIFEST)
            handle = tar.extractfile(member)
            assert handle is not None
            data: dict[str, Any] = json.loads(handle.read())
            return data
    except (tarfile.TarError, KeyError, OSError, json.JSONDecodeError) as exc:
        raise GateError(
            f"{archive}: not a readable shard archive ({exc}).",
            hint="Re-run the shard job that produced it.",
        ) from None


def unpack(archive: Path, cache_dir: Path, extras_dir: Path | None = None) -> list[str]:
    """Merge the archive's cache into ``cache_dir``; extras go to ``extras_dir``.

    Every member is checked before anything is written.
    """
    try:
        with tarfile.open(archive, "r:gz") as tar:
            return _unpack_members(archive, tar, cache_dir, extras_dir)
    except (tarfile.TarError, OSError) as exc:
        raise GateError(
            f"{archive}: not a readable shard archive ({exc}).", hint="Re-run the shard."
        ) from None


def _unpack_members(
    archive: Path, tar: tarfile.TarFile, cache_dir: Path, extras_dir: Path | None
) -> list[str]:
    members = tar.getmembers()
    for member in members:
        _check_member(archive, member)
    written: list[str] = []
    for member in members:
        if not member.isfile():
            continue
        top, _, rest = member.name.partition("/")
        if top == CACHE_PREFIX and rest:
            target = cache_dir / rest
        elif top == EXTRA_PREFIX and rest and extras_dir is not None:
            target = extras_dir / rest
        else:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        assert source is not None
        with target.open("wb") as out:
            out.write(source.read())
        written.append(member.name)
    return written
