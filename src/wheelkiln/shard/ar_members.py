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
# ruff: noqa: PTH118, PTH120
from __future__ import annotations

import os

MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
HEADER = 60
INDEXES = (b"/", b"/SYM64/", b"__.SYMDEF", b"__.SYMDEF SORTED")
"""Members that are the archive's symbol index, not objects."""


def archive_members(path: str) -> tuple[bool, list[tuple[str, bytes | None]]]:
    """(thin, members): each object member's name and bytes, in order. A thin archive's
    members are paths (relative to the archive's directory, or absolute) and carry no
    bytes (None). ``(False, [])`` for a file that is no archive, or is cut short."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return False, []
    thin = data.startswith(THIN_MAGIC)
    if not thin and not data.startswith(MAGIC):
        return False, []
    members: list[tuple[str, bytes | None]] = []
    long_names = b""
    at = len(MAGIC)
    while at + HEADER <= len(data):
        header = data[at : at + HEADER]
        if header[58:60] != b"`\n":
            return False, []
        raw_name = header[:16].rstrip(b" ")
        try:
            size = int(header[48:58].strip() or b"0")
        except ValueError:
            return False, []
        body = at + HEADER
        stored = raw_name in (b"/", b"//", b"/SYM64/") or raw_name.startswith(b"__.SYMDEF")
        end = body + size if (stored or not thin) else body
        if end > len(data) or size < 0:
            return False, []
        content = data[body:end]
        at = end + (end % 2 if (stored or not thin) else 0)
        if raw_name == b"//":
            long_names = content
            continue
        if raw_name in INDEXES:
            continue
        name, content = _name(raw_name, content, long_names)
        if name is None:
            return False, []
        members.append((name, None if thin else content))
    return thin, members


def _name(raw: bytes, content: bytes, long_names: bytes) -> tuple[str | None, bytes]:
    """A member's name from its header field, and its content without a BSD name."""
    if raw.startswith(b"#1/"):  # BSD: the name is the content's first N bytes
        try:
            length = int(raw[3:])
        except ValueError:
            return None, content
        return os.fsdecode(content[:length].rstrip(b"\0")), content[length:]
    if raw.startswith(b"/") and raw[1:].isdigit():  # GNU: an offset in the // table
        offset = int(raw[1:])
        end = long_names.find(b"\n", offset)
        if offset >= len(long_names) or end < 0:
            return None, content
        return os.fsdecode(long_names[offset:end].rstrip(b"/")), content
    return os.fsdecode(raw.rstrip(b"/")), content


def stubbed_members(path: str, stub: bytes) -> tuple[bool, list[str]]:
    """(thin, names): the members of the archive at *path* whose bytes are *stub*. For a
    thin archive each is the member file's path (absolute), read from the file."""
    thin, members = archive_members(path)
    found: list[str] = []
    for name, content in members:
        if not thin:
            if content == stub:
                found.append(name)
            continue
        member = os.path.normpath(os.path.join(os.path.dirname(path), name))
        try:
            with open(member, "rb") as handle:
                if handle.read(len(stub) + 1) == stub:
                    found.append(member)
        except OSError:
            continue
    return thin, found
