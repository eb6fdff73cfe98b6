"""Kept environments: which are in use, and removing those no build has used for a while.

Build environments (``$KILN_HOME/envs/<key>``) and smoke-test environments
(``$KILN_HOME/smoke-envs/<key>``) are made once and reused for as long as their key is
asked for. A build environment's key is its lock, so every new release of a build
requirement makes a new one beside the old, which stays: a CUDA torch build environment
is about 5.4 GB. ``kiln envs prune`` removes the ones unused for a given time.

**In use.** A kiln process that uses an environment holds a shared ``flock`` on
``<key>.inuse`` beside it until the process ends (:func:`wheelkiln.holds.hold`), taken
before it looks at the environment, and sets that file's modification time on every use:
the environment's last use. :func:`prune` removes an environment only while it holds that
lock and the environment's make lock (``<key>.lock``) exclusively, and only if the last
use is still old once it holds them. So an environment a running kiln process has used
is never removed under it, and a build that starts meanwhile waits, then makes the
environment again from its kept lock (the request's resolution in ``envs/resolved``
stays; nothing is resolved again).

The directory is renamed out of the way (``.pruned-<key>-<pid>``) before it is deleted,
so no process sees a half-deleted environment at its key. Lock files stay: deleting one
while another process opens it would let two processes lock two different files of one
name.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from wheelkiln import ui
from wheelkiln.holds import busy, last_used, mark_unmarked, open_regular, read_json

KEY = re.compile(r"[0-9a-f]{16}")
"""An environment's directory name: a digest (``lock_key``, ``environment_key``)."""
RECORDS = {"build": "kiln-env.json", "smoke": "kiln-smoke-env.json"}
"""The record each kind of environment writes last, when it is complete."""
Kind = Literal["build", "smoke"]
MAX_RECORD_BYTES = 16 * 1024**2
"""A record is its interpreter, requirements and lock: kilobytes; more is not one."""

@dataclass(frozen=True)
class Stored:
    """One kept environment."""

    kind: Kind
    key: str
    path: Path
    size: int
    """Bytes in its files (symbolic links not followed)."""
    own: int
    """Bytes in its files that have no other link: what removing it frees (the rest is
    linked from uv's package cache or from kept bytecode)."""
    last_used: float
    """Seconds since the epoch: the last use a kiln process marked, else when it was
    made (environments made before uses were marked)."""
    in_use: bool
    requires: tuple[str, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "key": self.key,
            "path": str(self.path),
            "bytes": self.size,
            "own_bytes": self.own,
            "last_used": self.last_used,
            "in_use": self.in_use,
            "requires": list(self.requires),
        }


def _size(path: Path) -> tuple[int, int]:
    """The bytes in *path*'s files (symbolic links not followed), and those of them in
    files with no other link: uv installs a distribution's files as hard links to its
    package cache, and kept bytecode is linked from the store, so removing an
    environment frees only the second figure."""
    total = own = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    stat = entry.stat(follow_symlinks=False)
                    total += stat.st_size
                    own += stat.st_size if stat.st_nlink == 1 else 0
            except OSError:
                continue
    return total, own


def _requires(record: Path) -> tuple[str, ...]:
    """What the environment whose record is *record* was asked to hold; none, with a
    warning, for a record that does not say (the environment is still listed, so a
    prune can remove it)."""
    try:
        data = read_json(record, MAX_RECORD_BYTES)
        requires = data.get("requires", []) if isinstance(data, dict) else None
        if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
            raise ValueError("its requires is not a list of requirements")
    except (OSError, ValueError) as exc:
        ui.warn(f"{record}: not a readable environment record ({exc}); listed without "
                "its requirements.")  # fmt: skip
        return ()
    return tuple(requires)


def _lock(path: Path) -> IO[bytes] | None:
    """*path* opened to be locked (made if missing), or None when it is not a regular
    file: a fifo or a link there is no lock any kiln process took."""
    try:
        return os.fdopen(open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")
    except OSError:
        return None


def stored(root: Path, kind: Kind) -> list[Stored]:
    """The complete environments of *kind* under *root*, by key."""
    found: list[Stored] = []
    if not root.is_dir():
        return found
    for path in sorted(root.iterdir()):
        record = path / RECORDS[kind]
        if not KEY.fullmatch(path.name) or path.is_symlink() or not record.is_file():
            continue
        requires = _requires(record)
        size, own = _size(path)
        found.append(
            Stored(
                kind=kind,
                key=path.name,
                path=path,
                size=size,
                own=own,
                last_used=last_used(root, path.name, record),
                in_use=busy(root, path.name),
                requires=requires,
            )
        )
    return found


Outcome = Literal["removed", "would remove", "recent", "in use", "being made", "gone"]


@dataclass(frozen=True)
class Pruned:
    """What :func:`prune` did with one environment."""

    environment: Stored
    outcome: Outcome

    def as_json(self) -> dict[str, object]:
        return {**self.environment.as_json(), "outcome": self.outcome}


def prune(
    environments: list[Stored], unused_for: float, *, dry_run: bool = False
) -> Iterator[Pruned]:
    """Remove each of *environments* whose last use is more than *unused_for* seconds
    ago and that no process holds; yield what became of each, as it happens."""
    now = time.time()
    for environment in environments:
        root, key = environment.path.parent, environment.key
        if now - environment.last_used <= unused_for:
            yield Pruned(environment, "recent")
            continue
        with ExitStack() as locks:
            inuse = root / f"{key}.inuse"
            mark_unmarked(inuse, environment.last_used)
            use = _lock(inuse)
            if use is None:
                yield Pruned(environment, "in use")  # a mark no process can lock: kept
                continue
            locks.enter_context(use)
            make = _lock(root / f"{key}.lock")
            if make is None:
                yield Pruned(environment, "being made")
                continue
            locks.enter_context(make)
            try:
                fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield Pruned(environment, "in use")
                continue
            try:
                fcntl.flock(make, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield Pruned(environment, "being made")
                continue
            # A process may have used it, and ended, since it was listed.
            record = environment.path / RECORDS[environment.kind]
            if now - last_used(root, key, record) <= unused_for:
                yield Pruned(environment, "recent")
                continue
            if dry_run:
                yield Pruned(environment, "would remove")
                continue
            aside = root / f".pruned-{key}-{os.getpid()}"
            shutil.rmtree(aside, ignore_errors=True)  # left by a prune that was killed
            try:
                environment.path.rename(aside)
            except FileNotFoundError:
                yield Pruned(environment, "gone")  # another prune removed it
                continue
            shutil.rmtree(aside, ignore_errors=True)
            yield Pruned(environment, "removed")


@dataclass(frozen=True)
class Leftover:
    """A directory a killed kiln process left beside the environments, or kept bytecode
    no environment links."""

    path: Path
    size: int
    """The bytes removing it frees."""
    what: str

    def as_json(self) -> dict[str, object]:
        return {"path": str(self.path), "bytes": self.size, "what": self.what}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free(lock: Path) -> IO[bytes] | None:
    """*lock* held exclusively, or None when a process holds it (or it is not a regular
    file, which no process could have taken)."""
    handle = _lock(lock)
    if handle is None:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def leftovers(root: Path, kind: Kind, *, dry_run: bool = False) -> Iterator[Leftover]:
    """Remove (or, with *dry_run*, only name) what killed kiln processes left under
    *root*, each only while holding the lock its maker held: a uv install's staging venv
    (``.staging-<request>``, under ``resolved/<request>.lock``), an environment whose
    make was killed before its record (``<key>`` without one, under ``<key>.lock`` and
    ``<key>.inuse``), and a prune's aside directory whose process has ended. A CUDA torch
    install killed halfway leaves gigabytes where uv copies files instead of linking them
    (its cache on another filesystem), and thousands of directories where it links."""
    if not root.is_dir():
        return
    for path in sorted(root.iterdir()):
        if path.is_symlink() or not path.is_dir():
            continue
        name = path.name
        locks: list[Path]
        if name.startswith(".staging-") and kind == "build":
            locks, what = [root / "resolved" / f"{name.removeprefix('.staging-')}.lock"], "staging"
        elif KEY.fullmatch(name) and not (path / RECORDS[kind]).exists():
            locks, what = [root / f"{name}.inuse", root / f"{name}.lock"], "unfinished"
        elif (found := re.fullmatch(r"\.pruned-[0-9a-f]{16}-(\d+)", name)) and not _alive(
            int(found[1])
        ):
            locks, what = [], "pruned"
        else:
            continue
        with ExitStack() as held:
            handles = [_free(lock) for lock in locks if lock.parent.is_dir()]
            for handle in handles:
                if handle is not None:
                    held.enter_context(handle)  # closed here, even when one is not had
            if any(handle is None for handle in handles):
                continue  # its maker is still at work
            # The record may have been written since the listing: a finished environment.
            if what == "unfinished" and (path / RECORDS[kind]).exists():
                continue
            _, size = _size(path)  # a staging venv's files are linked from uv's cache too
            if not dry_run:
                shutil.rmtree(path, ignore_errors=True)
            yield Leftover(path, size, what)


def _links_in(environments: Iterable[Path]) -> Counter[tuple[int, int]]:
    """How many of each file's links (device, inode) lie under *environments*."""
    links: Counter[tuple[int, int]] = Counter()
    for environment in environments:
        for folder, _, names in os.walk(environment):
            for name in names:
                try:
                    stat = (Path(folder) / name).lstat()
                except OSError:
                    continue
                if stat.st_nlink > 1:
                    links[(stat.st_dev, stat.st_ino)] += 1
    return links


def unused_bytecode(
    store: Path, unused_for: float, *, dry_run: bool = False, leaving: Iterable[Path] = ()
) -> Iterator[Leftover]:
    """Remove (or, with *dry_run*, only name) each distribution's kept bytecode under
    *store* (``wheelkiln.builder.bytecode_store``) that no environment links any more
    (every file's link count is one) and that was not kept within *unused_for* seconds.
    Links from *leaving* (the environments a dry run would remove, still there) do not
    count, so a dry run names what the real run would remove."""
    if not store.is_dir():
        return
    now = time.time()
    gone = _links_in(leaving)
    for kept in sorted(store.iterdir()):
        if kept.is_symlink() or not kept.is_dir():
            continue
        files = [Path(folder) / name for folder, _, names in os.walk(kept) for name in names]
        try:
            stats = [path.lstat() for path in files]
        except OSError:
            continue  # being written
        if any(stat.st_nlink - gone[(stat.st_dev, stat.st_ino)] > 1 for stat in stats):
            continue
        if stats and now - max(stat.st_mtime for stat in stats) <= unused_for:
            continue
        if not dry_run:
            shutil.rmtree(kept, ignore_errors=True)
        yield Leftover(kept, sum(stat.st_size for stat in stats), "bytecode")
