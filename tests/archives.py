"""Shard archives taken apart and put back together, for tests that tamper with them."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

Member = tuple[tarfile.TarInfo, bytes]


def read_members(archive: Path) -> list[Member]:
    members: list[Member] = []
    with tarfile.open(archive, "r:gz") as tar:
        for info in tar.getmembers():
            handle = tar.extractfile(info) if info.isfile() else None
            members.append((info, handle.read() if handle else b""))
    return members


def write_members(path: Path, members: list[Member], *, compress: bool = True) -> Path:
    """A tar of ``members`` as given: names, types and sizes are not checked or fixed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    blob = buffer.getvalue()
    path.write_bytes(gzip.compress(blob, compresslevel=3) if compress else blob)
    return path


def file_member(name: str, data: bytes) -> Member:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def special_member(name: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, b""


def replace_member(members: list[Member], name: str, data: bytes | None) -> list[Member]:
    """``members`` with member ``name``'s bytes replaced (or the member removed: None)."""
    out: list[Member] = []
    for info, old in members:
        if info.name != name:
            out.append((info, old))
        elif data is not None:
            out.append(file_member(name, data))
    return out


def change_manifest(members: list[Member], change: Callable[[dict[str, Any]], Any]) -> list[Member]:
    """``members`` with the manifest passed through ``change`` (which may edit it in place
    and return None, or return what the manifest becomes)."""
    data = json.loads(dict((info.name, blob) for info, blob in members)["manifest.json"])
    result = change(data)
    return replace_member(members, "manifest.json", json.dumps(data if result is None else result).encode())


def valid_manifest(cell: str = "c", index: int = 0, count: int = 1) -> dict[str, Any]:
    """A manifest as `kiln shard` writes one, for archives packed by a unit test."""
    return {
        "schema": 1,
        "recipe": "r",
        "cell": cell,
        "index": index,
        "count": count,
        "label": f"{index + 1}/{count}",
        "partition": "seat",
        "toolchain": {
            "compilers": {"gcc": "12.2.0"},
            "cache": {"ccache": "4.14"},
            "arch_list": [],
            "build_env": {},
        },
        "stats": {"hits": 0, "misses": 3},
        "tus": ["src/a.c"],
        "created": "2026-01-01T00:00:00+00:00",
        "gate": {"passed": True, "reasons": []},
    }
