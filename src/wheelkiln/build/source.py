"""Fetching a recipe's source: a local tree, a pinned PyPI sdist, or a git revision."""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from wheelkiln import run
from wheelkiln.errors import SourceError
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.recipe.model import PYPI_SPEC

IGNORED = ("build", "dist", "*.egg-info", ".git", "__pycache__", "_skbuild", ".eggs")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    ``.kiln-source`` marker is written.
    """
    match = PYPI_SPEC.match(spec)
    assert match is not None
    name, version = match["name"], match["version"]
    tree = store / f"{name}-{version}-{sha256[:12]}"
    if (tree / ".kiln-source").exists():
        return tree
    downloads = store / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    with (store / f"{tree.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (tree / ".kiln-source").exists():
            return tree  # another job fetched it while this one waited
        existing = [p for p in downloads.iterdir() if p.is_file() and sha256_file(p) == sha256]
        sdist = existing[0] if existing else _download_sdist(spec, sha256, downloads)
        _extract(sdist, tree)
        (tree / ".kiln-source").write_text(spec + "\n")
    return tree


def _fetch_git(url: str, rev: str, store: Path) -> Path:
    tree = store / f"git-{hashlib.sha256(f'{url}@{rev}'.encode()).hexdigest()[:16]}"
    if (tree / ".kiln-source").exists():
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    run.run(["git", "clone", "--quiet", url, str(tree)], what=f"Cloning {url}")
    run.run(["git", "-C", str(tree), "checkout", "--quiet", rev], what=f"Checking out {rev}")
    (tree / ".kiln-source").write_text(f"{url}@{rev}\n")
    return tree


def fetch_source(loaded: LoadedRecipe, store: Path) -> Path:
    """The pristine source tree of a recipe (fetched and cached where remote)."""
    source = loaded.recipe.source
    if source.path is not None:
        tree = loaded.resolve(source.path)
        if not tree.is_dir():
            raise SourceError(
                f"{loaded.path}: source.path {tree} is not a directory.",
                hint="Point source.path at the package, relative to the recipe file.",
            )
    elif source.pypi is not None:
        assert source.sha256 is not None
        tree = _fetch_pypi(source.pypi, source.sha256, store)
    else:
        assert source.git is not None and source.rev is not None
        tree = _fetch_git(source.git, source.rev, store)
    if source.subdir:
        tree = tree / source.subdir
    return tree


def copy_tree(pristine: Path, destination: Path) -> None:
    """A private copy of the source, without build leftovers; mtimes are kept."""
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(pristine, destination, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)


def source_digest(tree: Path) -> str:
    """A digest over every file's relative path and content."""
    digest = hashlib.sha256()
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        rel = path.relative_to(tree)
        if any(fnmatch.fnmatch(part, pattern) for part in rel.parts for pattern in IGNORED):
            continue
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()
