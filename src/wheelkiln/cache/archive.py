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


class _Cursor:
    """The member being read, so an error in the compressed stream can name it."""

    def __init__(self) -> None:
        self.member: str | None = None

    def where(self, archive: Path) -> str:
        if self.member is None:
            return f"{archive}, at its first member"
        return member_label(archive, self.member)


@contextmanager
def _reading(
    archive: Path, hint: str = REFUSED_HINT
) -> Iterator[tuple[tarfile.TarFile, _Cursor]]:
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
            tarfile.open(fileobj=unzipped, mode="r|") as tar,
        ):
            yield tar, cursor
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
    tar: tarfile.TarFile,
    cursor: _Cursor,
    limits: ArchiveLimits,
    root: str,
    layout: Layout = SHARD_LAYOUT,
) -> Iterator[tarfile.TarInfo]:
    """Every member, each checked (name, type, destination, count, running size total)
    before it is yielded."""
    total = 0
    seen: set[str] = set()
    for count, member in enumerate(tar, 1):
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
    blob = handle.read(MANIFEST_MAX_BYTES + 1) if handle is not None else b""
    try:
        return json.loads(blob.decode("utf-8"))
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 (byte {blob[exc.start]:#04x} at offset {exc.start})"
    except json.JSONDecodeError as exc:
        problem = f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    except RecursionError:
        problem = "JSON nested too deeply"
    raise GateError(f"{where}: {problem}.", hint=REFUSED_HINT)


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
            f"{member_label(archive, MANIFEST)} is not a shard manifest: {exc}.",
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
    staged: list[tuple[Path, Path]] = []  # (the staged file, where it goes)
    try:
        total = 0
        with _reading(archive) as (tar, cursor):
            for member in _checked(archive, tar, cursor, limits, str(staging)):
                if not member.isfile() or member.name == MANIFEST:
                    continue
                # The layout allows files only under these two trees, besides the manifest.
                tree, _, relative = member.name.partition("/")
                if tree == EXTRA_PREFIX and extras_dir is not None:
                    place = extras_dir / relative
                elif tree == CACHE_PREFIX and not is_counters(member.name):
                    place = cache_dir / relative
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
                staged.append((target, place))
                written.append(member.name)
        with _writing(archive, staging):
            made: set[Path] = set()
            for target, place in staged:
                if place.parent not in made:
                    place.parent.mkdir(parents=True, exist_ok=True)
                    made.add(place.parent)
                shutil.move(target, place)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


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
