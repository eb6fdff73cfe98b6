"""Shard archives: round trip, and tampered archives rejected before anything is written."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from wheelkiln.cache.archive import pack, read_manifest, unpack
from wheelkiln.errors import GateError


def test_round_trip_merges_cache_and_extras(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "a" / "b").mkdir(parents=True)
    (cache / "a" / "b" / "entry").write_bytes(b"object")
    log = tmp_path / "wrapper.jsonl"
    log.write_text('{"action": "compile"}\n')
    archive = pack(
        cache,
        {"cell": "c", "index": 0},
        tmp_path / "out" / "c-shard-0-of-2.tar.gz",
        extras={"wrapper.jsonl": log},
    )
    assert read_manifest(archive) == {"cell": "c", "index": 0}
    merged = tmp_path / "merged"
    unpack(archive, merged, tmp_path / "extras")
    assert (merged / "a" / "b" / "entry").read_bytes() == b"object"
    assert (tmp_path / "extras" / "wrapper.jsonl").read_text() == log.read_text()


def _tampered(path: Path, member: tarfile.TarInfo, data: bytes = b"x") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        good = tarfile.TarInfo("cache/ok")
        good.size = 2
        tar.addfile(good, io.BytesIO(b"ok"))
        if member.isfile():
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        else:
            tar.addfile(member)
    return path


@pytest.mark.parametrize(
    ("name", "kind", "reason"),
    [
        ("cache/../../x", tarfile.REGTYPE, "a '..' component"),
        ("/tmp/abs-x", tarfile.REGTYPE, "an absolute path"),
        ("cache/link", tarfile.SYMTYPE, "a link"),
        ("cache/hard", tarfile.LNKTYPE, "a link"),
        ("cache/dev", tarfile.CHRTYPE, "a device or special file"),
    ],
)
def test_tampered_archive_is_rejected_and_writes_nothing(
    tmp_path: Path, name: str, kind: bytes, reason: str
) -> None:
    member = tarfile.TarInfo(name)
    member.type = kind
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        member.linkname = "/etc/passwd"
    archive = _tampered(tmp_path / "evil.tar.gz", member)
    target = tmp_path / "deep" / "merged"
    with pytest.raises(GateError) as caught:
        unpack(archive, target)
    assert f"member {name!r} is {reason}" in caught.value.message
    assert not target.exists()
    assert not (tmp_path / "x").exists() and not Path("/tmp/abs-x").exists()
