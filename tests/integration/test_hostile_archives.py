"""Hostile shard archives, made by tampering with a real one, against the real `kiln link`
and `kiln shard-plan`.

A link job merges archives uploaded by other jobs, any of which may have run a pull
request's code. Every case here must exit non-zero with a message that names the
archive and the member, print no traceback, write nothing outside the extraction root
(a sentinel directory stays empty) and, for the size caps, write nothing at all.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.archives import (
    Member,
    change_manifest,
    file_member,
    read_members,
    replace_member,
    special_member,
    write_members,
)
from tests.conftest import ROOT, Kiln, copy_example, recipe_for
from wheelkiln.cache.archive import inspect_archive
from wheelkiln.cells import shard_archive

pytestmark = pytest.mark.compile

CELL = "demo-cpp-py3.11-linux-x86_64"
SHARD = shard_archive(CELL, 0, 1)
LOG = "extra/wrapper.jsonl"


@dataclass(frozen=True)
class RealShard:
    recipe: Path
    archive: Path
    members: int
    unpacked_size: int


@pytest.fixture(scope="module")
def real_shard(tmp_path_factory: pytest.TempPathFactory, kiln_home: Path) -> RealShard:
    """demo-cpp's one shard of one (every TU compiled), built once by `kiln shard`."""
    root = tmp_path_factory.mktemp("real-shard")
    tree = copy_example("demo-cpp", root)
    recipe = recipe_for(tree, "demo-cpp", root)
    Kiln(kiln_home, root / "state")(
        "shard", recipe, "--index", "0", "--count", "1", "--partition", "seat",
        "--out", root / "shards", "--workdir", root / "work",
    )
    archive = root / "shards" / SHARD
    members = read_members(archive)
    assert any(info.name == LOG for info, _ in members), "the real archive carries its log"
    # the corpus means something only if the archive it starts from is accepted
    assert inspect_archive(archive).manifest.cell == CELL
    return RealShard(recipe, archive, len(members), sum(info.size for info, _ in members))


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Hostile:
    """One tampered archive: how to make it from the real one, and what the error names."""

    make: Callable[[RealShard, Path], list[Member] | bytes]
    """(the real shard, the sentinel directory) -> the archive's members, or its bytes."""
    names: Callable[[Path], str]
    """(the sentinel) -> the member as the message must name it."""
    env: Callable[[RealShard], dict[str, str]] = field(default=lambda real: {})
    """Limits lowered for this case (the defaults are far above a test's archive)."""
    problem: str = ""
    """A phrase the message must contain."""


def _real(real: RealShard) -> list[Member]:
    return read_members(real.archive)


def _plus(*extra: Member) -> Callable[[RealShard, Path], list[Member]]:
    return lambda real, sentinel: [*_real(real), *extra]


def _escaping(make: Callable[[Path], list[Member]]) -> Callable[[RealShard, Path], list[Member]]:
    return lambda real, sentinel: [*_real(real), *make(sentinel)]


def _sparse(name: str, size: int) -> Member:
    """A GNU sparse member (PAX 0.1) that stores nothing and claims ``size`` bytes."""
    info = tarfile.TarInfo(name)
    info.size = 0
    info.pax_headers = {"GNU.sparse.map": "0,0", "GNU.sparse.size": str(size)}
    return info, b""


def _raw_tar(members: list[Member], tail: bytes) -> bytes:
    """The members as a tar stream with ``tail`` (raw, unchecked bytes) after them."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
        buffer.write(tail)  # before close() writes the end-of-archive blocks
    return buffer.getvalue()


def _lying_header(claimed: int, actual: bytes) -> Callable[[RealShard, Path], bytes]:
    def make(real: RealShard, sentinel: Path) -> bytes:
        liar = tarfile.TarInfo("cache/zz/liar")
        liar.size = claimed
        return gzip.compress(_raw_tar(_real(real), liar.tobuf() + actual), compresslevel=3)

    return make


def _truncated(real: RealShard, sentinel: Path) -> bytes:
    blob = real.archive.read_bytes()
    return blob[: len(blob) // 2]


def _not_gzip(real: RealShard, sentinel: Path) -> bytes:
    return _raw_tar(_real(real), b"")


def _manifest(change: Callable[[dict[str, Any]], Any]) -> Callable[[RealShard, Path], list[Member]]:
    return lambda real, sentinel: change_manifest(_real(real), change)


def _log_line(real: RealShard, sentinel: Path) -> list[Member]:
    members = _real(real)
    lines = dict((info.name, data) for info, data in members)[LOG].splitlines(keepends=True)
    return replace_member(members, LOG, b"".join([*lines[:2], b"<<< not json >>>\n", *lines[2:]]))


def _member(name: str) -> Callable[[Path], str]:
    return lambda sentinel: f"member {name!r}"


MiB = 1024**2

CORPUS: dict[str, Hostile] = {
    # point 1: nothing lands outside the extraction root
    "absolute path": Hostile(
        _escaping(lambda s: [file_member(f"{s}/absolute", b"x")]),
        lambda s: f"member '{s}/absolute' is an absolute path",
    ),
    "dot-dot": Hostile(
        _escaping(lambda s: [file_member("cache/" + "../" * 40 + f"{s}/dotdot".lstrip("/"), b"x")]),
        lambda s: "member 'cache/" + "../" * 40 + f"{s}/dotdot".lstrip("/") + "'",
        problem="a '..' component",
    ),
    "cache//abs": Hostile(
        _escaping(lambda s: [file_member(f"cache/{s}/x", b"x")]),
        lambda s: f"member 'cache/{s}/x'",  # cache//tmp/...: the first finding
        problem="an empty component",
    ),
    "extra//abs": Hostile(
        _escaping(lambda s: [file_member(f"extra/{s}/x", b"x")]),
        lambda s: f"member 'extra/{s}/x'",
        problem="an empty component",
    ),
    "symlink": Hostile(
        _escaping(lambda s: [special_member("cache/zz/escape", tarfile.SYMTYPE, str(s)),
                             file_member("cache/zz/escape/x", b"x")]),
        _member("cache/zz/escape"),
        problem="is a symbolic link",
    ),
    "hard link": Hostile(
        _plus(special_member("cache/zz/hard", tarfile.LNKTYPE, "/etc/passwd")),
        _member("cache/zz/hard"),
        problem="is a hard link (to '/etc/passwd')",
    ),
    "device": Hostile(
        _plus(special_member("cache/zz/null", tarfile.CHRTYPE)), _member("cache/zz/null"),
        problem="is a device",
    ),
    "fifo": Hostile(
        _plus(special_member("cache/zz/fifo", tarfile.FIFOTYPE)), _member("cache/zz/fifo"),
        problem="is a fifo",
    ),
    # point 2: decompression limits, from the headers and while streaming
    # tarfile reads a sparse member's map whole, however long its header says it is:
    # refused as such, before its size (here 30 GiB, past the 20 GiB cap) is weighed.
    "sparse member claiming 30 GiB": Hostile(
        _plus(_sparse("cache/zz/sparse", 30 * 1024**3)),
        _member("cache/zz/sparse"),
        problem="is a sparse file",
    ),
    "zeros past a lowered size cap": Hostile(
        _plus(file_member("cache/zz/zeros", bytes(4 * MiB))),
        _member("cache/zz/zeros"),
        env=lambda real: {"KILN_MAX_UNPACKED_SIZE": str(real.unpacked_size + MiB)},
        problem="its header says 4 MiB, which takes the archive past the limit",
    ),
    "header claims more than the archive holds": Hostile(
        _lying_header(64 * MiB, bytes(4096)), _member("cache/zz/liar"),
        problem="not a readable gzip'd tar (unexpected end of data)",
    ),
    "header claims less than follows it": Hostile(
        _lying_header(10, b"\x01" * 2 * MiB), _member("cache/zz/liar"),
        problem="after this member the archive holds data that is not a tar header",
    ),
    "too many members": Hostile(
        _plus(*(file_member(f"cache/zz/m{i}", b"") for i in range(300))),
        lambda s: "member 'cache/zz/m",
        env=lambda real: {"KILN_MAX_MEMBERS": str(real.members + 100)},
        problem="the limit on members per archive",
    ),
    # point 4: corrupt archives are named, never a traceback
    "truncated gzip": Hostile(
        _truncated, lambda s: "member '", problem="(truncated: Compressed file ended"
    ),
    "not gzip": Hostile(
        _not_gzip, lambda s: "at its first member", problem="(Not a gzipped file"
    ),
    "manifest is a list": Hostile(
        _manifest(lambda m: [m]), _member("manifest.json"),
        problem="the top level: Input should be a valid dictionary",
    ),
    "toolchain is a string": Hostile(
        _manifest(lambda m: m.update(toolchain="gcc-12")), _member("manifest.json"),
        problem="toolchain: Input should be a valid dictionary",
    ),
    "manifest not UTF-8": Hostile(
        lambda real, s: replace_member(_real(real), "manifest.json", b'{"cell": "\xff\xfe"}'),
        _member("manifest.json"), problem="not UTF-8 (byte 0xff at offset 10)",
    ),
    "manifest missing": Hostile(
        lambda real, s: replace_member(_real(real), "manifest.json", None),
        _member("manifest.json"), problem="is missing",
    ),
    "wrapper log with a non-JSON line": Hostile(
        _log_line, _member(LOG), problem="line 3 is not JSON"
    ),
}

SHARD_PLAN_CASES = [
    "truncated gzip", "not gzip", "manifest is a list", "toolchain is a string",
    "manifest not UTF-8", "manifest missing", "wrapper log with a non-JSON line", "cache//abs",
    "header claims less than follows it",
]


@dataclass
class Prepared:
    name: str
    case: Hostile
    root: Path
    sentinel: Path
    shards: Path
    archive: Path

    @property
    def link_cache(self) -> Path:
        return self.root / "work" / f"{CELL}-link.cache"


def _prepare(real: RealShard, tmp_path: Path, name: str) -> Prepared:
    case = CORPUS[name]
    root = tmp_path / name.replace(" ", "-").replace("/", "_")
    sentinel = root / "sentinel"
    sentinel.mkdir(parents=True)
    archive = root / "shards" / SHARD
    made = case.make(real, sentinel)
    if isinstance(made, bytes):
        archive.parent.mkdir(parents=True)
        archive.write_bytes(made)
    else:
        write_members(archive, made)
    return Prepared(name, case, root, sentinel, archive.parent, archive)


def _run(argv: list[str | Path], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`kiln` in a home of its own (no builder lock shared between parallel cases)."""
    full_env = {**os.environ, "KILN_HOME": str(root / "home"), "KILN_STATE_HOME": str(root / "state"),
                **env}
    full_env.pop("KILN_VERBOSE", None)
    return subprocess.run([sys.executable, "-m", "wheelkiln", *map(str, argv)], capture_output=True,
                          text=True, env=full_env, cwd=ROOT, stdin=subprocess.DEVNULL, check=False)


def _in_process(
    argv: list[str | Path], root: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> subprocess.CompletedProcess[str]:
    """`kiln` through its real entry point (argument parsing, error rendering, exit codes),
    in this process: a refusal costs milliseconds instead of an interpreter start."""
    from wheelkiln.cli import main

    with monkeypatch.context() as patch:
        for key, value in {"KILN_HOME": str(root / "home"), "KILN_STATE_HOME": str(root / "state"),
                           **env}.items():
            patch.setenv(key, value)
        patch.setattr(sys, "argv", ["kiln", *map(str, argv)])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


SUBPROCESS_CASES = {"cache//abs", "zeros past a lowered size cap", "truncated gzip"}
"""Run as a user would, in a process of their own; the rest run in this one."""


def _in_parallel(jobs: list[Callable[[], subprocess.CompletedProcess[str]]]) -> list[subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda job: job(), jobs))


def _flat(text: str) -> str:
    return " ".join(text.split())


def _assert_named(prepared: Prepared, result: subprocess.CompletedProcess[str], code: int = 5) -> None:
    where = f"{prepared.name}: exit {result.returncode}\n{result.stderr[-3000:]}"
    assert result.returncode == code, where
    assert "Traceback" not in result.stderr + result.stdout, where
    message = _flat(result.stderr)
    assert f"error: {prepared.archive}" in message, where
    assert _flat(prepared.case.names(prepared.sentinel)) in message, where
    assert _flat(prepared.case.problem) in message, where
    assert list(prepared.sentinel.iterdir()) == [], f"{prepared.name}: wrote outside the root"


def test_kiln_link_refuses_every_hostile_archive(
    real_shard: RealShard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The log case is accepted by the archive checks and refused when its log is read,
    # after the toolchain check, which needs the session's kiln home: it runs below.
    names = [name for name in CORPUS if name != "wrapper log with a non-JSON line"]
    prepared = {name: _prepare(real_shard, tmp_path, name) for name in names}

    def argv(p: Prepared) -> list[str | Path]:
        return ["link", real_shard.recipe, "--archives", p.shards, "--out", p.root / "dist",
                "--workdir", p.root / "work"]

    results = dict(zip(sorted(SUBPROCESS_CASES), _in_parallel([
        (lambda p=prepared[name]: _run(argv(p), p.root, p.case.env(real_shard)))
        for name in sorted(SUBPROCESS_CASES)
    ]), strict=True))
    for name in names:
        if name not in SUBPROCESS_CASES:
            p = prepared[name]
            results[name] = _in_process(argv(p), p.root, p.case.env(real_shard), monkeypatch, capsys)
    for name, p in prepared.items():
        _assert_named(p, results[name])
        # refused before anything was extracted: the link job's fresh cache is still empty,
        # no staging directory is left, and no wheel or record was written
        assert list(p.link_cache.iterdir()) == [], p.name
        assert not list((p.root / "work").glob(".kiln-unpack-*")), p.name
        assert not (p.root / "dist").exists() or not any((p.root / "dist").iterdir()), p.name


def test_kiln_link_names_a_wrapper_log_that_is_not_one(
    real_shard: RealShard, tmp_path: Path, kiln: Kiln
) -> None:
    p = _prepare(real_shard, tmp_path, "wrapper log with a non-JSON line")
    result = kiln("link", real_shard.recipe, "--archives", p.shards, "--out", p.root / "dist",
                  "--workdir", p.root / "work", check=False)
    _assert_named(p, result)
    assert f"{p.archive}, member 'extra/wrapper.jsonl': line 3 is not JSON" in _flat(result.stderr)


def test_the_size_cap_holds_from_the_command_line_too(real_shard: RealShard, tmp_path: Path) -> None:
    p = _prepare(real_shard, tmp_path, "zeros past a lowered size cap")
    limit = f"{(real_shard.unpacked_size + 1024**2) // 1024}KiB"
    base: list[str | Path] = ["link", real_shard.recipe, "--archives", p.shards, "--out", p.root / "dist",
                              "--workdir", p.root / "work"]
    result = _run([*base, "--max-unpacked-size", limit], p.root, {})
    _assert_named(p, result)
    assert "raise the limit: --max-unpacked-size" in _flat(result.stderr)
    assert list(p.link_cache.iterdir()) == []
    bad = _run([*base, "--max-unpacked-size", "lots"], p.root, {})
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "Invalid value for '--max-unpacked-size': 'lots' is not a size" in _flat(bad.stderr)
    bad_env = _run(base, p.root, {"KILN_MAX_MEMBERS": "many"})
    assert bad_env.returncode == 2 and "KILN_MAX_MEMBERS: 'many' is not a positive whole number" in _flat(
        bad_env.stderr)


def test_kiln_shard_plan_names_corrupt_archives(
    real_shard: RealShard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in SHARD_PLAN_CASES:
        p = _prepare(real_shard, tmp_path, name)
        result = _in_process(["shard-plan", p.archive, "--count", "2", "--out", p.root / "map.json"],
                             p.root, p.case.env(real_shard), monkeypatch, capsys)
        _assert_named(p, result)
        assert not (p.root / "map.json").exists(), p.name


def _renumbered(real: RealShard, index: int, count: int, change: Callable[[dict[str, Any]], None]) -> list[Member]:
    def edit(manifest: dict[str, Any]) -> None:
        manifest.update(index=index, count=count, label=f"{index + 1}/{count}")
        change(manifest)

    return change_manifest(read_members(real.archive), edit)


def test_archives_of_another_cell_or_toolchain_are_named_not_merged(
    real_shard: RealShard, tmp_path: Path, kiln: Kiln
) -> None:
    shards = tmp_path / "shards"
    archives = [shards / shard_archive(CELL, index, 3) for index in range(3)]
    write_members(archives[0], _renumbered(real_shard, 0, 3, lambda m: None))
    write_members(archives[1], _renumbered(real_shard, 1, 3, lambda m: m.update(cell="other-py3.11-linux-x86_64")))
    write_members(archives[2], _renumbered(
        real_shard, 2, 3, lambda m: m["toolchain"]["compilers"].update(gcc="9.9.9")))
    result = kiln("link", real_shard.recipe, "--archives", shards, "--out", tmp_path / "dist",
                  "--workdir", tmp_path / "work", check=False)
    message = _flat(result.stderr)
    assert result.returncode == 5, result.stderr
    assert "Traceback" not in result.stderr
    assert (f"shard 2/3 belongs to cell 'other-py3.11-linux-x86_64', not '{CELL}'; "
            f"not merged ({archives[1]}, member 'manifest.json')") in message
    assert ("shard 3/3 was built with a different toolchain (compilers: shard has {'gcc': '9.9.9'"
            in message)
    assert f"; not merged ({archives[2]}, member 'manifest.json')" in message
    # shard 1/3 holds every TU (it was built as 1 of 1), so the build itself hit throughout
    record = json.loads((tmp_path / "dist" / f"{CELL}.link.json").read_text())
    assert record["link"]["shards_merged"] == [0]
    assert (record["cache"]["misses"], record["cache"]["hits"] > 0) == (0, True)


def test_archives_of_another_n_are_refused_by_name(real_shard: RealShard, tmp_path: Path) -> None:
    three = tmp_path / "three"
    for index in range(3):
        write_members(three / shard_archive(CELL, index, 3),
                      _renumbered(real_shard, index, 3, lambda m: None))
    mixed = tmp_path / "mixed"
    write_members(mixed / f"{CELL}-shard-0-of-2.tar.gz", _renumbered(real_shard, 0, 2, lambda m: None))
    write_members(mixed / f"{CELL}-shard-1-of-3.tar.gz", _renumbered(real_shard, 1, 3, lambda m: None))
    count_two, disagree = _in_parallel([
        lambda: _run(["link", real_shard.recipe, "--archives", three, "--count", "2", "--out",
                      tmp_path / "dist", "--workdir", tmp_path / "w1"], tmp_path / "a", {}),
        lambda: _run(["link", real_shard.recipe, "--archives", mixed, "--out", tmp_path / "dist",
                      "--workdir", tmp_path / "w2"], tmp_path / "b", {}),
    ])
    assert count_two.returncode == 2 and "Traceback" not in count_two.stderr, count_two.stderr
    message = _flat(count_two.stderr)
    assert f"--count 2 does not match the shard archives of {CELL} in {three}, which are of N = 3" in message
    for index in range(3):
        assert f"{three / f'{CELL}-shard-{index}-of-3.tar.gz'} ({index + 1}/3)" in message
    assert disagree.returncode == 2 and "Traceback" not in disagree.stderr, disagree.stderr
    assert f"The shard archives of {CELL} in {mixed} disagree on N (2, 3)" in _flat(disagree.stderr)
    assert not (tmp_path / "dist").exists(), "refused before any build"
