"""The members of a static library (``ar`` archive), read without ``ar``: which of them a
shard stubbed.

A shard stubs the objects outside its slice, and ``ar`` packs them into a static library
like any other object. An executable the build links against that library and then
runs (a code generator) fails to link, or runs without the code it calls: the seat
wrapper looks into the archives a link consumes for members whose bytes are the stub
object's, and makes them real first (:mod:`wheelkiln.shard.wrapper`).

Reads the common format (GNU and System V long names through the ``//`` table, BSD
``#1/N`` names) and GNU thin archives, whose members are paths to the objects. Anything
it cannot read is an archive without members: the link runs as it is. Only ``os`` is
imported: the wrapper runs it once per link, in the build's interpreter.
"""

# Run in the wrapper's link path, where pathlib's import is avoided (see wrapper.py).
# ruff: noqa: PTH116, PTH118, PTH120
from __future__ import annotations

import os

TYPE_CHECKING = False  # as in wrapper.py: typing is not imported at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
HEADER = 60
INDEXES = (b"/", b"/SYM64/", b"__.SYMDEF", b"__.SYMDEF SORTED")
"""Members that are the archive's symbol index, not objects."""


def _walk(handle: BinaryIO) -> tuple[bool, list[tuple[str, int, int, bytes]]] | None:
    """(thin, members): each object member's name, its content's offset and size, and
    the start of its content (a BSD name's bytes are cut off it). Only headers, long-name
    tables and BSD names are read: a large library is not read whole. None for a file
    that is no archive, or is cut short."""
    magic = handle.read(len(MAGIC))
    thin = magic == THIN_MAGIC
    if not thin and magic != MAGIC:
        return None
    total = os.fstat(handle.fileno()).st_size
    members: list[tuple[str, int, int, bytes]] = []
    long_names = b""
    at = len(MAGIC)
    while at + HEADER <= total:
        handle.seek(at)
        header = handle.read(HEADER)
        if len(header) != HEADER or header[58:60] != b"`\n":
            return None
        raw_name = header[:16].rstrip(b" ")
        try:
            size = int(header[48:58].strip() or b"0")
        except ValueError:
            return None
        body = at + HEADER
        stored = raw_name in (b"/", b"//", b"/SYM64/") or raw_name.startswith(b"__.SYMDEF")
        end = body + size if (stored or not thin) else body
        if size < 0 or end > total:
            return None
        at = end + (end % 2 if (stored or not thin) else 0)
        if raw_name == b"//":
            long_names = handle.read(size)
            continue
        if raw_name in INDEXES:
            continue
        head = b""
        if raw_name.startswith(b"#1/"):  # BSD: the name is the content's first N bytes
            try:
                length = int(raw_name[3:])
            except ValueError:
                return None
            if not 0 <= length <= size:
                return None
            head = handle.read(length)
        name = _name(raw_name, head, long_names)
        if name is None:
            return None
        members.append((name, body + len(head), size - len(head), head))
    return thin, members


def archive_members(
    path: str, read: Callable[[int], bool] = lambda size: True
) -> tuple[bool, list[tuple[str, bytes | None]]]:
    """(thin, members): each object member's name and bytes, in order; the bytes only of
    members whose size *read* accepts (None for the others). A thin archive's members
    are paths (relative to the archive's directory, or absolute) and carry no bytes.
    ``(False, [])`` for a file that is no archive, or is cut short."""
    try:
        with open(path, "rb") as handle:
            walked = _walk(handle)
            if walked is None:
                return False, []
            thin, members = walked
            found: list[tuple[str, bytes | None]] = []
            for name, offset, size, _head in members:
                content = None
                if not thin and read(size):
                    handle.seek(offset)
                    content = handle.read(size)
                found.append((name, content))
    except OSError:
        return False, []
    return thin, found


def _name(raw: bytes, bsd_name: bytes, long_names: bytes) -> str | None:
    """A member's name from its header field (and, for a BSD name, its bytes)."""
    if raw.startswith(b"#1/"):
        return os.fsdecode(bsd_name.rstrip(b"\0"))
    if raw.startswith(b"/") and raw[1:].isdigit():  # GNU: an offset in the // table
        offset = int(raw[1:])
        end = long_names.find(b"\n", offset)
        if offset >= len(long_names) or end < 0:
            return None
        return os.fsdecode(long_names[offset:end].rstrip(b"/"))
    return os.fsdecode(raw.rstrip(b"/"))


def stubbed_members(path: str, stub: bytes) -> tuple[bool, list[str]]:
    """(thin, names): the members of the archive at *path* whose bytes are *stub*, read
    only where a member's size is the stub's. For a thin archive each is the member
    file's path (absolute), read from the file."""
    thin, members = archive_members(path, lambda size: size == len(stub))
    if not thin:
        return False, [name for name, content in members if content == stub]
    directory = os.path.dirname(path)
    paths = [os.path.normpath(os.path.join(directory, name)) for name, _ in members]
    return True, [member for member in paths if _file_is(member, stub)]


def _file_is(path: str, content: bytes) -> bool:
    try:
        if os.stat(path).st_size != len(content):
            return False
        with open(path, "rb") as handle:
            return handle.read() == content
    except OSError:
        return False
