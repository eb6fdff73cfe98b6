"""Reading a static library's members without ar, to find the ones a shard stubbed: GNU
archives (long names through the ``//`` table), thin archives, BSD names, and files that
are no archive or are cut short."""

from __future__ import annotations

import subprocess
from pathlib import Path

from wheelkiln.shard.ar_members import archive_members, stubbed_members
from wheelkiln.shard.wrapper import archive_objects

STUB = b"\x7fELF stub object"


def _members(tmp_path: Path) -> list[Path]:
    files = {
        "a.o": b"\x7fELF real a" * 3,  # odd length: the next header is padded
        "a_rather_long_object_name.cpp.o": STUB,  # over 15 characters: the // table
        "b.o": STUB,
        "another_long_member_name.c.o": b"\x7fELF real c",
    }
    made = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        made.append(tmp_path / name)
    return made


def test_gnu_archive_members_and_stubs(tmp_path: Path) -> None:
    members = _members(tmp_path)
    archive = tmp_path / "libx.a"
    subprocess.run(["ar", "rcs", archive, *members], check=True, cwd=tmp_path)
    thin, found = archive_members(str(archive))
    assert not thin
    assert [(name, data) for name, data in found] == [(p.name, p.read_bytes()) for p in members]
    assert stubbed_members(str(archive), STUB) == (
        False, ["a_rather_long_object_name.cpp.o", "b.o"])  # fmt: skip


def test_thin_archive_members_are_read_from_their_files(tmp_path: Path) -> None:
    members = _members(tmp_path)
    (tmp_path / "lib").mkdir()
    archive = tmp_path / "lib" / "libx.a"
    subprocess.run(["ar", "rcsT", archive, *members], check=True, cwd=tmp_path)
    thin, found = archive_members(str(archive))
    assert thin and [data for _, data in found] == [None] * 4
    assert stubbed_members(str(archive), STUB) == (
        True, [str(tmp_path / "a_rather_long_object_name.cpp.o"), str(tmp_path / "b.o")])  # fmt: skip


def test_bsd_names_are_read_from_the_member(tmp_path: Path) -> None:
    name = b"a_rather_long_object_name.o"
    body = name + STUB

    def header(field: bytes, size: int) -> bytes:
        return (field.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6)
                + b"644".ljust(8) + str(size).encode().ljust(10) + b"`\n")  # fmt: skip

    data = b"!<arch>\n" + header(b"#1/" + str(len(name)).encode(), len(body)) + body
    data += b"\n" if len(body) % 2 else b""
    data += header(b"short.o/", 4) + b"real"
    (tmp_path / "libbsd.a").write_bytes(data)
    assert archive_members(str(tmp_path / "libbsd.a")) == (
        False, [("a_rather_long_object_name.o", STUB), ("short.o", b"real")])  # fmt: skip


def test_what_is_no_archive_has_no_members(tmp_path: Path) -> None:
    members = _members(tmp_path)
    archive = tmp_path / "libx.a"
    subprocess.run(["ar", "rcs", archive, *members], check=True, cwd=tmp_path)
    whole = archive.read_bytes()
    (tmp_path / "cut.a").write_bytes(whole[: len(whole) - 5])
    (tmp_path / "text.a").write_bytes(b"INPUT(-lfoo)\n")  # a linker script named .a
    (tmp_path / "bad-header.a").write_bytes(whole[:8] + b"x" * 60)
    for name in ("cut.a", "text.a", "bad-header.a", "missing.a"):
        assert archive_members(str(tmp_path / name)) == (False, []), name
        assert stubbed_members(str(tmp_path / name), STUB) == (False, []), name


def test_each_member_is_matched_to_its_own_object_or_left_out() -> None:
    build = "/w/build"
    logged = [
        f"{build}/CMakeFiles/core.dir/csrc/a.cpp.o",  # libcore.a's own
        f"{build}/CMakeFiles/other.dir/csrc/a.cpp.o",  # another target's, same name
        f"{build}/CMakeFiles/core.dir/csrc/b.cpp.o",
        f"{build}/CMakeFiles/x.dir/u/c.cpp.o",  # two of them, neither in core.dir
        f"{build}/CMakeFiles/y.dir/v/c.cpp.o",
        f"{build}/libm.a.p/m_d.c.o",  # meson's object directory
        f"{build}/libn.a.p/m_d.c.o",
    ]
    assert archive_objects(f"{build}/libcore.a", ["a.cpp.o", "b.cpp.o", "c.cpp.o"], logged) == [
        f"{build}/CMakeFiles/core.dir/csrc/a.cpp.o", f"{build}/CMakeFiles/core.dir/csrc/b.cpp.o"]  # fmt: skip
    assert archive_objects(f"{build}/libm.a", ["m_d.c.o"], logged) == [f"{build}/libm.a.p/m_d.c.o"]
    # Two members of one name: which object each was is unknown.
    assert archive_objects(f"{build}/libcore.a", ["b.cpp.o", "b.cpp.o"], logged) == []
