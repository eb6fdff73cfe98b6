"""What kiln keeps of a builder's own answers under ``$KILN_HOME``, listed and pruned.

Each build keeps what its tools said about this machine, so that the next build with the
same key need not ask again: CMake's compiler identification with its interpreter's
answers and the project's check results (``cmake-id``, about 1 MB each), meson's
compiler questions (``compiler-answers``), meson's sanity checks (``meson-sanity``),
``meson --version`` (``meson-version``) and ``dpkg-architecture`` (``dpkg-architecture``).
Their keys hold the compilers, the environment and, for CMake, the project's top files
and the source's digest: every new release of a package, compiler or build environment
adds entries, and nothing else removes one.

A build marks each entry it reads and holds it until it ends (:mod:`wheelkiln.holds`); a
prune removes no entry a running build holds, renames an entry aside before deleting it,
and follows no symlink. A build that finds its entry gone asks its tools again, as on a
new builder. The marks (``<key>.inuse``) stay, as the environments' and sources' do.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from wheelkiln.disk_usage import tree_size
from wheelkiln.holds import Removal, last_used, mark_unmarked, remove_unused
from wheelkiln.paths import kiln_home

Kind = Literal[
    "CMake identification",
    "compiler answers",
    "meson sanity checks",
    "meson version",
    "dpkg-architecture",
    "leftover",
]

STORES: dict[str, Kind] = {
    "cmake-id": "CMake identification",
    "compiler-answers": "compiler answers",
    "meson-sanity": "meson sanity checks",
    "meson-version": "meson version",
    "dpkg-architecture": "dpkg-architecture",
}
"""Each store's directory under ``$KILN_HOME``, and what its entries are."""


@dataclass(frozen=True)
class KeptAnswer:
    """One entry of a store, as listed."""

    store: str
    name: str
    path: Path
    kind: Kind
    size: int
    last_used: float
    """Seconds since the epoch: its mark's time, else the entry's own (kept before uses
    were marked, or a leftover)."""

    def as_json(self) -> dict[str, object]:
        return {
            "store": self.store, "name": self.name, "path": str(self.path), "kind": self.kind,
            "size_bytes": self.size, "last_used": self.last_used,
        }  # fmt: skip


@dataclass(frozen=True)
class PrunedAnswer:
    """What became of one entry."""

    entry: KeptAnswer
    outcome: Removal

    def as_json(self) -> dict[str, object]:
        return {**self.entry.as_json(), "outcome": self.outcome}


class AnswerStore:
    """The stores under ``$KILN_HOME`` (or *home*)."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home if home is not None else kiln_home()

    def kept(self) -> list[KeptAnswer]:
        """Every entry of every store, oldest use first. Symlinks are no entries and are
        never followed."""
        entries = [entry for store in STORES for entry in self._entries(store)]
        return sorted(entries, key=lambda e: (e.last_used, e.store, e.name))

    def _entries(self, store: str) -> Iterator[KeptAnswer]:
        root = self.home / store
        try:
            children = sorted(root.iterdir())
        except OSError:
            return
        for path in children:
            try:
                info = path.lstat()
            except OSError:
                continue  # removed while listed
            tree = stat.S_ISDIR(info.st_mode)
            if path.name.endswith(".inuse") or not (tree or stat.S_ISREG(info.st_mode)):
                continue
            size = tree_size(path) if tree else info.st_size
            # What killed writes and prunes left: ``.<key>.<pid>``, ``.pruned-*``.
            if path.name.startswith("."):
                yield KeptAnswer(store, path.name, path, "leftover", size, info.st_mtime)
            else:
                used = last_used(root, path.name, path)
                yield KeptAnswer(store, path.name, path, STORES[store], size, used)

    def prune(self, unused_for: float, *, dry_run: bool = False) -> list[PrunedAnswer]:
        """Remove each entry whose last use is more than *unused_for* seconds ago and that
        no running kiln process holds."""
        now = time.time()
        results: list[PrunedAnswer] = []
        for entry in self.kept():
            if now - entry.last_used <= unused_for:
                results.append(PrunedAnswer(entry, "recent"))
                continue
            root = entry.path.parent
            locks: list[Path] = []
            if entry.kind != "leftover":
                if not dry_run:
                    # Kept before uses were marked: its mark, dated its last use, for a
                    # build that starts now to wait on (a dry run writes nothing).
                    mark_unmarked(root / f"{entry.name}.inuse", entry.last_used)
                locks = [root / f"{entry.name}.inuse"]

            def used(aside: Path, entry: KeptAnswer = entry) -> float:
                if entry.kind == "leftover":
                    return entry.last_used
                return last_used(entry.path.parent, entry.name, aside)

            outcome = remove_unused(
                entry.path, locks, used, now=now, unused_for=unused_for, dry_run=dry_run
            )
            results.append(PrunedAnswer(entry, outcome))
        return results
