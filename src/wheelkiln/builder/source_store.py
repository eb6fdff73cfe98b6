"""The fetched sources under ``$KILN_HOME/sources``, listed and pruned.

What is there: each pinned sdist's extracted tree (``NAME-VERSION-SHA12``) and each git
checkout (``git-HASH``), whole once their marker is written; the downloaded sdists the
trees were extracted from (``sdists/``); per tree, the fetch's lock file and the mark of
its uses (``.inuse``); and what killed fetches and prunes left (a ``.staging``
extraction, a tree without its marker, a ``.download-`` or ``.pruned-`` directory).

A tree's last use is its mark's time, set by every process that reads the tree, and
that process holds the mark until it ends (:mod:`wheelkiln.holds`). A prune takes the
mark and the fetch's lock exclusively, without waiting, and removes nothing a running
build holds or fetches; it renames a tree aside before deleting it, so a fetch never
finds half a tree with its marker. Lock files and marks stay: a process may be waiting
on one, and a new file of the same name would let a second process in beside it.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from wheelkiln.builder.source import MARKER
from wheelkiln.disk_usage import modified, tree_size
from wheelkiln.holds import Removal, last_used, mark_unmarked, remove_unused
from wheelkiln.paths import sources_dir

Kind = Literal["sdist tree", "git checkout", "sdist", "leftover"]
Outcome = Removal

DOWNLOADS = "sdists"
"""The directory of downloaded sdists, beside the trees."""


@dataclass(frozen=True)
class KeptSource:
    """One entry of the store, as listed."""

    name: str
    path: Path
    kind: Kind
    origin: str
    """The pin it was fetched for (``name==version`` or ``url@rev``); empty where unknown."""
    size: int
    last_used: float
    """Seconds since the epoch: a tree's mark's time (else its marker's), else the file's
    or directory's."""

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name, "path": str(self.path), "kind": self.kind, "origin": self.origin,
            "size_bytes": self.size, "last_used": self.last_used,
        }  # fmt: skip


@dataclass(frozen=True)
class PrunedSource:
    """What became of one entry."""

    entry: KeptSource
    outcome: Outcome

    def as_json(self) -> dict[str, object]:
        return {**self.entry.as_json(), "outcome": self.outcome}


class SourceStore:
    """``$KILN_HOME/sources`` (or *root*)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else sources_dir()

    def kept(self) -> list[KeptSource]:
        """Every entry, oldest use first. Symlinks are no entries and are never followed."""
        entries = [*self._trees(), *self._downloads()]
        return sorted(entries, key=lambda e: (e.last_used, e.name))

    def _trees(self) -> Iterator[KeptSource]:
        for path in _children(self.root):
            if path.name.endswith((".lock", ".inuse")) or path.name == DOWNLOADS:
                continue
            if not _is_directory(path):
                continue
            marker = path / MARKER
            try:
                origin = marker.read_text(encoding="utf-8", errors="replace").strip()
                whole = not path.name.startswith(".") and not marker.is_symlink()
                used = last_used(self.root, path.name, marker)
            except OSError:
                whole = False
            if not whole:
                used, origin = modified(path), ""
            kind: Kind = (
                "leftover" if not whole else "git checkout" if path.name.startswith("git-") else "sdist tree"
            )
            yield KeptSource(path.name, path, kind, origin, tree_size(path), used)

    def _downloads(self) -> Iterator[KeptSource]:
        for path in _children(self.root / DOWNLOADS) if _is_directory(self.root / DOWNLOADS) else []:
            if _is_directory(path):  # a killed download's staging directory
                yield KeptSource(path.name, path, "leftover", "", tree_size(path), modified(path))
            elif stat.S_ISREG(path.lstat().st_mode):
                yield KeptSource(path.name, path, "sdist", "", path.lstat().st_size, modified(path))

    def prune(self, unused_for: float, *, dry_run: bool = False) -> list[PrunedSource]:
        """Remove each entry whose last use is more than *unused_for* seconds ago and that
        no running kiln process holds or is fetching."""
        now = time.time()
        results: list[PrunedSource] = []
        for entry in self.kept():
            if now - entry.last_used <= unused_for:
                results.append(PrunedSource(entry, "recent"))
            elif entry.kind == "sdist":
                results.append(PrunedSource(entry, self._remove_file(entry, dry_run)))
            else:
                results.append(PrunedSource(entry, self._remove_tree(entry, now, unused_for, dry_run)))
        return results

    def _remove_file(self, entry: KeptSource, dry_run: bool) -> Outcome:
        # A fetch that finds it gone meanwhile downloads it again.
        if dry_run:
            return "would remove"
        try:
            entry.path.unlink()
        except FileNotFoundError:
            return "gone"
        return "removed"

    def _remove_tree(self, entry: KeptSource, now: float, unused_for: float, dry_run: bool) -> Outcome:
        """The tree's mark and the fetch's lock are taken exclusively, without waiting
        (a killed prune's or download's directory has neither)."""
        name = entry.name.removesuffix(".staging")
        locks: list[Path] = []
        if not entry.name.startswith("."):
            if entry.kind != "leftover" and not dry_run:
                # A tree fetched before uses were marked: its mark, dated its last use,
                # for a build that starts now to wait on (a dry run writes nothing).
                mark_unmarked(self.root / f"{name}.inuse", entry.last_used)
            locks = [self.root / f"{name}{suffix}" for suffix in (".inuse", ".lock")]

        def used(aside: Path) -> float:
            if entry.kind == "leftover":
                return entry.last_used
            return last_used(self.root, entry.name, aside / MARKER)

        return remove_unused(
            entry.path, locks, used, now=now, unused_for=unused_for, dry_run=dry_run
        )


def _children(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


def _is_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False
