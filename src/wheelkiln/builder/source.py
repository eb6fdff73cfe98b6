"""Fetching a recipe's source: a local tree, a pinned PyPI sdist, or a git revision."""

from __future__ import annotations

import fcntl
import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from wheelkiln import holds, run
from wheelkiln.digest import sha256_file
from wheelkiln.errors import RecipeError, SourceError
from wheelkiln.globs import glob_matches, glob_segments
from wheelkiln.recipe.load import LoadedRecipe, path_kind, resolve_inside
from wheelkiln.recipe.model import BUILD_OUTPUTS, PYPI_SPEC

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


def _extract(archive: Path, into: Path) -> Path:
    staging = into.with_name(into.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zipped:
            for member in zipped.namelist():
                if member.startswith("/") or ".." in Path(member).parts:
                    raise SourceError(
                        f"{archive}: unsafe member {member!r}.", hint="Do not use it."
                    )
            zipped.extractall(staging)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
    tops = list(staging.iterdir())
    top = tops[0] if len(tops) == 1 and tops[0].is_dir() else staging
    shutil.rmtree(into, ignore_errors=True)
    top.rename(into)
    shutil.rmtree(staging, ignore_errors=True)
    return into


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


def _fetch_pypi(spec: str, sha256: str, store: Path) -> Path:
    """The extracted sdist of *spec*, downloaded once and verified against *sha256*.

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
        existing = [p for p in downloads.iterdir() if p.is_file() and sha256_file(p) == sha256]
        sdist = existing[0] if existing else None
        try:
            if sdist is not None:
                _extract(sdist, tree)
                os.utime(sdist)  # its last use, for `kiln sources prune`
        except FileNotFoundError:
            sdist = None  # a prune took it meanwhile
        if sdist is None:
            _extract(_download_sdist(spec, sha256, downloads), tree)
        (tree / MARKER).write_text(spec + "\n")
    return tree


def _fetch_git(url: str, rev: str, store: Path) -> Path:
    """The checkout of *url* at *rev*, cloned once; locked like ``_fetch_pypi``, since the
    parallel shard jobs of one build would otherwise clone into (and delete) one tree."""
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
        run.run(["git", "clone", "--quiet", url, str(tree)], what=f"Cloning {url}")
        run.run(["git", "-C", str(tree), "checkout", "--quiet", rev], what=f"Checking out {rev}")
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
        tree = _fetch_pypi(source.pypi, source.sha256, store)
    else:
        assert source.git is not None and source.rev is not None
        tree = _fetch_git(source.git, source.rev, store)
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
        digest = _digest_if_same(source, copied)
        if digest is None:
            digest = hashlib.sha256()
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            try:
                descriptor = os.open(copied, flags, 0o600)
            except PermissionError:  # an earlier copy of a read-only file: made anew
                _unlink(copied)
                descriptor = os.open(copied, flags, 0o600)
            with open(source, "rb") as reader, open(descriptor, "wb") as writer:
                while block := reader.read(1 << 20):
                    digest.update(block)
                    writer.write(block)
        shutil.copystat(source, copied)  # as shutil.copy2: mode and mtimes
        _owner_may_write(copied)
        contents[copied] = digest.hexdigest()
        return copied

    shutil.copytree(
        root, destination, ignore=ignore, symlinks=True, copy_function=copy_file,
        dirs_exist_ok=True,
    )  # fmt: skip
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
        (path[len(tree) :].replace(os.sep, "/"), Path(path), content)
        for path, content in entries
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


def _digest_if_same(source: str, copied: str) -> hashlib._Hash | None:
    """The digest of *source* where *copied* (an earlier copy's file) holds the same
    bytes, read side by side; ``None`` where it does not, or is no regular file."""
    try:
        if os.lstat(copied).st_size != Path(source).stat().st_size:
            return None
        descriptor = os.open(copied, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    digest = hashlib.sha256()
    with open(source, "rb") as reader, open(descriptor, "rb") as earlier:
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
    symlink is digested as its target's name, plus the content when it leads to a
    regular file. Special files are left out, as the copy leaves them out.
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
    return _digest((key, path, None) for key, path in entries)


def _digest(entries: Iterable[tuple[str, Path, str | None]]) -> str:
    """The digest of a tree's *entries*: (relative POSIX path, path, the content's sha256
    where the caller read it already, else None)."""
    digest = hashlib.sha256()
    for key, path, content in sorted(entries, key=lambda entry: entry[0]):
        digest.update(key.encode("utf-8", "surrogateescape") + b"\0")
        if content is not None:  # a regular file
            digest.update(content.encode())
            continue
        if path.is_symlink():
            digest.update(b"symlink:" + os.fsencode(path.readlink()) + b"\0")
        if path.is_file():  # a regular file, or a symlink to one
            digest.update(sha256_file(path).encode())
    return digest.hexdigest()
