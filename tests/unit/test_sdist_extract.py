"""A pinned sdist is hostile until checked: kiln unpacks it itself, member by member, and
refuses (naming the recipe key and the file, keeping nothing) whatever could write or
lead outside the tree it keeps, whatever is damaged, and whatever is too large."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from wheelkiln.builder.source import (
    SDIST_REFUSED_HINT,
    SDIST_UNREADABLE_HINT,
    _extract,
    fetch_source,
)
from wheelkiln.cache.archive import ArchiveLimits
from wheelkiln.errors import SourceError
from wheelkiln.recipe.load import load_recipe

Member = tuple[str, bytes, str]
"""(name, type, content or link target): type is a tarfile type."""


def tar_sdist(path: Path, members: Sequence[tuple[str, bytes, bytes | str]]) -> Path:
    """A .tar.gz with *members*: (name, tarfile type, a file's bytes or a link's target)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
            info.mtime = 1_000_000_000
            content = None
            if isinstance(data, str):
                info.linkname = data
            elif kind == tarfile.REGTYPE:
                info.size = len(data)
                content = io.BytesIO(data)
            tar.addfile(info, content)
    return path


def zip_sdist(path: Path, members: Sequence[tuple[str, int, bytes]]) -> Path:
    """A .zip with *members*: (name, Unix mode with its file type, content)."""
    with zipfile.ZipFile(path, "w") as zipped:
        for name, mode, data in members:
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = mode << 16
            zipped.writestr(info, data)
    return path


def pinned_recipe(tmp_path: Path, sdist: Path) -> tuple[Path, Path]:
    """A recipe that pins *sdist* (named NAME-VERSION.EXT), already in the store's
    downloads as a fetch leaves it: (the recipe, the store)."""
    store = tmp_path / "home" / "sources"
    (store / "sdists").mkdir(parents=True, exist_ok=True)
    placed = sdist.replace(store / "sdists" / sdist.name)
    name, _, rest = placed.name.partition("-")
    version = rest.split(".tar")[0].removesuffix(".zip")
    digest = hashlib.sha256(placed.read_bytes()).hexdigest()
    recipe = tmp_path / f"{name}.toml"
    recipe.write_text(
        f'name = "{name}"\n[source]\npypi = "{name}=={version}"\nsha256 = "{digest}"\n'
    )
    return recipe, store


def refused(tmp_path: Path, sdist: Path) -> SourceError:
    """The refusal of fetching *sdist* through a recipe; checks nothing was kept."""
    recipe, store = pinned_recipe(tmp_path, sdist)
    with pytest.raises(SourceError) as caught:
        fetch_source(load_recipe(recipe), store)
    left = sorted(p.name for p in store.iterdir() if not p.name.endswith((".lock", ".inuse")))
    assert left == ["sdists"]  # no tree, no .staging
    return caught.value


def _message(tmp_path: Path, sdist: str, spec: str, rest: str) -> str:
    store = tmp_path / "home" / "sources" / "sdists"
    name = spec.split("==")[0]
    return f"{tmp_path / name}.toml: key 'source.pypi' ({spec!r}): the sdist {store / sdist} {rest}"


def test_a_chain_of_directory_links_cannot_write_outside(tmp_path: Path) -> None:
    """CVE-2025-4517's shape, which Python 3.11.7's tar data filter lets through: 16
    nested directory links, a link out through them, a hard link through that, and a
    file written into the hard link."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    steps = "abcdefghijklmnop"
    component = "d" * 200
    members: list[tuple[str, bytes, bytes | str]] = []
    path = ""
    for step in steps:
        members.append((os.path.join(path, component), tarfile.DIRTYPE, b""))  # noqa: PTH118
        members.append((os.path.join(path, step), tarfile.SYMTYPE, component))  # noqa: PTH118
        path = os.path.join(path, component)  # noqa: PTH118
    chain = os.path.join(*steps, "l" * 254)  # noqa: PTH118
    members += [
        (chain, tarfile.SYMTYPE, "/".join([".."] * len(steps))),
        ("escape", tarfile.SYMTYPE, chain + "/../../.."),
        ("flaglink", tarfile.LNKTYPE, "escape/victim.txt"),
        ("flaglink", tarfile.REGTYPE, b"OVERWRITTEN\n"),
        ("escape/new.txt", tarfile.REGTYPE, b"new\n"),
    ]
    error = refused(tmp_path, tar_sdist(tmp_path / "evil-1.0.tar.gz", members))
    assert error.message == _message(
        tmp_path, "evil-1.0.tar.gz", "evil==1.0",
        "has a member 'flaglink', a hard link to 'escape/victim.txt', which is no regular "
        "file before it; nothing of it was extracted.",
    )  # fmt: skip
    assert error.hint == SDIST_REFUSED_HINT
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.toml", "home", "victim.txt"]


D, F, L, H = tarfile.DIRTYPE, tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE


@pytest.mark.parametrize(
    ("members", "member", "problem"),
    [
        ([("p-1.0/../../escaped.txt", F, b"x")], "p-1.0/../../escaped.txt",
         "a path with a '..' component"),
        ([("/etc/evil", F, b"x")], "/etc/evil", "an absolute path"),
        ([("p-1.0/a", L, "/etc")], "p-1.0/a", "a symbolic link to the absolute path '/etc'"),
        ([("p-1.0/a", L, "")], "p-1.0/a", "a symbolic link to nothing"),
        ([("p-1.0/a", L, "../..")], "p-1.0/a",
         "a symbolic link to '../..', which leads out of the sdist's tree"),
        # each link stays inside by its spelling; through the first, the second leads out
        ([("p-1.0/q/d", L, ".."), ("p-1.0/e", L, "q/d/../..")], "p-1.0/e",
         "a symbolic link to 'q/d/../..', which leads out of the sdist's tree"),
        ([("p-1.0/a", L, "b"), ("p-1.0/b", L, "a")], "p-1.0/a",
         "a symbolic link to 'b', which leads out of the sdist's tree"),  # a loop
        ([("p-1.0/d", L, "."), ("p-1.0/d/setup.py", F, b"x")], "p-1.0/d/setup.py",
         "inside 'p-1.0/d', which is a symbolic link"),
        ([("p-1.0/a", F, b"x"), ("p-1.0/a/b", F, b"y")], "p-1.0/a/b",
         "inside 'p-1.0/a', which is a file"),
        ([("p-1.0/a", F, b"x"), ("p-1.0/a", F, b"y")], "p-1.0/a", "a second member of that name"),
        ([("p-1.0/h", H, "p-1.0/later"), ("p-1.0/later", F, b"x")], "p-1.0/h",
         "a hard link to 'p-1.0/later', which is no regular file before it"),
        ([("p-1.0/h", H, "/etc/passwd")], "p-1.0/h",
         "a hard link to '/etc/passwd', which is no regular file before it"),
        ([("p-1.0/null", tarfile.CHRTYPE, b"")], "p-1.0/null", "a device"),
        ([("p-1.0/pipe", tarfile.FIFOTYPE, b"")], "p-1.0/pipe", "a fifo"),
        ([("p-1.0", L, ".")], "p-1.0",
         "a symbolic link (to '.') that is the sdist's only top entry"),
    ],
)
def test_a_tar_member_that_could_lead_outside_is_refused(
    tmp_path: Path, members: list[tuple[str, bytes, bytes | str]], member: str, problem: str
) -> None:
    error = refused(tmp_path, tar_sdist(tmp_path / "p-1.0.tar.gz", members))
    assert error.message == _message(
        tmp_path, "p-1.0.tar.gz", "p==1.0",
        f"has a member {member!r}, {problem}; nothing of it was extracted.",
    )  # fmt: skip
    assert error.hint == SDIST_REFUSED_HINT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "p.toml"]


FILE, LINK, FIFO = stat.S_IFREG | 0o644, stat.S_IFLNK | 0o777, stat.S_IFIFO | 0o644


@pytest.mark.parametrize(
    ("members", "member", "problem"),
    [
        ([("z-1.0/../../x", FILE, b"x")], "z-1.0/../../x", "a path with a '..' component"),
        ([("z-1.0/a", FILE, b"x"), ("z-1.0/a/b", FILE, b"y")], "z-1.0/a/b",
         "inside 'z-1.0/a', which is a file"),
        ([("z-1.0/out", LINK, b"../../..")], "z-1.0/out",
         "a symbolic link to '../../..', which leads out of the sdist's tree"),
        ([("z-1.0/pipe", FIFO, b"")], "z-1.0/pipe", "a device, fifo or socket"),
    ],
)
def test_a_zip_member_that_could_lead_outside_is_refused(
    tmp_path: Path, members: list[tuple[str, int, bytes]], member: str, problem: str
) -> None:
    error = refused(tmp_path, zip_sdist(tmp_path / "z-1.0.zip", members))
    assert error.message == _message(
        tmp_path, "z-1.0.zip", "z==1.0",
        f"has a member {member!r}, {problem}; nothing of it was extracted.",
    )  # fmt: skip
    assert error.hint == SDIST_REFUSED_HINT


def test_a_damaged_sdist_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "bad-1.0.tar.gz").write_bytes(b"this is no tar archive")
    error = refused(tmp_path, tmp_path / "bad-1.0.tar.gz")
    assert error.message == _message(
        tmp_path, "bad-1.0.tar.gz", "bad==1.0",
        "is not a readable tar archive (ReadError: no tar archive, plain or compressed with "
        "gzip, bzip2 or xz); nothing of it was extracted.",
    )  # fmt: skip
    assert error.hint == SDIST_UNREADABLE_HINT

    (tmp_path / "badz-1.0.zip").write_bytes(b"PK\x03\x04 cut short")
    error = refused(tmp_path, tmp_path / "badz-1.0.zip")
    assert error.message == _message(
        tmp_path, "badz-1.0.zip", "badz==1.0",
        "is not a readable zip archive (BadZipFile: File is not a zip file); nothing of it "
        "was extracted.",
    )  # fmt: skip


def test_a_member_damaged_inside_is_named_while_writing(tmp_path: Path) -> None:
    """The headers read, a member's bytes do not match its checksum: found while writing,
    and what was written of the sdist is removed."""
    content = b"int main(void) { return 0; }\n" * 100
    sdist = zip_sdist(tmp_path / "cut-1.0.zip",
                      [("cut-1.0/a.c", FILE, b"ok\n"), ("cut-1.0/big.c", FILE, content)])  # fmt: skip
    packed = sdist.read_bytes()
    at = packed.index(content) + 10
    sdist.write_bytes(packed[:at] + b"X" + packed[at + 1 :])  # stored, so the CRC fails
    error = refused(tmp_path, sdist)
    assert error.message == _message(
        tmp_path, "cut-1.0.zip", "cut==1.0",
        "is not a readable zip archive at its member 'cut-1.0/big.c' (BadZipFile: Bad "
        "CRC-32 for file 'cut-1.0/big.c'); nothing of it was extracted.",
    )  # fmt: skip
    assert error.hint == SDIST_UNREADABLE_HINT


def test_the_unpacked_size_and_member_count_are_capped(tmp_path: Path) -> None:
    sdist = tar_sdist(tmp_path / "big-1.0.tar.gz",
                      [("big-1.0/a", F, b"x" * 600), ("big-1.0/b", F, b"y" * 600)])  # fmt: skip
    into = tmp_path / "tree"
    with pytest.raises(SourceError) as caught:
        _extract(sdist, into, "source.pypi 'big==1.0'", ArchiveLimits(max_unpacked_size=1000))
    assert caught.value.message == (
        f"source.pypi 'big==1.0': the sdist {sdist} unpacks to more than 1000 B by its members' "
        "declared sizes, the limit on an unpacked sdist; nothing of it was extracted."
    )
    assert caught.value.hint == (
        "If the sdist is genuine, raise the limit: KILN_MAX_UNPACKED_SIZE=2.0KiB. Otherwise "
        "check that source.pypi and source.sha256 pin the release you mean."
    )
    with pytest.raises(SourceError) as caught:
        _extract(sdist, into, "source.pypi 'big==1.0'", ArchiveLimits(max_members=1))
    assert caught.value.message == (
        f"source.pypi 'big==1.0': the sdist {sdist} has more than 1 members, the limit on an "
        "sdist's members; nothing of it was extracted."
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big-1.0.tar.gz"]
    # the default is the shard archives': 20 GiB, far above this one
    assert (_extract(sdist, into, "source.pypi 'big==1.0'") / "b").read_bytes() == b"y" * 600


def test_the_default_cap_is_generous() -> None:
    assert ArchiveLimits.resolve(environ={}).max_unpacked_size == 20 * 1024**3


def test_a_genuine_sdist_keeps_its_links_inside(tmp_path: Path) -> None:
    sdist = tar_sdist(tmp_path / "good-1.0.tar.gz", [
        ("./good-1.0/", D, b""),
        ("./good-1.0/setup.py", F, b"# setup\n"),
        ("./good-1.0/src/pkg/__init__.py", F, b"X = 1\n"),
        ("./good-1.0/include", L, "src/pkg"),  # a directory link, in the tree
        ("./good-1.0/src/pkg/alias.py", L, "__init__.py"),
        ("./good-1.0/src/pkg/up.py", L, "../../setup.py"),
        ("./good-1.0/copy.py", H, "./good-1.0/setup.py"),
    ])  # fmt: skip
    into = tmp_path / "store" / "good-1.0-abc"
    assert _extract(sdist, into, "source.pypi 'good==1.0'") == into
    assert (into / "include").readlink() == Path("src/pkg")
    assert (into / "include" / "alias.py").read_text() == "X = 1\n"
    assert (into / "src/pkg/up.py").read_text() == "# setup\n"
    assert (into / "copy.py").read_text() == "# setup\n"
    assert (into / "setup.py").stat().st_mtime == 1_000_000_000
    assert sorted(p.name for p in into.parent.iterdir()) == ["good-1.0-abc"]  # no staging

    zipped = zip_sdist(tmp_path / "goodz-1.0.zip", [
        ("goodz-1.0/setup.py", 0o644, b"# setup\n"),  # zipfile's own: no file type bits
        ("goodz-1.0/run.sh", stat.S_IFREG | 0o755, b"#!/bin/sh\n"),
        ("goodz-1.0/alias.py", LINK, b"setup.py"),
    ])  # fmt: skip
    into = _extract(zipped, tmp_path / "store" / "goodz", "source.pypi 'goodz==1.0'")
    assert sorted(p.name for p in into.iterdir()) == ["alias.py", "run.sh", "setup.py"]
    assert (into / "alias.py").readlink() == Path("setup.py")
    assert (into / "run.sh").stat().st_mode & 0o777 == 0o755


def test_an_sdist_without_one_top_directory_is_kept_whole(tmp_path: Path) -> None:
    sdist = tar_sdist(tmp_path / "flat-1.0.tar.gz",
                      [("setup.py", F, b""), ("pkg/__init__.py", F, b"")])  # fmt: skip
    into = _extract(sdist, tmp_path / "flat", "source.pypi 'flat==1.0'")
    assert sorted(p.name for p in into.iterdir()) == ["pkg", "setup.py"]
