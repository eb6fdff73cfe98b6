"""The remote handoff file: what a shard that put its cache entries on remote storage
hands to the link job instead of an archive.

A shard job built with ``--handoff remote`` stores every entry on the remote cache
storage (under its namespace) as it compiles, so its cache does not travel. What the
link job still needs travels in one small JSON file, ``<cell>-shard-<i>-of-<N>.handoff.json``
(:func:`wheelkiln.cells.shard_handoff`): the shard's manifest (cell, shard i/N,
toolchain fingerprint, the TUs it compiled, its counters, and the storage and namespace
it wrote to) and its wrapper log, which the compile ledger and the miss explanations
read. On a Dask fleet the same content is the shard task's result.

This module is the file's one writer and reader. The file crosses a job boundary, so it
is read as an archive's manifest and log are: its size is capped before it is parsed,
the manifest is the strict :class:`~wheelkiln.cache.manifest.ShardManifest` (and must
name its remote storage), and the log is checked line by line by
:func:`~wheelkiln.shard.wrapper_log.parse_wrapper_log`; every refusal names the file
and the key or line. The storage a manifest names is never connected to: the link job
reads its own remote setting and only compares the namespace
(:func:`wheelkiln.shard.link.remote_refusal`).
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from wheelkiln.cache.archive import format_size, json_document, printable
from wheelkiln.cache.manifest import ManifestError, ShardManifest, validate_manifest
from wheelkiln.errors import GateError
from wheelkiln.shard.wrapper_log import WrapperRecord, parse_wrapper_log

Handoff = Literal["archive", "remote"]
"""How a shard hands its cache to the link job: an archive of its cache directory, or
its entries on the remote storage plus a handoff file."""
HANDOFFS: Final[tuple[Handoff, ...]] = ("archive", "remote")

MANIFEST_KEY = "manifest"
WRAPPER_LOG_KEY = "wrapper_log"
DEFAULT_MAX_HANDOFF_BYTES = 256 * 1024**2
"""A handoff is a manifest and one log line per compiler call: a few MiB for the largest
packages. Past this it is not a handoff, and is not read into memory."""
_HINT = (
    "A handoff file is written by `kiln shard --handoff remote`; run that shard job again "
    "rather than trusting this one."
)


@dataclass(frozen=True)
class RemoteHandoff:
    """One shard's remote handoff, checked."""

    manifest: ShardManifest
    records: list[WrapperRecord]
    where: str
    """The file (or task result) it was read from, for messages."""


def handoff_data(manifest: Mapping[str, Any], wrapper_log: Path) -> dict[str, Any]:
    """The handoff of a shard: its manifest and the text of its wrapper log."""
    text = wrapper_log.read_text(encoding="utf-8") if wrapper_log.is_file() else ""
    return {MANIFEST_KEY: dict(manifest), WRAPPER_LOG_KEY: text}


def write_handoff(path: Path, manifest: Mapping[str, Any], wrapper_log: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(handoff_data(manifest, wrapper_log), sort_keys=True) + "\n")
    partial.replace(path)
    return path


def read_handoff(path: Path, max_bytes: int = DEFAULT_MAX_HANDOFF_BYTES) -> RemoteHandoff:
    """The handoff file at *path*, checked; a GateError names what is wrong.

    Only a regular file is read, and no more than *max_bytes* of it: opened without
    blocking and checked on the open descriptor, so a fifo named ``*.handoff.json``
    cannot hang the link job, nor a link to ``/dev/zero`` (whose size says 0) fill its
    memory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise GateError(
            f"{path}: cannot open it ({exc.strerror}).",
            hint="Check that the shard job's handoff file was downloaded completely and is "
            "readable.",
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise GateError(
            f"{path}: not a regular file, so not a shard handoff; nothing was read.",
            hint=_HINT,
        )
    with os.fdopen(fd, "rb") as handle:
        # to one byte past the cap: a file that grew after fstat is caught too
        blob = handle.read(max_bytes + 1) if info.st_size <= max_bytes else b""
    if max(info.st_size, len(blob)) > max_bytes:
        raise GateError(
            f"{path} is {format_size(max(info.st_size, len(blob)))}, more than a shard "
            f"handoff may be ({format_size(max_bytes)}); it was not read.",
            hint=_HINT,
        )
    data, problem = json_document(blob)
    if problem is None:
        return check_handoff(data, str(path), max_bytes)
    raise GateError(f"{path}: {problem}.", hint=_HINT)


def check_handoff(
    data: Any, where: str, max_bytes: int = DEFAULT_MAX_HANDOFF_BYTES
) -> RemoteHandoff:
    """*data* (a parsed handoff file, or a shard task's result) checked as a handoff."""
    if not isinstance(data, dict) or set(data) != {MANIFEST_KEY, WRAPPER_LOG_KEY}:
        if isinstance(data, dict):
            keys = sorted(map(str, data))
            found = str(keys[:5])[:-1] + (f", and {len(keys) - 5} more]" if len(keys) > 5 else "]")
        else:
            found = type(data).__name__
        raise GateError(
            f"{where} is not a shard handoff: it must hold exactly the keys "
            f"{MANIFEST_KEY!r} and {WRAPPER_LOG_KEY!r}, not {found}.",
            hint=_HINT,
        )
    log = data[WRAPPER_LOG_KEY]
    if not isinstance(log, str):
        raise GateError(
            f"{where}: {WRAPPER_LOG_KEY} is {type(log).__name__}, not the log's text.", hint=_HINT
        )
    try:
        blob = log.encode("utf-8")
    except UnicodeEncodeError as exc:
        # json reads "\\ud800" as a lone surrogate, which no text kiln wrote holds
        raise GateError(
            f"{where}: {WRAPPER_LOG_KEY} is not text (a lone surrogate, {log[exc.start]!r}, "
            f"at character {exc.start}).",
            hint=_HINT,
        ) from None
    if len(blob) > max_bytes:
        raise GateError(
            f"{where}: {WRAPPER_LOG_KEY} is {format_size(len(blob))}, more than a shard "
            f"handoff may be ({format_size(max_bytes)}).",
            hint=_HINT,
        )
    try:
        manifest = validate_manifest(data[MANIFEST_KEY])
    except ManifestError as exc:
        raise GateError(
            f"{where}: {MANIFEST_KEY} is not a shard manifest: {printable(str(exc))}.", hint=_HINT
        ) from None
    if manifest.remote is None:
        raise GateError(
            f"{where}: {MANIFEST_KEY}.remote is missing: a handoff without an archive must "
            "name the remote storage that holds the shard's entries.",
            hint=_HINT,
        )
    records = parse_wrapper_log(io.BytesIO(blob), f"{where}, {WRAPPER_LOG_KEY}")
    return RemoteHandoff(manifest, records, where)
