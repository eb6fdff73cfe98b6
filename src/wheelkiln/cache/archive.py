"""Cache handoff archives: a shard's cache directory plus a manifest, and safe unpacking.

An archive is a gzip'd tar with ``manifest.json`` at the top, the cache under ``cache/``
and named extra files (the wrapper log) under ``extra/``. A link job merges archives
uploaded by other jobs, any of which may have run a pull request's code, so every
archive is hostile until checked:

- Two passes over the stream. The first (:func:`inspect_archive`) reads every header and the
  manifest and writes nothing; it refuses the whole archive for one bad member. The
  second (:func:`extract`) writes, into a private staging directory that is moved into
  place only when every member has been written, so a refusal at any point leaves the
  destinations as they were.
- A member's *resolved* destination must lie under the extraction root: the standard
  library's ``data`` filter (PEP 706) decides that. On top of it we refuse what the
  filter allows but a shard never writes: links of either kind, ``.`` and empty
  components (``cache//tmp/x``), and anything outside ``manifest.json``, ``cache/`` and
  ``extra/``.
- The unpacked size and the member count are capped (:class:`ArchiveLimits`): from the
  headers before any byte is written, and again while streaming, in chunks, so neither a
  header that lies nor an archive that changes between the passes gets past the cap.
- What tarfile itself reads into memory is capped too (:class:`_GuardedInfo`): an
  extended header (pax, GNU long name) is read whole before the member it describes is
  returned, so its size is checked first.
- Names are what the file system can hold (a component of at most 255 bytes, a path of
  at most 4096), and no name is both a file and a directory, within an archive or (when
  merging into a cache that earlier archives filled) across archives: each would fail
  half-way through the move into place, or, for a file landing on a directory, move
  into it under an invented name.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from wheelkiln.cache.manifest import ManifestError, ShardManifest, validate_manifest
from wheelkiln.errors import BuildError, GateError, UsageError

MANIFEST = "manifest.json"
CACHE_PREFIX = "cache"
EXTRA_PREFIX = "extra"
COUNTERS = "stats"
"""ccache's counter files (``<d>/stats`` and ``<d>/<d>/stats``): neither packed nor
merged. A shard's counters travel in its manifest, and the link job counts its own from
zero, so they are dead weight: ``ccache --zero-stats`` on a shard's empty cache wrote all
272 of them, which made up 272 of demo-kernels' 293 members per archive, and unpacking
their 272 directories was most of a link job's time outside its build."""


def is_counters(relative: str) -> bool:
    """True for a cache file (a path relative to the cache directory) that holds ccache's
    counters (:data:`COUNTERS`)."""
    return relative.rsplit("/", 1)[-1] == COUNTERS


GiB = 1024**3
DEFAULT_MAX_UNPACKED_SIZE = 20 * GiB
"""Per archive. A shard's cache of a large CUDA package is a few GiB; 20 GiB leaves room
and still stops a decompression bomb before it fills a CI runner's disk."""
DEFAULT_MAX_MEMBERS = 1_000_000
"""Per archive. ccache writes about two files per TU; the largest packages have ~10,000."""
MAX_UNPACKED_SIZE_ENV = "KILN_MAX_UNPACKED_SIZE"
MAX_MEMBERS_ENV = "KILN_MAX_MEMBERS"
MANIFEST_MAX_BYTES = 1024**2
CHUNK = 1024**2
TRAILER_MAX_BYTES = 1024**2
"""Zero padding allowed after the last member; tar pads to 10 KiB records."""
HEADER_MAX_BYTES = 1024**2
"""One extended header (a pax header, a GNU long name or link). tarfile reads each
whole into memory before kiln sees the member: a 1.5 MB archive whose pax header said
1.5 GB took 60 s and 4.6 GB of memory. Real ones hold a path and a few numbers."""
EXTENDED_HEADERS_MAX = 8
"""Extended headers in a row before one member. Writers put at most two there (GNU tar:
a long name and a long link; pax: a global and a member's header); tarfile reads a chain
of them by recursion, each frame holding its header's bytes."""
NAME_MAX_BYTES = 255
"""One path component (Linux's NAME_MAX): a longer one cannot be created."""
PATH_MAX_BYTES = 4096
"""A member's whole name (Linux's PATH_MAX)."""
_LAYOUT_ROOT = str(Path(tempfile.gettempdir()) / "kiln-layout-check")
"""Where passes that write nothing check destinations: any root shows the layout."""

REFUSED_HINT = (
    "Shard archives are written by `kiln shard`; re-run the shard that produced it rather "
    "than trusting this file."
)


@dataclass(frozen=True)
class Layout:
    """What an archive of one kind may hold: regular files at its top, and whole trees.

    Every other check (paths, member types, resolved destinations, the caps) is the same
    for every kind, so an archive kiln ships between machines gets them all."""

    files: tuple[str, ...]
    """Regular files allowed at the top."""
    trees: tuple[str, ...]
    """Top-level directories whose contents are allowed."""
    hint: str
    """The next step when an archive of this kind is refused."""

    def allows(self, member: tarfile.TarInfo) -> bool:
        parts = member.name.split("/")
        return (member.name in self.files and member.isfile()) or (
            parts[0] in self.trees and (len(parts) > 1 or member.isdir())
        )

    def describe(self) -> str:
        names = [*self.files, *(f"{tree}/" for tree in self.trees)]
        return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


SHARD_LAYOUT = Layout((MANIFEST,), (CACHE_PREFIX, EXTRA_PREFIX), REFUSED_HINT)
"""A shard's cache archive: its manifest, the cache, the named extra files."""

_SIZE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-z]*)\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    **{f"{p}b": 1000**i for i, p in enumerate("kmgt", 1)},
    **{p: 1000**i for i, p in enumerate("kmgt", 1)},
    **{f"{p}ib": 1024**i for i, p in enumerate("kmgt", 1)},
}


def parse_size(text: str) -> int:
    """``64MiB``, ``3GB``, ``20GiB``, ``1.5G`` or a plain byte count, as bytes.

    Raises ``ValueError`` with a sentence that says what is accepted."""
    match = _SIZE.match(text)
    unit = match["unit"].lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"{text!r} is not a size; write a number of bytes with an optional unit, "
            "e.g. 64MiB, 3GB or 20GiB"
        )
    scaled = float(match["number"]) * _UNITS[unit]
    if scaled >= 2**63:  # 400 digits make an infinite float, which int() refuses
        raise ValueError(f"{text!r} is too large a size")
    size = int(scaled)
    if size <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return size


def format_size(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            value = size / factor
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"


@dataclass(frozen=True)
class ArchiveLimits:
    """What one archive may unpack to. Resolved once: command line, then environment
    (``KILN_MAX_UNPACKED_SIZE``, ``KILN_MAX_MEMBERS``), then the defaults."""

    max_unpacked_size: int = DEFAULT_MAX_UNPACKED_SIZE
    max_members: int = DEFAULT_MAX_MEMBERS

    @classmethod
    def resolve(
        cls,
        max_unpacked_size: int | None = None,
        max_members: int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ArchiveLimits:
        environ = os.environ if environ is None else environ
        if max_unpacked_size is None and environ.get(MAX_UNPACKED_SIZE_ENV):
            try:
                max_unpacked_size = parse_size(environ[MAX_UNPACKED_SIZE_ENV])
            except ValueError as exc:
                raise UsageError(
                    f"{MAX_UNPACKED_SIZE_ENV}: {exc}.",
                    hint=f"Unset it to use the default, {format_size(DEFAULT_MAX_UNPACKED_SIZE)}.",
                ) from None
        if max_members is None and environ.get(MAX_MEMBERS_ENV):
            text = environ[MAX_MEMBERS_ENV]
            if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < 1:
                raise UsageError(
                    f"{MAX_MEMBERS_ENV}: {text!r} is not a positive whole number.",
                    hint=f"Unset it to use the default, {DEFAULT_MAX_MEMBERS:,}.",
                )
            max_members = int(text)
        return cls(
            max_unpacked_size or DEFAULT_MAX_UNPACKED_SIZE, max_members or DEFAULT_MAX_MEMBERS
        )


@dataclass(frozen=True)
class ArchiveContents:
    """What the first pass found: the validated manifest and the totals."""

    path: Path
    manifest: ShardManifest
    members: int
    unpacked_size: int


def printable(text: str) -> str:
    """*text* with each character that is not printable (a newline, a terminal escape, a
    lone surrogate) written as its Python escape: for messages that quote another job's
    file, where a newline followed by ``::error::`` would be a GitHub Actions command."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def member_label(archive: Path, name: str) -> str:
    """How an error names a member: ``ARCHIVE, member 'NAME'``."""
    return f"{archive}, member {name!r}"


def pack(
    cache_dir: Path,
    manifest: ShardManifest | Mapping[str, Any],
    out_path: Path,
    extras: dict[str, Path] | None = None,
) -> Path:
    """Write ``out_path`` atomically: manifest, the cache tree, and named extra files.

    The manifest is validated on the way out too, so a writer cannot produce what the
    reader refuses."""
    if not isinstance(manifest, ShardManifest):
        manifest = validate_manifest(dict(manifest))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    # Stored, not deflated (level 0): ccache's entries are compressed already (zstd), so
    # deflate took an awkward-cpp shard's 3.7 MB cache to 3.2 MB for 1.0 s instead of
    # 0.3 s, and the link job read each archive twice as slowly. The gzip container
    # stays: its CRC and end-of-stream checks are what name a cut or corrupted archive.
    with tarfile.open(partial, "w:gz", compresslevel=0) as tar:
        blob = json.dumps(manifest.model_dump(by_alias=True), indent=2, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        for path in sorted(cache_dir.rglob("*")):
            relative = path.relative_to(cache_dir).as_posix()
            if path.is_file() and not path.is_symlink() and not is_counters(relative):
                tar.add(path, arcname=f"{CACHE_PREFIX}/{relative}", recursive=False)
        for name, path in (extras or {}).items():
            if path.is_file():
                tar.add(path, arcname=f"{EXTRA_PREFIX}/{name}", recursive=False)
    partial.replace(out_path)
    return out_path


# --------------------------------------------------------------------------- checks


def name_refusal(name: str) -> str | None:
    """Why a member's *name* is no plain relative path inside the archive's tree, or None.
    Shard archives and sdists (:mod:`wheelkiln.builder.source`) are held to it alike."""
    parts = name.split("/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if "" in parts:
        return "a path with an empty component (a doubled or trailing slash)"
    if ".." in parts:
        return "a path with a '..' component"
    if "." in parts:
        return "a path with a '.' component"
    if len(os.fsencode(name)) > PATH_MAX_BYTES:
        return f"a path longer than {PATH_MAX_BYTES} bytes"
    if any(len(os.fsencode(part)) > NAME_MAX_BYTES for part in parts):
        return f"a path with a component longer than {NAME_MAX_BYTES} bytes"
    return None


def _refusal(member: tarfile.TarInfo, root: str, layout: Layout) -> str | None:
    """Why ``member`` may not be extracted under ``root``, or None."""
    if (problem := name_refusal(member.name)) is not None:
        return problem
    if member.issym():
        return f"a symbolic link (to {member.linkname!r})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r})"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a fifo"
    if member.sparse is not None:  # a pax sparse map: its bytes are not its file
        return "a sparse file"
    if not (member.isfile() or member.isdir()):
        return f"a special file (tar type {member.type!r})"
    if not layout.allows(member):
        return f"outside {layout.describe()}"
    # The resolved destination: the standard library's data filter (PEP 706) resolves
    # the path (following any symlink already on disk) and refuses anything outside root.
    try:
        tarfile.data_filter(member, root)
    except tarfile.FilterError as exc:
        return f"refused by the tar data filter ({exc})"
    return None


class _HeaderRefused(tarfile.TarError):
    """An extended header kiln does not read (too large, one too many, sparse). Not a
    tarfile.HeaderError: tarfile would take that for the end of the archive."""


_EXTENDED = {
    tarfile.GNUTYPE_LONGNAME: "GNU long name header",
    tarfile.GNUTYPE_LONGLINK: "GNU long link header",
    tarfile.XHDTYPE: "pax extended header",
    tarfile.XGLTYPE: "pax global header",
    tarfile.SOLARIS_XHDTYPE: "Solaris extended header",
}


class _GuardedInfo(tarfile.TarInfo):
    """A TarInfo whose extended headers are checked before tarfile reads them.

    ``_proc_member`` is the hook tarfile's own comments offer subclasses; it runs once
    per header, before the header's data is read. Sparse members are refused outright:
    a shard never writes one, and tarfile reads a GNU sparse map (old-style extension
    blocks, or a pax 1.0 map in the member's data) whole, however long it says it is."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        assert isinstance(tar, _GuardedTar)
        kind = _EXTENDED.get(self.type)
        if kind is None:
            tar.extended_in_a_row = 0
            if self.type == tarfile.GNUTYPE_SPARSE:
                raise _HeaderRefused("a GNU sparse member")
        else:
            tar.extended_in_a_row += 1
            if not 0 <= self.size <= HEADER_MAX_BYTES:
                raise _HeaderRefused(
                    f"a {kind} of {format_size(self.size)}, more than the "
                    f"{format_size(HEADER_MAX_BYTES)} a header may be"
                )
            if tar.extended_in_a_row > EXTENDED_HEADERS_MAX:
                raise _HeaderRefused(
                    f"more than {EXTENDED_HEADERS_MAX} extended headers in a row"
                )
        # tarfile declares no types for its _proc_* methods.
        member: tarfile.TarInfo = super()._proc_member(tar)  # type: ignore[misc]
        return member

    def _proc_gnusparse_10(self, *_: object) -> None:
        raise _HeaderRefused("a pax header of a sparse member (GNU sparse 1.0)")


class _GuardedTar(tarfile.TarFile):
    """A TarFile that reads its headers as :class:`_GuardedInfo`."""

    tarinfo = _GuardedInfo
    members: list[tarfile.TarInfo]
    """Every member read so far (tarfile's, undeclared in its stubs)."""
    extended_in_a_row = 0
    """Extended headers read since the last member's own header."""


class _Cursor:
    """The member being read, so an error in the compressed stream can name it."""

    def __init__(self) -> None:
        self.member: str | None = None

    def where(self, archive: Path) -> str:
        if self.member is None:
            return f"{archive}, at its first member"
        return member_label(archive, self.member)

    def next_header(self, archive: Path) -> str:
        """Where a header that is refused before it makes a member is."""
        if self.member is None:
            return f"{archive}, at its first member"
        return f"{archive}, after member {self.member!r}"


@contextmanager
def _reading(
    archive: Path, hint: str = REFUSED_HINT
) -> Iterator[tuple[_GuardedTar, _Cursor]]:
    """Open ``archive`` as a gzip'd tar stream; any read error becomes a named GateError."""
    cursor = _Cursor()
    try:
        # A fifo or a device named *.tar.gz would block the open or never end.
        if not stat.S_ISREG(archive.stat().st_mode):
            raise GateError(
                f"{archive}: not a regular file, so not a shard archive; nothing was read.",
                hint=hint,
            )
        # gzip.GzipFile, not tarfile's own "r|gz": only GzipFile checks the end-of-stream
        # marker and the CRC, so a cut or corrupted archive is named, not half-read.
        with (
            archive.open("rb") as raw,
            gzip.GzipFile(fileobj=raw, mode="rb") as unzipped,
            _GuardedTar.open(fileobj=unzipped, mode="r|") as tar,
        ):
            yield tar, cursor
    except _HeaderRefused as exc:
        raise GateError(
            f"{cursor.next_header(archive)}: {exc}; the archive was rejected and nothing was "
            "extracted from it.",
            hint=hint,
        ) from None
    except MemoryError:
        raise GateError(
            f"{cursor.where(archive)}: reading it ran out of memory; the archive was "
            "rejected and nothing was extracted from it.",
            hint=hint,
        ) from None
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, FileNotFoundError | IsADirectoryError | PermissionError):
            raise GateError(
                f"{archive}: cannot open it ({exc.strerror}).",
                hint="Check that the shard job's archive was downloaded completely and is readable.",
            ) from None
        problem = str(exc) or type(exc).__name__
        if isinstance(exc, EOFError):
            problem = f"truncated: {problem}"
        raise GateError(
            f"{cursor.where(archive)}: not a readable gzip'd tar ({problem}); "
            "nothing was extracted from it.",
            hint=hint,
        ) from None


def _checked(
    archive: Path,
    tar: _GuardedTar,
    cursor: _Cursor,
    limits: ArchiveLimits,
    root: str,
    layout: Layout = SHARD_LAYOUT,
) -> Iterator[tarfile.TarInfo]:
    """Every member, each checked (name, type, destination, count, running size total)
    before it is yielded."""
    total = 0
    seen: set[str] = set()
    files: set[str] = set()
    directories: set[str] = set()  # named by a member, or a parent of one
    for count, member in enumerate(_members(archive, tar, cursor, layout.hint), 1):
        cursor.member = member.name
        where = member_label(archive, member.name)
        if count > limits.max_members:
            raise GateError(
                f"{where}: the archive has more than {limits.max_members:,} members, the "
                "limit on members per archive; nothing was extracted from it.",
                hint=_raise_hint("--max-members", MAX_MEMBERS_ENV, f"{limits.max_members * 2}"),
            )
        problem = _refusal(member, root, layout)
        if problem is None and member.name in seen:
            problem = "a second member of the same name"
        if problem is None:
            problem = _kind_clash(member, files, directories)
        if problem is not None:
            raise GateError(
                f"{where} is {problem}; the archive was rejected and nothing was extracted "
                "from it.",
                hint=layout.hint,
            )
        seen.add(member.name)
        if member.isfile():
            total += member.size
            if total > limits.max_unpacked_size:
                raise GateError(
                    f"{where}: its header says {format_size(member.size)}, which takes the "
                    f"archive past the limit of {format_size(limits.max_unpacked_size)} "
                    "unpacked per archive; nothing was extracted from it.",
                    hint=_raise_hint(
                        "--max-unpacked-size",
                        MAX_UNPACKED_SIZE_ENV,
                        format_size(2 * limits.max_unpacked_size).replace(" ", ""),
                    ),
                )
        yield member
    _check_trailer(archive, tar, cursor, layout.hint)


def _members(
    archive: Path, tar: _GuardedTar, cursor: _Cursor, hint: str
) -> Iterator[tarfile.TarInfo]:
    """The archive's members, one header at a time.

    tarfile keeps every member it has read (``tar.members``), which in a stream nothing
    reads again: dropped, so memory does not grow with the member count. What tarfile
    raises beyond its own errors while it parses a header (a ValueError for a number of
    more than 4300 digits in a pax header or a sparse map, a RecursionError) names the
    archive too."""
    while True:
        try:
            member = tar.next()
        except (ValueError, RecursionError) as exc:
            problem = str(exc).split(";")[0][:120] or type(exc).__name__
            raise GateError(
                f"{cursor.next_header(archive)}: a header that cannot be read ({problem}); "
                "the archive was rejected and nothing was extracted from it.",
                hint=hint,
            ) from None
        if member is None:
            return
        tar.members.clear()
        yield member


def _kind_clash(member: tarfile.TarInfo, files: set[str], directories: set[str]) -> str | None:
    """Why *member* cannot be written beside the members before it (under one of their
    files, or a file where they need a directory), or None; records it in *files* and
    *directories*. (A directory member named as a file is a second member of that name.)"""
    parts = member.name.split("/")
    parents = ["/".join(parts[:end]) for end in range(1, len(parts))]
    under = next((parent for parent in parents if parent in files), None)
    if under is not None:
        return f"under {under!r}, which is a file in this archive"
    if member.isdir():
        directories.add(member.name)
    elif member.name in directories:
        return "a file, and a directory of that name is in this archive"
    else:
        files.add(member.name)
    directories.update(parents)
    return None


def _check_trailer(archive: Path, tar: tarfile.TarFile, cursor: _Cursor, hint: str) -> None:
    """tarfile ends an archive quietly at the first header it cannot parse, so a member
    whose header understates its size hides the bytes behind it (which another tar
    might read as members). After the last member only the zero padding may follow."""
    rest = tar.fileobj.read(TRAILER_MAX_BYTES + 1) if tar.fileobj is not None else b""
    if len(rest) > TRAILER_MAX_BYTES or rest.strip(b"\0"):
        raise GateError(
            f"{cursor.where(archive)}: after this member the archive holds data that is not "
            "a tar header (a header that understates its member's size?); the archive was "
            "rejected and nothing was extracted from it.",
            hint=hint,
        )


def _raise_hint(option: str, variable: str, example: str) -> str:
    return (
        f"If the archive is genuine, raise the limit: {option} {example} "
        f"(or {variable}={example}). Otherwise re-run the shard that produced it."
    )


def _read_manifest_member(archive: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> Any:
    where = member_label(archive, member.name)
    if member.size > MANIFEST_MAX_BYTES:
        raise GateError(
            f"{where}: {format_size(member.size)}, larger than any manifest "
            f"({format_size(MANIFEST_MAX_BYTES)} at most).",
            hint=REFUSED_HINT,
        )
    handle = tar.extractfile(member)
    data, problem = json_document(handle.read(MANIFEST_MAX_BYTES + 1) if handle else b"")
    if problem is None:
        return data
    raise GateError(f"{where}: {problem}.", hint=REFUSED_HINT)


def json_document(blob: bytes) -> tuple[Any, str | None]:
    """The JSON document in *blob* (another job's file), and None; or None and why kiln
    reads none there, as a message's last part."""
    try:
        return json.loads(blob.decode("utf-8")), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte {blob[exc.start]:#04x} at offset {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    except ValueError:  # the only other one json raises: int()'s limit of 4300 digits
        return None, "not JSON kiln reads (a number too long to convert)"
    except RecursionError:
        return None, "JSON nested too deeply"


# --------------------------------------------------------------------------- passes


def inspect_archive(archive: Path, limits: ArchiveLimits | None = None) -> ArchiveContents:
    """The first pass: check every member and read the manifest, writing nothing.

    Raises GateError naming the archive, the member and the problem."""
    limits = limits or ArchiveLimits.resolve()
    data: Any = None
    found = False
    members = 0
    size = 0
    with _reading(archive) as (tar, cursor):
        for member in _checked(archive, tar, cursor, limits, _LAYOUT_ROOT):
            members += 1
            size += member.size if member.isfile() else 0
            if member.name == MANIFEST:
                data = _read_manifest_member(archive, tar, member)
                found = True
    if not found:
        raise GateError(
            f"{member_label(archive, MANIFEST)} is missing: this is not a shard archive.",
            hint=REFUSED_HINT,
        )
    try:
        manifest = validate_manifest(data)
    except ManifestError as exc:
        raise GateError(
            f"{member_label(archive, MANIFEST)} is not a shard manifest: {printable(str(exc))}.",
            hint=REFUSED_HINT,
        ) from None
    return ArchiveContents(archive, manifest, members, size)


def read_manifest(archive: Path, limits: ArchiveLimits | None = None) -> ShardManifest:
    return inspect_archive(archive, limits).manifest


def extract(
    archive: Path,
    cache_dir: Path,
    extras_dir: Path | None = None,
    limits: ArchiveLimits | None = None,
) -> list[str]:
    """The second pass: merge the archive's cache into ``cache_dir`` and its extra files
    into ``extras_dir`` (skipped when None). Call :func:`inspect_archive` first.

    Every member is checked again and streamed in chunks under the caps, into a staging
    directory beside ``cache_dir``; only when all of them are written do they move into
    place. Returns the member names written.

    The staging directory is flat (one file per member, named by its number): the
    directories are made once, where the members land. Staging the archive's own tree
    made each directory twice and deleted it once (a demo-cpp link job's three archives:
    0.46 s, 53 of its 0.34 s after moving whole directories were the deletions)."""
    limits = limits or ArchiveLimits.resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".kiln-unpack-", dir=cache_dir.parent))
    written: list[str] = []
    staged: list[tuple[Path, Path, Path]] = []  # (the staged file, its tree, where it goes)
    try:
        total = 0
        with _reading(archive) as (tar, cursor):
            for member in _checked(archive, tar, cursor, limits, str(staging)):
                if not member.isfile() or member.name == MANIFEST:
                    continue
                # The layout allows files only under these two trees, besides the manifest.
                tree, _, relative = member.name.partition("/")
                if tree == EXTRA_PREFIX and extras_dir is not None:
                    root = extras_dir
                elif tree == CACHE_PREFIX and not is_counters(member.name):
                    root = cache_dir
                else:
                    continue  # extras not asked for; an older shard's counters: checked only
                source = tar.extractfile(member)
                if source is None:  # only for non-files, which were skipped above
                    continue
                target = staging / str(len(staged))
                with _writing(archive, staging):
                    total += copy_capped(
                        source,
                        target,
                        member.size,
                        limits.max_unpacked_size - total,
                        member_label(archive, member.name),
                    )
                staged.append((target, root, root / relative))
                written.append(member.name)
        _check_places(archive, staged, written)
        with _writing(archive, staging):
            made: set[Path] = set()
            for target, _, place in staged:
                if place.parent not in made:
                    place.parent.mkdir(parents=True, exist_ok=True)
                    made.add(place.parent)
                shutil.move(target, place)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def _check_places(
    archive: Path, staged: list[tuple[Path, Path, Path]], names: list[str]
) -> None:
    """Refuse the archive when a file of it would land where an earlier archive left a
    directory, or under a name an earlier archive left as a file, before anything moves.

    The archive itself is consistent (:func:`_kind_clash`), so only what is on disk can
    clash. A file over a file is a merge (two shards that stored the same entry); moved
    onto a directory, a file would land inside it under its staging name, and under a
    file its directory could not be made half-way through the moves."""
    directories: set[Path] = set()  # seen to be directories, or absent
    for (_, root, place), name in zip(staged, names, strict=True):
        clash: tuple[Path, str, str] | None = None  # (where, what is there, what is needed)
        for parent in reversed(place.relative_to(root).parents[:-1]):
            directory = root / parent
            if directory not in directories and _exists_as(directory) not in ("", "a directory"):
                clash = (directory, _exists_as(directory), "a directory")
                break
            directories.add(directory)
        if clash is None and _exists_as(place) == "a directory":
            clash = (place, "a directory", "a file")
        if clash is not None:
            where, there, needed = clash
            raise GateError(
                f"{member_label(archive, name)}: an earlier archive left {there} at {where}, "
                f"where this one needs {needed}; the archive was rejected and nothing was "
                "extracted from it (what is there was kept).",
                hint=REFUSED_HINT,
            )


def _exists_as(path: Path) -> str:
    """What *path* is, not following a link: '' (nothing), 'a directory' or 'a file'."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return ""
    return "a directory" if stat.S_ISDIR(mode) else "a file"


def unpack(
    archive: Path,
    cache_dir: Path,
    extras_dir: Path | None = None,
    limits: ArchiveLimits | None = None,
) -> ArchiveContents:
    """Both passes: check everything, then merge. Returns what the check found."""
    limits = limits or ArchiveLimits.resolve()
    contents = inspect_archive(archive, limits)
    extract(archive, cache_dir, extras_dir, limits)
    return contents


def extract_tree(
    archive: Path, destination: Path, layout: Layout, limits: ArchiveLimits | None = None
) -> int:
    """Both passes for an archive that becomes a directory of its own (a source bundle):
    check every member against *layout* and the shared rules, writing nothing; then
    write them into a staging directory beside *destination* and rename it into place,
    so *destination* (which must not exist) holds all of the archive or nothing.
    Executable bits and modification times are kept. Returns the members written."""
    limits = limits or ArchiveLimits.resolve()
    with _reading(archive, layout.hint) as (tar, cursor):
        for _ in _checked(archive, tar, cursor, limits, _LAYOUT_ROOT, layout):
            pass
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".kiln-unpack-", dir=destination.parent))
    written = 0
    try:
        total = 0
        with _reading(archive, layout.hint) as (tar, cursor):
            for member in _checked(archive, tar, cursor, limits, str(staging), layout):
                target = staging / member.name
                with _writing(archive, staging):
                    if member.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    source = tar.extractfile(member)
                    if source is None:
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    total += copy_capped(
                        source,
                        target,
                        member.size,
                        limits.max_unpacked_size - total,
                        member_label(archive, member.name),
                        layout.hint,
                    )
                    if member.mode & 0o111:
                        target.chmod(0o755)
                    os.utime(target, (member.mtime, member.mtime))
                written += 1
        with _writing(archive, staging):
            staging.rename(destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


@contextmanager
def open_member(
    archive: Path, name: str, limits: ArchiveLimits | None = None
) -> Iterator[IO[bytes] | None]:
    """Check the whole archive, then stream one member (None when there is no such
    member); for readers that need a single file, such as the wrapper log."""
    limits = limits or ArchiveLimits.resolve()
    inspect_archive(archive, limits)
    with _reading(archive) as (tar, cursor):
        for member in _checked(archive, tar, cursor, limits, _LAYOUT_ROOT):
            if member.name == name and member.isfile():
                yield tar.extractfile(member)
                return
    yield None


def copy_capped(
    source: IO[bytes],
    target: Path,
    declared: int,
    allowed: int,
    where: str,
    hint: str = REFUSED_HINT,
) -> int:
    """Stream ``source`` into a new file ``target`` in chunks, refusing (and removing the
    partial file) once it yields more than its header ``declared`` or than ``allowed``
    bytes. Returns the bytes written."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_BINARY", 0)
    written = 0
    fd = os.open(target, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(CHUNK):
                written += len(chunk)
                if written > declared:
                    raise GateError(
                        f"{where}: yields more bytes than its header's {format_size(declared)}; "
                        "the archive was rejected.",
                        hint=hint,
                    )
                if written > allowed:
                    raise GateError(
                        f"{where}: unpacking it passes the limit on unpacked size per "
                        "archive; the archive was rejected.",
                        hint=_raise_hint("--max-unpacked-size", MAX_UNPACKED_SIZE_ENV, "40GiB"),
                    )
                out.write(chunk)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return written


@contextmanager
def _writing(archive: Path, where: Path) -> Iterator[None]:
    """A write error (a full disk, no permission) is ours, not the archive's: a
    BuildError, which is no OSError, so :func:`_reading` lets it through."""
    try:
        yield
    except OSError as exc:
        raise BuildError(
            f"Could not unpack {archive} under {where.parent}: {exc}.",
            hint="Check the free space and the permissions there.",
        ) from None
