"""Uses and holds of what kiln keeps under ``$KILN_HOME`` and prunes by age (build and
smoke-test environments, fetched sources).

A kiln process that uses a kept thing *key* under *root* holds a shared ``flock`` on
``<key>.inuse`` beside it until the process ends (:func:`hold`), taken before it looks at
the thing, and sets that file's modification time on every use: its last use. A prune
takes the same lock exclusively, without waiting, and removes nothing a process holds;
a process that starts to use the thing meanwhile waits, then finds it gone and makes
or fetches it again. The ``.inuse`` files stay: deleting one while another process opens
it would let two processes lock two different files of one name.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import IO

_held: dict[Path, IO[str]] = {}
_held_guard = threading.Lock()


def hold(root: Path, key: str) -> None:
    """Mark *key* under *root* used now, and in use until this process ends. Blocks
    while a prune removes it."""
    path = root / f"{key}.inuse"
    with _held_guard:
        handle = _held.get(path)
        if handle is not None and not _same_file(handle, path):
            handle.close()  # the directory was emptied (the bench's frozen scenario)
            handle = None
        try:
            if handle is None:
                root.mkdir(parents=True, exist_ok=True)
                handle = path.open("a")
                fcntl.flock(handle, fcntl.LOCK_SH)
                _held[path] = handle
            os.utime(handle.fileno())
        except OSError:
            # A directory this process cannot write (kept things shared read-only):
            # nothing here can remove them either.
            return


def _same_file(handle: IO[str], path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(handle.fileno()), path.stat())
    except OSError:
        return False


def last_used(root: Path, key: str, fallback: Path) -> float:
    """When *key* was last used: its mark's time, else *fallback*'s (a thing made before
    uses were marked: its record), else 0."""
    for marked in (root / f"{key}.inuse", fallback):
        try:
            return marked.stat().st_mtime
        except OSError:
            continue
    return 0.0


def busy(root: Path, key: str) -> bool:
    """True when a process holds *key* (this one included). Creates nothing: a holder
    makes the file."""
    try:
        probe = (root / f"{key}.inuse").open()
    except FileNotFoundError:
        return False
    with probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def mark_unmarked(inuse: Path, last_used: float) -> None:
    """Give a thing made before uses were marked its mark, dated *last_used*: made aside
    and linked in whole, so a holder that marks it meanwhile keeps its mark."""
    if inuse.exists():
        return
    staged = inuse.with_name(f".{inuse.name}.{os.getpid()}")
    staged.touch()
    os.utime(staged, (last_used, last_used))
    try:
        os.link(staged, inuse)
    except FileExistsError:
        pass  # a holder made it first
    finally:
        staged.unlink()
