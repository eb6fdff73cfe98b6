"""Shard archives: round trip, limits, and tampered archives refused before anything is
written. (tests/integration/test_hostile_archives.py does the same to a real archive.)"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import re
import tarfile
from pathlib import Path

import pytest

from tests.archives import (
    change_manifest,
    file_member,
    read_members,
    special_member,
    valid_manifest,
    write_members,
)
from wheelkiln.cache.archive import (
    DEFAULT_MAX_MEMBERS,
    DEFAULT_MAX_UNPACKED_SIZE,
    ArchiveLimits,
    Layout,
    copy_capped,
    extract,
    extract_tree,
    format_size,
    inspect_archive,
    pack,
    parse_size,
    read_manifest,
    unpack,
)
from wheelkiln.errors import BuildError, GateError, UsageError


@pytest.fixture
def packed(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    (cache / "a" / "b").mkdir(parents=True)
    (cache / "a" / "b" / "entry").write_bytes(b"object")
    log = tmp_path / "wrapper.jsonl"
    log.write_text('{"action": "compile"}\n')
    return pack(
        cache,
        valid_manifest(),
        tmp_path / "out" / "c-shard-0-of-1.tar.gz",
        extras={"wrapper.jsonl": log},
    )


def test_round_trip_merges_cache_and_extras(tmp_path: Path, packed: Path) -> None:
    # An archive's manifest names no remote storage: its entries are in the archive.
    assert read_manifest(packed).model_dump(by_alias=True) == {**valid_manifest(), "remote": None}
    merged = tmp_path / "merged"
    (merged / "a").mkdir(parents=True)
    (merged / "a" / "other").write_bytes(b"from another shard")
    contents = unpack(packed, merged, tmp_path / "extras")
    assert (merged / "a" / "b" / "entry").read_bytes() == b"object"
    assert (merged / "a" / "other").read_bytes() == b"from another shard"
    assert (tmp_path / "extras" / "wrapper.jsonl").read_text() == '{"action": "compile"}\n'
    assert (contents.members, contents.manifest.cell) == (3, "c")
    assert not list(tmp_path.glob(".kiln-unpack-*")), "the staging directory is removed"


def test_pack_refuses_a_manifest_the_reader_would_refuse(tmp_path: Path) -> None:
    from wheelkiln.cache.manifest import ManifestError

    with pytest.raises(ManifestError, match="index: Input should be a valid integer"):
        pack(tmp_path, {**valid_manifest(), "index": "0"}, tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()


def _with(tmp_path: Path, packed: Path, *extra: tuple[tarfile.TarInfo, bytes]) -> Path:
    return write_members(tmp_path / "evil.tar.gz", [*read_members(packed), *extra])


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (file_member("cache/../../x", b"x"), "is a path with a '..' component"),
        (file_member("/tmp/abs-x", b"x"), "is an absolute path"),
        (file_member("cache//tmp/abs-x", b"x"), "is a path with an empty component"),
        (file_member("extra//tmp/abs-x", b"x"), "is a path with an empty component"),
        (file_member("cache/./x", b"x"), "is a path with a '.' component"),
        (file_member("elsewhere/x", b"x"), "is outside manifest.json, cache/ and extra/"),
        (file_member("cache", b"x"), "is outside manifest.json, cache/ and extra/"),
        (file_member("cache/a/b/entry", b"again"), "is a second member of the same name"),
        (special_member("cache/link", tarfile.SYMTYPE, "/etc/passwd"), "is a symbolic link"),
        (special_member("cache/rel", tarfile.SYMTYPE, "a"), "is a symbolic link (to 'a')"),
        (special_member("cache/hard", tarfile.LNKTYPE, "/etc/passwd"), "is a hard link"),
        (special_member("cache/dev", tarfile.CHRTYPE), "is a device"),
        (special_member("cache/blk", tarfile.BLKTYPE), "is a device"),
        (special_member("cache/fifo", tarfile.FIFOTYPE), "is a fifo"),
        # the fixture's archive holds cache/a/b/entry, a file
        (file_member("cache/a/b", b"x"), "is a file, and a directory of that name is in this "
         "archive"),
        (file_member("cache/a/b/entry/x", b"x"), "is under 'cache/a/b/entry', which is a file "
         "in this archive"),
        (file_member("cache/" + "n" * 256, b"x"), "is a path with a component longer than 255 "
         "bytes"),
        (file_member("cache/" + "/".join(["d" * 200] * 21), b"x"), "is a path longer than "
         "4096 bytes"),
    ],
    ids=lambda value: value[0].name if isinstance(value, tuple) else None,
)
def test_tampered_archive_is_rejected_and_writes_nothing(
    tmp_path: Path, packed: Path, member: tuple[tarfile.TarInfo, bytes], reason: str
) -> None:
    archive = _with(tmp_path, packed, member)
    target = tmp_path / "deep" / "merged"
    with pytest.raises(GateError) as caught:
        unpack(archive, target, tmp_path / "extras")
    assert caught.value.message.startswith(f"{archive}, member {member[0].name!r} {reason}")
    assert "nothing was extracted" in caught.value.message
    assert not target.exists() and not (tmp_path / "extras").exists()
    assert not (tmp_path / "x").exists() and not Path("/tmp/abs-x").exists()
    # the second pass checks every member again, on its own
    with pytest.raises(GateError, match="rejected"):
        extract(archive, target, tmp_path / "extras")
    assert not any(target.rglob("*")), "nothing of the good members was merged either"


def test_the_size_cap_is_enforced_from_the_headers_before_writing(
    tmp_path: Path, packed: Path
) -> None:
    archive = _with(tmp_path, packed, file_member("cache/zero", bytes(3 * 1024**2)))
    limits = ArchiveLimits(max_unpacked_size=2 * 1024**2)
    target = tmp_path / "merged"
    with pytest.raises(GateError) as caught:
        unpack(archive, target, limits=limits)
    assert caught.value.message == (
        f"{archive}, member 'cache/zero': its header says 3 MiB, which takes the archive past "
        "the limit of 2 MiB unpacked per archive; nothing was extracted from it."
    )
    assert caught.value.hint is not None
    assert "--max-unpacked-size 4MiB (or KILN_MAX_UNPACKED_SIZE=4MiB)" in caught.value.hint
    assert not target.exists()
    # extract alone (no first pass) stops at the same header, before the member's bytes
    with pytest.raises(GateError, match="takes the archive past the limit of 2 MiB"):
        extract(archive, target, limits=limits)
    assert not any(target.rglob("*")) and not list(tmp_path.glob(".kiln-unpack-*"))
    assert unpack(archive, tmp_path / "roomy", limits=ArchiveLimits(4 * 1024**2)).unpacked_size > 3 * 1024**2


def test_the_member_cap(tmp_path: Path, packed: Path) -> None:
    many = [file_member(f"cache/m/{i}", b"") for i in range(20)]
    archive = _with(tmp_path, packed, *many)
    with pytest.raises(GateError) as caught:
        inspect_archive(archive, ArchiveLimits(max_members=10))
    assert caught.value.message.startswith(f"{archive}, member 'cache/m/7': the archive has "
                                           "more than 10 members")
    assert "--max-members 20 (or KILN_MAX_MEMBERS=20)" in str(caught.value.hint)
    assert inspect_archive(archive, ArchiveLimits(max_members=23)).members == 23


def test_streaming_refuses_a_member_longer_than_its_header_and_leaves_no_partial_file(
    tmp_path: Path,
) -> None:
    target = tmp_path / "out"
    with pytest.raises(GateError, match="yields more bytes than its header's 1 KiB"):
        copy_capped(io.BytesIO(bytes(4096)), target, 1024, 10**9, "A, member 'm'")
    assert not target.exists()
    with pytest.raises(GateError, match="passes the limit on unpacked size"):
        copy_capped(io.BytesIO(bytes(4096)), target, 4096, 1000, "A, member 'm'")
    assert not target.exists()
    assert copy_capped(io.BytesIO(b"abc"), target, 3, 3, "A, member 'm'") == 3
    with pytest.raises(FileExistsError):  # never through an existing file or link
        copy_capped(io.BytesIO(b"abc"), target, 3, 3, "A, member 'm'")


def test_a_header_that_understates_its_size_is_refused(tmp_path: Path, packed: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in read_members(packed):
            tar.addfile(info, io.BytesIO(data))
        liar = tarfile.TarInfo("cache/liar")
        liar.size = 10
        buffer.write(liar.tobuf())
        buffer.write(b"\x01" * 2 * 1024**2)  # hidden bytes tarfile alone would drop
    archive = tmp_path / "liar.tar.gz"
    import gzip

    archive.write_bytes(gzip.compress(buffer.getvalue()))
    with pytest.raises(GateError) as caught:
        unpack(archive, tmp_path / "merged")
    assert caught.value.message.startswith(
        f"{archive}, member 'cache/liar': after this member the archive holds data that is "
        "not a tar header"
    )
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda m: [m], "the top level: Input should be a valid dictionary"),
        (lambda m: m.update(toolchain="gcc"), "toolchain: Input should be a valid dictionary"),
        (lambda m: m.update(count="3"), "count: Input should be a valid integer"),
        (lambda m: m.update(count=0), "count: Input should be greater than or equal to 1"),
        (lambda m: m.update(extra=1), "extra: Extra inputs are not permitted"),
        (lambda m: m.pop("cell") and None, "cell: Field required"),
    ],
)
def test_manifest_must_match_the_model(
    tmp_path: Path, packed: Path, change: object, problem: str
) -> None:
    archive = write_members(tmp_path / "m.tar.gz", change_manifest(read_members(packed), change))  # type: ignore[arg-type]
    with pytest.raises(GateError) as caught:
        read_manifest(archive)
    assert caught.value.message.startswith(
        f"{archive}, member 'manifest.json' is not a shard manifest: {problem}"
    )


def test_unreadable_archives_are_named(tmp_path: Path, packed: Path) -> None:
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(packed.read_bytes()[:-40])
    with pytest.raises(GateError, match=r"truncated.tar.gz, (member '.*'|at its first member): "
                       r"not a readable gzip'd tar \(truncated: "):
        inspect_archive(truncated)
    plain = tmp_path / "plain.tar.gz"
    plain.write_bytes(b"PK\x03\x04 a zip, not a tar")
    with pytest.raises(GateError, match=r"plain.tar.gz, at its first member: .*\(Not a gzipped file"):
        inspect_archive(plain)
    with pytest.raises(GateError, match="cannot open it"):
        inspect_archive(tmp_path / "missing.tar.gz")
    blob = bytearray(packed.read_bytes())
    # Any flipped byte after the gzip header (whose file name field no checksum covers)
    # is named, unless it changes nothing at all: deflate ignores some bits (the lengths of
    # codes a block never uses), and which bytes those are depends on the members' mtimes.
    original = gzip.decompress(bytes(blob))
    named = 0
    for offset in range(64, len(blob)):
        changed = blob[:offset] + bytes([blob[offset] ^ 0xFF]) + blob[offset + 1:]
        flipped = tmp_path / "flipped.tar.gz"
        flipped.write_bytes(changed)
        try:
            unpack(flipped, tmp_path / f"flipped-{offset}")
        except GateError as exc:
            assert re.match(r".*flipped.tar.gz, (member '.*'|at its first member): ", str(exc))
            named += 1
            continue
        assert gzip.decompress(bytes(changed)) == original, f"byte {offset} changed the archive unseen"
    assert named > (len(blob) - 64) * 0.8
    fifo = tmp_path / "fifo.tar.gz"
    os.mkfifo(fifo)  # opening it would block for ever
    with pytest.raises(GateError, match=r"fifo.tar.gz: not a regular file"):
        inspect_archive(fifo)
    json_bytes = json.dumps(valid_manifest()).encode()
    for blob, problem in [(b'{"cell": "\xff"}', "not UTF-8 (byte 0xff at offset 10)"),
                          (json_bytes[:-1], "not JSON (Expecting ',' delimiter"),
                          (b"[" * 100_000, "JSON nested too deeply"),
                          (b'{"schema": 1, "count": ' + b"9" * 5000 + b"}",
                           "not JSON kiln reads (a number too long to convert)")]:
        bad = write_members(tmp_path / "bad.tar.gz", [file_member("manifest.json", blob)])
        with pytest.raises(GateError, match=re.escape(problem)):
            read_manifest(bad)
    bare = write_members(tmp_path / "bare.tar.gz", [file_member("cache/x", b"x")])
    with pytest.raises(GateError, match=r"bare.tar.gz, member 'manifest.json' is missing"):
        read_manifest(bare)


def test_a_write_error_is_ours_not_the_archive(
    tmp_path: Path, packed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("wheelkiln.cache.archive.shutil.move", full)
    with pytest.raises(BuildError, match=r"Could not unpack .*No space left on device"):
        unpack(packed, tmp_path / "merged")


def _archive_of(path: Path, *names: str) -> Path:
    return write_members(
        path,
        [file_member("manifest.json", json.dumps(valid_manifest()).encode()),
         *(file_member(name, name.encode()) for name in names)],
    )


def test_a_file_never_lands_on_a_directory_an_earlier_archive_left(tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    first = _archive_of(tmp_path / "first.tar.gz", "cache/a/b", "cache/same")
    extract(first, merged)
    second = _archive_of(tmp_path / "second.tar.gz", "cache/same", "cache/z", "cache/a")
    with pytest.raises(GateError) as caught:
        extract(second, merged)
    assert caught.value.message == (
        f"{second}, member 'cache/a': an earlier archive left a directory at {merged / 'a'}, "
        "where this one needs a file; the archive was rejected and nothing was extracted "
        "from it (what is there was kept)."
    )
    # shutil.move would have put it at a/second-archive's-staging-name
    assert sorted(p.relative_to(merged).as_posix() for p in merged.rglob("*")) == [
        "a", "a/b", "same"]
    assert (merged / "same").read_bytes() == b"cache/same"
    assert not list(tmp_path.glob(".kiln-unpack-*"))
    # a file over a file is a merge: two shards that stored the same entry
    extract(_archive_of(tmp_path / "third.tar.gz", "cache/same", "cache/z"), merged)
    assert (merged / "z").is_file()


def test_a_directory_is_never_made_where_an_earlier_archive_left_a_file(tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    extract(_archive_of(tmp_path / "first.tar.gz", "cache/a"), merged)
    second = _archive_of(tmp_path / "second.tar.gz", "cache/b", "cache/a/b/c")
    with pytest.raises(GateError) as caught:
        extract(second, merged)
    assert caught.value.message.startswith(
        f"{second}, member 'cache/a/b/c': an earlier archive left a file at {merged / 'a'}, "
        "where this one needs a directory; the archive was rejected"
    )
    assert sorted(p.name for p in merged.iterdir()) == ["a"] and (merged / "a").is_file()


def test_a_source_bundle_with_a_name_both_file_and_directory_is_refused(tmp_path: Path) -> None:
    layout = Layout(("recipe.toml",), ("source",), "Bundles are written by kiln.")
    bundle = write_members(
        tmp_path / "bundle.tar.gz", [file_member("source/a/b", b"y"), file_member("source/a", b"x")]
    )
    destination = tmp_path / "tree"
    with pytest.raises(GateError) as caught:
        extract_tree(bundle, destination, layout)
    assert caught.value.message.startswith(
        f"{bundle}, member 'source/a' is a file, and a directory of that name is in this archive"
    )
    bundle = write_members(
        tmp_path / "bundle.tar.gz",
        [file_member("source/a", b"x"), file_member("source/a/b", b"y")],
    )
    with pytest.raises(GateError, match="'source/a/b' is under 'source/a', which is a file"):
        extract_tree(bundle, destination, layout)
    assert not destination.exists() and not list(tmp_path.glob(".kiln-unpack-*"))
    good = write_members(tmp_path / "good.tar.gz", [special_member("source/a", tarfile.DIRTYPE),
                                                     file_member("source/a/b", b"y")])
    assert extract_tree(good, destination, layout) == 1  # files written
    assert (destination / "source" / "a" / "b").read_bytes() == b"y"


def _raw_archive(path: Path, *blocks: bytes) -> Path:
    """A gzip'd tar of raw 512-byte blocks, for headers tarfile would not write."""
    blob = b"".join(block + bytes(-len(block) % 512) for block in blocks)
    path.write_bytes(gzip.compress(blob + bytes(1024)))
    return path


def _header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _manifest_blocks() -> list[bytes]:
    blob = json.dumps(valid_manifest()).encode()
    return [_header("manifest.json", tarfile.REGTYPE, len(blob)), blob]


@pytest.mark.parametrize(
    ("blocks", "problem"),
    [
        # tarfile would read 1.5 GiB into memory before returning the member
        ([_header("PaxHeader/x", tarfile.XHDTYPE, 3 * 512 * 1024**2)],
         "at its first member: a pax extended header of 1.5 GiB, more than the 1 MiB a "
         "header may be"),
        ([*_manifest_blocks(), _header("././@LongLink", tarfile.GNUTYPE_LONGNAME, 2 * 1024**2)],
         "after member 'manifest.json': a GNU long name header of 2 MiB, more than the 1 MiB "
         "a header may be"),
        ([_header("PaxHeader/g", tarfile.XGLTYPE, 1024**2 + 1)],
         "at its first member: a pax global header of 1.0 MiB, more than the 1 MiB a header "
         "may be"),
        # tarfile reads a chain by recursion: 2,000 of them were a RecursionError
        ([_header("PaxHeader/x", tarfile.XHDTYPE, 0)] * 9,
         "at its first member: more than 8 extended headers in a row"),
        ([_header("cache/s", tarfile.GNUTYPE_SPARSE, 0)], "at its first member: a GNU sparse member"),
        # a record length of 5,000 digits: int() raises a bare ValueError inside tarfile
        ([*_manifest_blocks(), _header("PaxHeader/x", tarfile.XHDTYPE, 5008),
          b"1" * 5000 + b" path=x\n", _header("cache/x", tarfile.REGTYPE, 0)],
         "after member 'manifest.json': a header that cannot be read (Exceeds the limit "
         "(4300 digits) for integer string conversion: value has 5000 digits)"),
    ],
    ids=["pax", "gnu-long-name", "pax-global", "chain", "sparse", "digits"],
)
def test_a_header_tarfile_would_read_whole_is_refused_first(
    tmp_path: Path, blocks: list[bytes], problem: str
) -> None:
    archive = _raw_archive(tmp_path / "bomb.tar.gz", *blocks)
    with pytest.raises(GateError) as caught:
        unpack(archive, tmp_path / "merged")
    assert caught.value.message == (
        f"{archive}, {problem}; the archive was rejected and nothing was extracted from it."
    )
    assert not (tmp_path / "merged").exists()


def test_a_pax_sparse_member_is_refused(tmp_path: Path, packed: Path) -> None:
    sparse_10, data = file_member("cache/s", b"1\n0\n1\n")
    sparse_10.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                             "GNU.sparse.name": "cache/s", "GNU.sparse.realsize": "1"}
    archive = _with(tmp_path, packed, (sparse_10, data))
    with pytest.raises(GateError, match=r"after member 'extra/wrapper.jsonl': a pax header of "
                       r"a sparse member \(GNU sparse 1.0\); the archive was rejected"):
        inspect_archive(archive)
    sparse_01, data = file_member("cache/s", b"x")
    sparse_01.pax_headers = {"GNU.sparse.map": "0,1", "GNU.sparse.size": "1"}
    archive = _with(tmp_path, packed, (sparse_01, data))
    with pytest.raises(GateError, match=r"member 'cache/s' is a sparse file; the archive was "
                       "rejected"):
        inspect_archive(archive)


def test_running_out_of_memory_is_a_refusal(
    tmp_path: Path, packed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exhausted(*_: object) -> None:
        raise MemoryError

    monkeypatch.setattr(tarfile.TarInfo, "_proc_builtin", exhausted)
    with pytest.raises(GateError) as caught:
        inspect_archive(packed)
    assert caught.value.message == (
        f"{packed}, at its first member: reading it ran out of memory; the archive was "
        "rejected and nothing was extracted from it."
    )


@pytest.mark.parametrize(
    ("text", "size"),
    [("64MiB", 64 * 1024**2), ("3GB", 3 * 10**9), ("20GiB", 20 * 1024**3), ("1.5g", 1_500_000_000),
     ("512", 512), ("10 kib", 10240), ("2TiB", 2 * 1024**4)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "3XB", "-1GiB", "0", "1e9", "12 parsecs"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a"):
        parse_size(text)


def test_limits_come_from_the_command_line_then_the_environment_then_defaults() -> None:
    env = {"KILN_MAX_UNPACKED_SIZE": "64MiB", "KILN_MAX_MEMBERS": "500"}
    assert ArchiveLimits.resolve(environ={}) == ArchiveLimits(DEFAULT_MAX_UNPACKED_SIZE, DEFAULT_MAX_MEMBERS)
    assert ArchiveLimits.resolve(environ=env) == ArchiveLimits(64 * 1024**2, 500)
    assert ArchiveLimits.resolve(1024, 7, environ=env) == ArchiveLimits(1024, 7)
    assert format_size(DEFAULT_MAX_UNPACKED_SIZE) == "20 GiB"
    with pytest.raises(UsageError, match="KILN_MAX_UNPACKED_SIZE: 'lots' is not a size"):
        ArchiveLimits.resolve(environ={"KILN_MAX_UNPACKED_SIZE": "lots"})
    with pytest.raises(UsageError, match="KILN_MAX_MEMBERS: '0' is not a positive whole number"):
        ArchiveLimits.resolve(environ={"KILN_MAX_MEMBERS": "0"})
