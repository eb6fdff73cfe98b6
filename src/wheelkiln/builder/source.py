"""Fetching a recipe's source: a local tree, a pinned PyPI sdist, or a git revision."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import functools
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from wheelkiln import holds, run
from wheelkiln.digest import sha256_file
from wheelkiln.errors import GateError, RecipeError, SourceError
from wheelkiln.globs import glob_matches, glob_segments
from wheelkiln.recipe.load import LoadedRecipe, path_kind, resolve_inside
from wheelkiln.recipe.model import BUILD_OUTPUTS, PYPI_SPEC

if TYPE_CHECKING:  # the sdist checks load it when they run: a build fetches no sdist
    from wheelkiln.cache.archive import ArchiveLimits

MARKER = ".kiln-source"
"""Written into a fetched tree once it is whole."""

IGNORED_ANYWHERE = ("*.egg-info", ".git", "__pycache__")
"""Never source, at any depth: none of them can be an importable package's name."""


def is_ignored(relative: tuple[str, ...], exclude: Sequence[str] = BUILD_OUTPUTS) -> bool:
    """Whether the entry at *relative* (path parts under the package root) is left out
    of the private copy and the source digest: it matches one of the recipe's
    ``source.exclude`` globs (by default the build outputs at the root, and only there:
    ``src/pkg/build/`` is a subpackage the wheel needs), or is in :data:`IGNORED_ANYWHERE`.
    """
    if any(fnmatch.fnmatchcase(part, p) for part in relative for p in IGNORED_ANYWHERE):
        return True
    return any(glob_matches(segments, relative) for segments in _segments(tuple(exclude)))


@functools.cache
def _segments(exclude: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The glob segments of each pattern, split once: the copy and the digest ask for
    every entry of the tree (0.1 s of splitting for awkward-cpp's 1,918 files)."""
    return tuple(glob_segments(pattern) for pattern in exclude)


SDIST_REFUSED_HINT = (
    "kiln unpacks no sdist that could write or lead outside its own tree. Check that "
    "source.pypi and source.sha256 pin the release you mean; to build it anyway, unpack and "
    "check it yourself and point source.path at the tree."
)
SDIST_UNREADABLE_HINT = (
    "The file has the pinned sha256, so the upload itself is damaged or is no sdist: check "
    "source.pypi and source.sha256 against the package index."
)
SYMLINK_HOPS = 40
"""Symbolic links followed while resolving one link's target: Linux's limit (ELOOP)."""
NAME_MAX = 255
"""The longest name of one directory entry, in bytes, on Linux's file systems."""
LINK_TARGET_MAX = 4096
"""The longest symbolic link target (PATH_MAX); a zip stores a link's target as its content."""

MemberKind = Literal["file", "directory", "symlink", "hardlink"]


@dataclass(frozen=True)
class _Member:
    """One member of an sdist, as its header gives it."""

    name: str
    """As the archive spells it."""
    path: str
    """Relative to the archive's root: *name* without a leading ``./`` or a trailing ``/``."""
    kind: MemberKind
    size: int
    """Declared, of a regular file; 0 otherwise."""
    target: str
    """What a link names: a symbolic link's target, or a hard link's earlier member."""
    executable: bool
    mtime: float | None
    entry: tarfile.TarInfo | zipfile.ZipInfo


_READ_ERRORS = (
    tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error,
    lzma.LZMAError, OSError, RuntimeError, NotImplementedError, ValueError,
)  # fmt: skip
"""What the standard library raises on a damaged tar, zip or compressed stream (bz2 and
gzip raise OSError, a zip's encrypted member RuntimeError, an unknown compression
NotImplementedError)."""


class _Unreadable(Exception):
    """Reading the sdist failed midway: the archive's fault, not the disk's."""


class _MemberStream(io.RawIOBase):
    """A member's bytes, opened on the first read; any read error is :class:`_Unreadable`,
    so the writer tells a damaged sdist from a full disk."""

    def __init__(self, open_member: Callable[[], IO[bytes]]) -> None:
        self.open_member = open_member
        self.inner: IO[bytes] | None = None

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
        super().close()

    def readinto(self, buffer: Any) -> int:
        try:
            if self.inner is None:
                self.inner = self.open_member()
            block = self.inner.read(len(buffer))
        except _READ_ERRORS as exc:
            raise _Unreadable(_problem(exc)) from None
        buffer[: len(block)] = block
        return len(block)


def _problem(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class _Sdist:
    """How errors about one sdist read: the recipe key it is fetched for, and the file."""

    archive: Path
    origin: str

    def refused(self, member: str, problem: str) -> SourceError:
        return SourceError(
            f"{self.origin}: the sdist {self.archive} has a member {member!r}, {problem}; "
            "nothing of it was extracted.",
            hint=SDIST_REFUSED_HINT,
        )

    def unreadable(self, problem: str, member: str | None = None) -> SourceError:
        kind = "zip" if self.archive.name.endswith(".zip") else "tar"
        where = f" at its member {member!r}" if member is not None else ""
        return SourceError(
            f"{self.origin}: the sdist {self.archive} is not a readable {kind} archive{where} "
            f"({problem}); nothing of it was extracted.",
            hint=SDIST_UNREADABLE_HINT,
        )

    def too_large(self, what: str, variable: str, larger: str) -> SourceError:
        return SourceError(
            f"{self.origin}: the sdist {self.archive} {what}; nothing of it was extracted.",
            hint=f"If the sdist is genuine, raise the limit: {variable}={larger}. Otherwise "
            "check that source.pypi and source.sha256 pin the release you mean.",
        )

    def unwritable(self, where: Path, exc: OSError) -> SourceError:
        return SourceError(
            f"{self.origin}: could not extract the sdist {self.archive} under {where}: "
            f"{exc.strerror or exc}.",
            hint="Check the free space and the permissions there, then run kiln again.",
        )


def _extract(
    archive: Path, into: Path, origin: str, limits: ArchiveLimits | None = None
) -> Path:
    """Unpack the sdist *archive* (a tar, compressed or not, or a zip) into *into*: the
    contents of its only top-level directory where it has one, else all of it. *origin*
    names the recipe key it is fetched for, in every error.

    Neither format goes through the standard library's extraction: Python 3.11.7's tar
    ``data`` filter lets a chain of directory links lead a member's write out of the
    destination (CVE-2025-4517), and zipfile checks no member against the others. Every
    member is checked from the headers before a byte is written, and refused
    (:class:`SourceError`, nothing kept): a name that is absolute or has a ``..``, ``.``
    or empty component; two members of one name; a member below a symbolic link or a
    file; a device, fifo or other special member; a hard link to anything but an earlier
    regular file; a symbolic link that is absolute or whose target, resolved over the
    sdist's own links, leaves the tree kiln keeps; a lone top entry that is a link
    (``pkg-1.0 -> .`` would make the whole store the tree); more members or more
    declared bytes than *limits* allow (the shard archives' caps, 20 GiB by default).
    Files are streamed under the same cap, links made last, so no write passes through
    one, and every link of the result is resolved again on disk before the tree is moved
    into place. The staging directory never outlives the call.
    """
    from wheelkiln.cache.archive import ArchiveLimits

    limits = limits or ArchiveLimits.resolve()
    sdist = _Sdist(archive, origin)
    staging = into.with_name(into.name + ".staging")
    _remove(os.fspath(staging))
    staging.mkdir(parents=True)
    try:
        with contextlib.ExitStack() as stack:
            packed: tarfile.TarFile | zipfile.ZipFile
            try:
                if archive.name.endswith(".zip"):
                    packed = stack.enter_context(zipfile.ZipFile(archive))
                    members = _zip_members(packed, limits, sdist)
                else:
                    packed = stack.enter_context(_open_tar(archive))
                    members = _tar_members(packed, limits, sdist)
            except FileNotFoundError:
                raise  # a prune took it meanwhile: the caller downloads it again
            except _READ_ERRORS as exc:
                raise sdist.unreadable(_problem(exc)) from None
            top = _checked_tree(members, limits, sdist)
            _write(members, packed, staging, limits, sdist)
        tree = staging / top if top else staging
        _check_written(tree, sdist)
        _remove(os.fspath(into))
        tree.rename(into)
    finally:
        _remove(os.fspath(staging))
    return into


def _open_tar(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive)
    except tarfile.ReadError:  # its message lists every compression it tried, a line each
        raise tarfile.ReadError(
            "no tar archive, plain or compressed with gzip, bzip2 or xz"
        ) from None


def _member_path(name: str) -> str:
    path = name
    while path.startswith("./"):
        path = path[2:]  # as `tar -C dir .` names members
    return path.rstrip("/")


def _counted(count: int, limits: ArchiveLimits, sdist: _Sdist) -> None:
    from wheelkiln.cache.archive import MAX_MEMBERS_ENV

    if count > limits.max_members:
        raise sdist.too_large(
            f"has more than {limits.max_members:,} members, the limit on an sdist's members",
            MAX_MEMBERS_ENV,
            str(limits.max_members * 2),
        )


def _tar_members(tar: tarfile.TarFile, limits: ArchiveLimits, sdist: _Sdist) -> list[_Member]:
    members = []
    for count, info in enumerate(tar, 1):  # a header at a time: the count stops a bomb early
        _counted(count, limits, sdist)
        kind: MemberKind
        if info.isreg():
            kind = "file"
        elif info.isdir():
            kind = "directory"
        elif info.issym():
            kind = "symlink"
        elif info.islnk():
            kind = "hardlink"
        elif info.ischr() or info.isblk():
            raise sdist.refused(info.name, "a device")
        elif info.isfifo():
            raise sdist.refused(info.name, "a fifo")
        else:
            raise sdist.refused(info.name, f"a special file (tar type {info.type!r})")
        members.append(_Member(
            info.name, _member_path(info.name), kind, info.size if kind == "file" else 0,
            info.linkname, bool(info.mode & 0o111), info.mtime, info,
        ))  # fmt: skip
    return members


def _zip_members(zipped: zipfile.ZipFile, limits: ArchiveLimits, sdist: _Sdist) -> list[_Member]:
    members = []
    for count, info in enumerate(zipped.infolist(), 1):
        _counted(count, limits, sdist)
        # A zip made on Unix keeps the file's mode in the high bits of its attributes.
        mode = info.external_attr >> 16 if info.create_system == 3 else 0
        kind: MemberKind = "file"
        target = ""
        if info.is_dir() or stat.S_ISDIR(mode):
            kind = "directory"
        elif stat.S_ISLNK(mode):
            kind = "symlink"
            if info.file_size > LINK_TARGET_MAX:
                raise sdist.refused(
                    info.filename, f"a symbolic link with a {info.file_size:,}-byte target"
                )
            target = os.fsdecode(zipped.read(info))
        elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # zipfile's own writes give none
            raise sdist.refused(info.filename, "a device, fifo or socket")
        members.append(_Member(
            info.filename, _member_path(info.filename), kind,
            info.file_size if kind == "file" else 0, target, bool(mode & 0o111), None, info,
        ))  # fmt: skip
    return members


def _checked_tree(members: Sequence[_Member], limits: ArchiveLimits, sdist: _Sdist) -> str:
    """The top directory whose contents kiln keeps (empty: the whole archive), once every
    member is checked against the rules and the others; raises the first refusal."""
    from wheelkiln.cache.archive import MAX_UNPACKED_SIZE_ENV, format_size, name_refusal

    by_path: dict[str, _Member] = {}
    total = 0
    for member in members:
        if member.path == "" and member.kind == "directory":
            continue  # the archive's root itself, named `./`
        if (problem := name_refusal(member.path)) is not None:
            raise sdist.refused(member.name, problem)
        if any(len(os.fsencode(part)) > NAME_MAX for part in member.path.split("/")):
            raise sdist.refused(member.name, f"a name with a part longer than {NAME_MAX} bytes")
        earlier = by_path.get(member.path)
        if earlier is not None and not earlier.kind == member.kind == "directory":
            raise sdist.refused(member.name, "a second member of that name")
        if member.kind == "hardlink":
            linked = by_path.get(_member_path(member.target))
            if linked is None or linked.kind != "file":
                raise sdist.refused(
                    member.name,
                    f"a hard link to {member.target!r}, which is no regular file before it",
                )
        by_path[member.path] = member
        total += member.size
        if total > limits.max_unpacked_size:
            raise sdist.too_large(
                f"unpacks to more than {format_size(limits.max_unpacked_size)} by its "
                "members' declared sizes, the limit on an unpacked sdist",
                MAX_UNPACKED_SIZE_ENV,
                format_size(2 * limits.max_unpacked_size).replace(" ", ""),
            )
    if not by_path:
        raise sdist.unreadable("it holds no member")
    for member in by_path.values():
        parts = member.path.split("/")
        for depth in range(1, len(parts)):
            above = by_path.get("/".join(parts[:depth]))
            if above is not None and above.kind != "directory":
                kind = "a symbolic link" if above.kind == "symlink" else "a file"
                raise sdist.refused(member.name, f"inside {above.name!r}, which is {kind}")
    tops = {path.split("/")[0] for path in by_path}
    top = tops.pop() if len(tops) == 1 else ""
    lone = by_path.get(top)
    if lone is not None and lone.kind == "symlink":
        raise sdist.refused(
            lone.name, f"a symbolic link (to {lone.target!r}) that is the sdist's only top entry"
        )
    if lone is not None and lone.kind != "directory":
        top = ""  # a lone file: the tree is the archive's root, holding it
    base = (top,) if top else ()
    for member in by_path.values():
        if member.kind == "symlink" and (problem := _link_problem(member, by_path, base)):
            raise sdist.refused(member.name, problem)
    return top


def _link_problem(
    link: _Member, by_path: dict[str, _Member], base: tuple[str, ...]
) -> str | None:
    """Why the symbolic link member *link* is refused: it is absolute, or its target,
    resolved as the kernel resolves it over the sdist's own links (a ``..`` after a link
    applies to where the link leads), leaves *base*, the tree kiln keeps. The spelling
    alone does not tell: beside ``p/q/d -> ..``, the link ``e -> p/q/d/../..`` spells a
    path inside and leads above the root."""
    hops = 0

    def stays(stack: list[str], target: str) -> bool:
        nonlocal hops
        if target.startswith("/"):
            return False
        for component in target.split("/"):
            if component in ("", "."):
                continue
            if component == "..":
                if len(stack) <= len(base):
                    return False
                stack.pop()
                continue
            stack.append(component)
            member = by_path.get("/".join(stack))
            if member is not None and member.kind == "symlink":
                hops += 1
                stack.pop()
                if hops > SYMLINK_HOPS or not stays(stack, member.target):
                    return False
        return True

    if not link.target:
        return "a symbolic link to nothing"
    if link.target.startswith("/"):
        return f"a symbolic link to the absolute path {link.target!r}"
    if not stays(link.path.split("/")[:-1], link.target):
        return f"a symbolic link to {link.target!r}, which leads out of the sdist's tree"
    return None


def _write(
    members: Sequence[_Member],
    packed: tarfile.TarFile | zipfile.ZipFile,
    staging: Path,
    limits: ArchiveLimits,
    sdist: _Sdist,
) -> None:
    """Write the checked *members* under *staging*: directories and files in the
    archive's order, each file streamed under what is left of the size cap; then hard
    links, then symbolic links, so no write passes through a link."""
    from wheelkiln.cache.archive import CHUNK, copy_capped, member_label

    total = 0
    last = members[0]
    try:
        for last in members:
            target = staging / last.path
            if last.kind == "directory":
                target.mkdir(parents=True, exist_ok=True)
            elif last.kind == "file":
                target.parent.mkdir(parents=True, exist_ok=True)
                opened = functools.partial(_open_member, packed, last)
                with io.BufferedReader(_MemberStream(opened), CHUNK) as stream:
                    total += copy_capped(
                        stream, target, last.size, limits.max_unpacked_size - total,
                        member_label(sdist.archive, last.name),
                    )  # fmt: skip
                target.chmod(0o755 if last.executable else 0o644)
                if last.mtime is not None and 0 <= last.mtime < 2**33:
                    os.utime(target, (last.mtime, last.mtime))
        for last in members:
            target = staging / last.path
            if last.kind == "hardlink":
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(staging / _member_path(last.target), target, follow_symlinks=False)
        for last in members:
            target = staging / last.path
            if last.kind == "symlink":
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(last.target)
    except _Unreadable as exc:
        raise sdist.unreadable(str(exc), last.name) from None
    except GateError as exc:  # a member yielded more bytes than its header declared
        raise SourceError(f"{sdist.origin}: {exc.message}", hint=SDIST_UNREADABLE_HINT) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise sdist.refused(last.name, f"a name too long to write under {staging}") from None
        raise sdist.unwritable(staging.parent, exc) from None


def _open_member(packed: tarfile.TarFile | zipfile.ZipFile, member: _Member) -> IO[bytes]:
    if isinstance(packed, zipfile.ZipFile):
        assert isinstance(member.entry, zipfile.ZipInfo)
        return packed.open(member.entry)
    assert isinstance(member.entry, tarfile.TarInfo)
    handle = packed.extractfile(member.entry)
    assert handle is not None  # a regular file's
    return handle


def _check_written(tree: Path, sdist: _Sdist) -> None:
    """The result checked on disk, as the build will see it: only directories, regular
    files and links that resolve inside *tree*."""
    root = os.path.realpath(tree)
    for directory, subdirectories, files in os.walk(tree):  # no link is entered
        for name in (*subdirectories, *files):
            path = os.path.join(directory, name)  # noqa: PTH118
            relative = os.path.relpath(path, tree)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode) and not _inside(os.path.realpath(path), root):
                raise sdist.refused(relative, "a symbolic link that leads out of its tree")
            if not (stat.S_ISLNK(mode) or stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise sdist.refused(relative, "no directory, regular file or link once written")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def index_url() -> str:
    """The package index: ``$PIP_INDEX_URL``, else PyPI's simple API."""
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def _download_sdist(spec: str, sha256: str, downloads: Path) -> Path:
    """Download the file the index lists with digest *sha256* for *spec*, and verify it.

    The index's JSON page (PEP 691) names every file of the project with its sha256, so
    the pinned file is found by its digest and fetched as bytes. ``pip download`` would
    first build the sdist's metadata, which runs its setup.py: torch-scatter's imports
    torch, so it cannot even be downloaded that way. A file whose bytes do not match the
    pin is never kept.
    """
    # Here only: urllib.request brings http, ssl and email, for the one job that downloads.
    import urllib.parse
    import urllib.request

    match = PYPI_SPEC.match(spec)
    assert match is not None
    project = re.sub(r"[-_.]+", "-", match["name"]).lower()
    page = f"{index_url()}/{project}/"
    try:
        request = urllib.request.Request(page, headers={"Accept": SIMPLE_JSON})
        with urllib.request.urlopen(request, timeout=60) as response:
            listing = json.load(response)
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"Cannot read the package index page {page}: {exc}.",
            hint="Check the network, the project name in source.pypi, or PIP_INDEX_URL.",
        ) from None
    files = [f for f in listing.get("files", []) if f.get("hashes", {}).get("sha256") == sha256]
    if not files:
        version = match["version"]
        candidates = sorted(
            f"{f['filename']} ({f.get('hashes', {}).get('sha256', '?')})"
            for f in listing.get("files", [])
            if f"-{version}." in f.get("filename", "") and not f["filename"].endswith(".whl")
        )
        raise SourceError(
            f"{page} lists no file of {spec} with the pinned sha256 {sha256}. "
            + (
                f"Its sdists of {version}: {', '.join(candidates)}."
                if candidates
                else f"It lists no sdist of version {version}."
            ),
            hint="The upload changed or the pin is wrong. Check the digest on PyPI before "
            "updating source.sha256.",
        )
    chosen = files[0]
    url = urllib.parse.urljoin(page, chosen["url"])
    staging = Path(tempfile.mkdtemp(prefix=".download-", dir=downloads))
    try:
        target = staging / Path(urllib.parse.urlparse(url).path).name
        try:
            with urllib.request.urlopen(url, timeout=300) as response, target.open("wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise SourceError(f"Downloading {url} failed: {exc}.", hint="Try again.") from None
        actual = sha256_file(target)
        if actual != sha256:
            raise SourceError(
                f"{target.name}: sha256 is {actual}, the recipe pins {sha256}.",
                hint="The upload changed or the pin is wrong. Check the digest on PyPI "
                "before updating source.sha256.",
            )
        return target.replace(downloads / target.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fetch_pypi(spec: str, sha256: str, store: Path, origin: str | None = None) -> Path:
    """The extracted sdist of *spec*, downloaded once and verified against *sha256*.
    *origin* names the recipe key in errors (by default ``source.pypi 'SPEC'``).

    Parallel shard jobs all fetch the source on their first build, so the download and
    the extraction are locked per sdist; a tree counts as fetched only once its
    marker (:data:`MARKER`) is written. The process holds the tree until it ends
    (:func:`wheelkiln.holds.hold`): `kiln sources prune` removes no tree a build reads.
    """
    match = PYPI_SPEC.match(spec)
    assert match is not None
    name, version = match["name"], match["version"]
    tree = store / f"{name}-{version}-{sha256[:12]}"
    holds.hold(store, tree.name)  # before it is looked at: `kiln sources prune` waits
    if (tree / MARKER).exists():
        return tree
    downloads = store / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    with (store / f"{tree.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (tree / MARKER).exists():
            return tree  # another job fetched it while this one waited
        origin = origin or f"source.pypi {spec!r}"
        # Regular files only: a link there could lead to a file that never ends.
        existing = [p for p in downloads.iterdir() if _is_file(p) and sha256_file(p) == sha256]
        sdist = existing[0] if existing else None
        try:
            if sdist is not None:
                _extract(sdist, tree, origin)
                os.utime(sdist)  # its last use, for `kiln sources prune`
        except FileNotFoundError:
            sdist = None  # a prune took it meanwhile
        if sdist is None:
            _extract(_download_sdist(spec, sha256, downloads), tree, origin)
        (tree / MARKER).write_text(spec + "\n")
    return tree


def _fetch_git(url: str, rev: str, store: Path, origin: str | None = None) -> Path:
    """The checkout of *url* at the commit *rev* names, cloned once; locked like
    ``_fetch_pypi``, since the parallel shard jobs of one build would otherwise clone into
    (and delete) one tree. *origin* names the recipe key in errors."""
    tree = store / f"git-{hashlib.sha256(f'{url}@{rev}'.encode()).hexdigest()[:16]}"
    holds.hold(store, tree.name)
    if (tree / MARKER).exists():
        return tree
    store.mkdir(parents=True, exist_ok=True)
    with (store / f"{tree.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (tree / MARKER).exists():
            return tree  # another job cloned it while this one waited
        shutil.rmtree(tree, ignore_errors=True)
        run.run(["git", "clone", "--quiet", "--", url, str(tree)], what=f"Cloning {url}")
        # Checked out as a commit, detached: `git checkout REV` takes a REV that names no
        # commit (a file, `pyproject.toml`) as a pathspec and leaves HEAD where it was.
        resolved = run.run(
            ["git", "-C", str(tree), "rev-parse", "--verify", "--quiet", "--end-of-options",
             f"{rev}^{{commit}}"],
            check=False,
        )  # fmt: skip
        commit = resolved.output.strip()
        if resolved.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
            shutil.rmtree(tree, ignore_errors=True)
            raise SourceError(
                f"{origin or 'source.rev'}: {rev!r} names no commit of {url}.",
                hint="Set source.rev to a commit hash or a tag of that repository.",
            )
        run.run(
            ["git", "-C", str(tree), "checkout", "--quiet", "--detach", commit],
            what=f"Checking out {rev}",
        )
        (tree / MARKER).write_text(f"{url}@{rev}\n")
    return tree


def fetch_source(loaded: LoadedRecipe, store: Path) -> Path:
    """The pristine source tree of a recipe (fetched and cached where remote)."""
    source = loaded.recipe.source
    if source.path is not None:
        tree = loaded.resolve(source.path)
        if (kind := path_kind(tree)) != "directory":
            raise SourceError(
                f"{loaded.path}: source.path {tree} is not a directory ({kind}).",
                hint="Point source.path at the package, relative to the recipe file.",
            )
    elif source.pypi is not None:
        assert source.sha256 is not None
        origin = f"{loaded.path}: key 'source.pypi' ({source.pypi!r})"
        tree = _fetch_pypi(source.pypi, source.sha256, store, origin)
    else:
        assert source.git is not None and source.rev is not None
        tree = _fetch_git(source.git, source.rev, store, f"{loaded.path}: key 'source.rev'")
    if source.subdir:
        package = resolve_inside(tree, source.subdir, tree)
        if package is None or path_kind(package) != "directory":
            where = "outside the source tree" if package is None else "to no directory"
            raise RecipeError(
                f"{loaded.path}: key 'source.subdir': {source.subdir!r} resolves {where} ({tree}).",
                hint="Name the package's directory inside the source, without '..' or a "
                "symlink that leads out of it.",
            )
        tree = tree / source.subdir
    return tree


def _is_file(path: Path) -> bool:
    """A regular file itself, not a link to one."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _is_special(path: Path) -> bool:
    """A fifo, socket or device: never source, and a fifo would block whoever reads it."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))


def copy_tree(pristine: Path, destination: Path, exclude: Sequence[str] = BUILD_OUTPUTS) -> str:
    """A private copy of the source, without build leftovers (:func:`is_ignored`) or
    special files (fifos, sockets, devices); mtimes and symlinks are kept as they are.

    Returns the copy's digest, the one :func:`source_digest` gives for *destination*,
    taken from the bytes the copy wrote: each file is read once, where copying and then
    digesting the copy read every file twice and walked the tree twice (0.2 s of a job
    for awkward-cpp's 1,918 files). It is the digest of what the build gets even when
    the source changes during the copy.

    An earlier copy at *destination* (the same job run again: a hot build, a link job)
    is made into this one in place: each file already there is read beside the source's
    and kept where its bytes are the same (its mode and mtimes set again), written again
    from the source where they differ, and whatever the source does not hold (build
    outputs, files a build added, a link where the source has a directory) is removed.
    Creating awkward-cpp's 1,918 files took 0.5 s of a 0.7-1.6 s copy on this machine,
    and rewriting them in place as long (ext4 flushes a file truncated and written
    again); reading them, 0.1 s. A file is made anew where the old one is no regular
    file or has another link (writing into it would change that other name too), and no
    read or write follows a symlink.
    """
    root = Path(pristine)
    target = os.fspath(destination)
    contents: dict[str, str] = {}  # each regular file copied, by its path in the copy
    links: list[str] = []  # each symlink copied (as a link), by its path in the copy
    directories: set[str] = {target}

    if not _is_kind(target, stat.S_ISDIR):
        _remove(target)

    def ignore(directory: str, names: list[str]) -> set[str]:
        relative = Path(directory).relative_to(root).parts
        left_out = set()
        for name in names:
            if is_ignored((*relative, name), exclude):
                left_out.add(name)
                continue
            try:
                mode = os.lstat(os.path.join(directory, name)).st_mode  # noqa: PTH118
            except OSError:
                continue  # gone: copytree reports it as it always did
            copied = os.path.join(target, *relative, name)  # noqa: PTH118
            if stat.S_ISLNK(mode):
                links.append(copied)
                _remove(copied)  # a symlink is made only where nothing is
            elif stat.S_ISDIR(mode):
                directories.add(copied)
                if not _is_kind(copied, stat.S_ISDIR):
                    _remove(copied)
            elif stat.S_ISREG(mode):
                if not _is_kind(copied, stat.S_ISREG):
                    _remove(copied)
            else:
                left_out.add(name)  # a fifo, socket or device (see _is_special)
        return left_out

    def copy_file(source: str, copied: str) -> str:
        # Read through one descriptor of the regular file `ignore` saw: one swapped
        # meanwhile for a fifo (which would block the job) or a link is refused below.
        with open(holds.open_regular(source), "rb") as reader:
            digest = _digest_if_same(reader, copied)
            if digest is None:
                reader.seek(0)
                digest = hashlib.sha256()
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                try:
                    descriptor = os.open(copied, flags, 0o600)
                except PermissionError:  # an earlier copy of a read-only file: made anew
                    _unlink(copied)
                    descriptor = os.open(copied, flags, 0o600)
                with open(descriptor, "wb") as writer:
                    while block := reader.read(1 << 20):
                        digest.update(block)
                        writer.write(block)
        shutil.copystat(source, copied, follow_symlinks=False)  # as copy2: mode and mtimes
        _owner_may_write(copied)
        contents[copied] = digest.hexdigest()
        return copied

    try:
        shutil.copytree(
            root, destination, ignore=ignore, symlinks=True, copy_function=copy_file,
            dirs_exist_ok=True,
        )  # fmt: skip
    except shutil.Error as error:  # each file it could not copy, and why
        failed = [entry for entry in error.args[0] if isinstance(entry, tuple)]
        shown = "; ".join(f"{entry[0]}: {entry[-1]}" for entry in failed[:3])
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        raise SourceError(
            f"Copying the source {root} for the build failed: {shown or error}{more}.",
            hint="A file of the source changed into something kiln does not read (a fifo, "
            "a link) or became unreadable while it was copied; let the tree settle, or "
            "fix those files, then build again.",
        ) from None
    for directory in directories:  # copytree gave each the source's mode, last
        _owner_may_write(directory)
    kept = {*contents, *links}
    for directory, subdirectories, files in os.walk(target, topdown=False):
        for name in files:
            path = os.path.join(directory, name)  # noqa: PTH118
            if path not in kept:
                _remove(path)
        for name in subdirectories:
            path = os.path.join(directory, name)  # noqa: PTH118
            if path not in directories and path not in kept:
                _remove(path)
    entries = [(path, contents.get(path)) for path in (*contents, *links)]
    tree = target + os.sep
    return _digest(
        destination,
        (
            (path[len(tree) :].replace(os.sep, "/"), Path(path), content)
            for path, content in entries
        ),
    )


def empty_but(directory: Path, kept: Path) -> None:
    """*directory* made and emptied for a new job, all but *kept* (a directory in it: the
    source copy, which :func:`copy_tree` makes again in place); nothing is removed
    through a symlink."""
    if not _is_kind(os.fspath(directory), stat.S_ISDIR):
        _remove(os.fspath(directory))
    directory.mkdir(parents=True, exist_ok=True)
    for entry in directory.iterdir():
        if entry != kept or not _is_kind(os.fspath(entry), stat.S_ISDIR):
            _remove(os.fspath(entry))


def _digest_if_same(reader: IO[bytes], copied: str) -> hashlib._Hash | None:
    """The digest of the source open in *reader* where *copied* (an earlier copy's file)
    holds the same bytes, read side by side; ``None`` where it does not, or is no regular
    file."""
    try:
        if os.lstat(copied).st_size != os.fstat(reader.fileno()).st_size:
            return None
        descriptor = os.open(copied, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    digest = hashlib.sha256()
    with open(descriptor, "rb") as earlier:
        while block := reader.read(1 << 20):
            if earlier.read(len(block)) != block:
                return None
            digest.update(block)
        return digest if not earlier.read(1) else None


def _is_kind(path: str, is_kind: Callable[[int], bool]) -> bool:
    """Whether *path* is, itself (not through a symlink), of a kind a copy can be made
    into: a directory, or a regular file with no other link."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return True  # nothing there: made by the copy
    return is_kind(status.st_mode) and (stat.S_ISDIR(status.st_mode) or status.st_nlink == 1)


OWNER_RWX = stat.S_IRWXU
"""What the copy's owner may do with each of its directories (and, but execute, with each
file): the copy is the build's own tree. A source whose directories or files are read-only
(a Nix store path, a Perforce workspace, an sdist packed with read-only modes) kept those
modes in the copy, and a build run as anyone but root could not write its outputs into
it (setuptools' ``build/``, Cython's ``.c`` beside its ``.pyx``), nor the next job
remove or rewrite it."""


def _owner_may_write(path: str | Path) -> None:
    """Let the owner read and write *path* (and enter it, a directory); no symlink is
    followed, and other bits (group, other, execute on a file) stay the source's."""
    status = os.lstat(path)
    wanted = OWNER_RWX if stat.S_ISDIR(status.st_mode) else stat.S_IRUSR | stat.S_IWUSR
    if stat.S_ISLNK(status.st_mode) or status.st_mode & wanted == wanted:
        return
    Path(path).chmod(stat.S_IMODE(status.st_mode) | wanted)


def _unlink(path: str) -> None:
    """Unlink *path*; where its directory is read-only (an earlier kiln's copy, or one a
    build made so), the owner is let write it first."""
    try:
        Path(path).unlink()
    except PermissionError:
        _owner_may_write(Path(path).parent)
        Path(path).unlink()


def _remove(path: str) -> None:
    """Remove *path*, a directory with what it holds, never what a symlink leads to.
    Read-only directories in it (an earlier kiln's copy of a read-only source, or ones a
    build made: Go's module cache is read-only) are let writable first where removing
    fails, as a user other than root cannot empty them otherwise."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(status.st_mode):
        _unlink(path)
        return
    try:
        shutil.rmtree(path)
    except PermissionError:
        _owner_may_write(Path(path).parent)
        for directory, _subdirectories, _files in os.walk(path):  # symlinks not entered
            _owner_may_write(directory)
        shutil.rmtree(path)


def source_digest(tree: Path, exclude: Sequence[str] = BUILD_OUTPUTS) -> str:
    """A digest over every entry's relative path and content, leftovers excluded as
    :func:`copy_tree` excludes them, so a tree and its copy digest the same.

    The walk follows no symlink to a directory (the copy keeps those as links); a
    symlink is digested as the copy keeps it, by its target's name (:func:`_digest`).
    Special files are left out, as the copy leaves them out.
    """
    entries: list[tuple[str, Path]] = []
    for directory, subdirectories, files in os.walk(tree, followlinks=False):
        relative = Path(directory).relative_to(tree).parts
        subdirectories[:] = [d for d in subdirectories if not is_ignored((*relative, d), exclude)]
        for name in (*files, *(d for d in subdirectories if Path(directory, d).is_symlink())):
            if not is_ignored((*relative, name), exclude) and not _is_special(
                Path(directory, name)
            ):
                entries.append(("/".join((*relative, name)), Path(directory, name)))
    return _digest(tree, ((key, path, None) for key, path in entries))


def _digest(tree: Path, entries: Iterable[tuple[str, Path, str | None]]) -> str:
    """The digest of *tree*'s *entries*: (relative POSIX path, path, the content's sha256
    where the caller read it already, else None).

    A symbolic link is digested as the copy keeps it, by its target's name. Where it
    leads to a regular file outside *tree*, that file's content counts too, as the
    build reads it through the link; inside, the file is an entry of its own. No read
    follows a link to a device or a fifo, and none goes past the size a file's status
    gives: a link to /dev/zero or /proc/self/pagemap (a "regular" file of size 0 that
    never ends) is its name, and at most those 0 bytes.
    """
    digest = hashlib.sha256()
    root = os.path.realpath(tree)
    for key, path, content in sorted(entries, key=lambda entry: entry[0]):
        digest.update(key.encode("utf-8", "surrogateescape") + b"\0")
        if content is not None:  # a regular file
            digest.update(content.encode())
            continue
        if path.is_symlink():
            digest.update(b"symlink:" + os.fsencode(path.readlink()) + b"\0")
            resolved = os.path.realpath(path)
            if _inside(resolved, root) or (content := _regular_sha256(resolved)) is None:
                continue
        elif (content := _regular_sha256(os.fspath(path))) is None:
            continue  # became something else meanwhile
        digest.update(content.encode())
    return digest.hexdigest()


def _regular_sha256(path: str) -> str | None:
    """The sha256 of *path*'s first st_size bytes where it is a regular file, else None.
    Opened without blocking (a fifo put in its place opens at once) and checked on the
    open descriptor, so what is read is what was checked."""
    try:
        descriptor = holds.open_regular(path, follow_links=True)
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        digest = hashlib.sha256()
        left = status.st_size
        while left > 0 and (block := os.read(descriptor, min(left, 1 << 20))):
            digest.update(block)
            left -= len(block)
        return digest.hexdigest()
    finally:
        os.close(descriptor)
