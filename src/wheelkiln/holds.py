"""Uses and holds of what kiln keeps under ``$KILN_HOME`` and prunes by age (build and
smoke-test environments, fetched sources).

A kiln process that uses a kept thing *key* under *root* holds a shared ``flock`` on
``<key>.inuse`` beside it until the process ends (:func:`hold`), taken before it looks at
the thing, and sets that file's modification time on every use: its last use. A prune
takes the same lock exclusively, without waiting, and removes nothing a process holds;
a process that starts to use the thing meanwhile waits, then finds it gone and makes
or fetches it again. The ``.inuse`` files stay: deleting one while another process opens
it would let two processes lock two different files of one name.

Every file kiln opens under these roots, marks and locks included, is opened with
:func:`open_regular`: a fifo, a device or a symbolic link where a file belongs would
otherwise block the open, or be read without end (a link to ``/dev/zero``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

Removal = Literal["removed", "would remove", "recent", "in use", "gone"]
"""What a prune did with one kept thing older than its age."""

_held: dict[Path, int] = {}
"""The open descriptor of each mark this process holds: a plain descriptor, which the
interpreter's exit closes without a warning, where a file object left open warns."""
_held_guard = threading.Lock()


def open_regular(
    path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o666, *, follow_links: bool = False
) -> int:
    """A descriptor of the regular file at *path*, opened with *flags* (``O_CREAT``
    among them makes it). The open follows no symbolic link (unless *follow_links*: a
    link to a regular file is then that file) and never waits (a fifo with no writer);
    anything but a regular file is refused with an OSError, as a missing one is
    (FileNotFoundError)."""
    no_follow = 0 if follow_links else os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | no_follow | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link, not a regular file", str(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_json(path: Path, max_bytes: int) -> Any:
    """The JSON document in the regular file at *path*. A file larger than *max_bytes*,
    one that is not JSON, nests too deep for the parser, or holds a non-finite number
    is a ValueError; one that cannot be read an OSError."""
    with os.fdopen(open_regular(path), "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not a number JSON allows")

    try:
        return json.loads(data, parse_constant=refuse)
    except RecursionError:
        raise ValueError("nested too deep") from None


def hold(root: Path, key: str) -> None:
    """Mark *key* under *root* used now, and in use until this process ends. Blocks
    while a prune removes it."""
    path = root / f"{key}.inuse"
    with _held_guard:
        fd = _held.get(path)
        if fd is not None and not _same_file(fd, path):
            os.close(fd)  # the directory was emptied (the bench's frozen scenario)
            del _held[path]
            fd = None
        try:
            if fd is None:
                root.mkdir(parents=True, exist_ok=True)
                fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH)
                except OSError:
                    os.close(fd)
                    raise
                _held[path] = fd
            os.utime(fd)
        except OSError:
            # A directory this process cannot write (kept things shared read-only):
            # nothing here can remove them either. A mark that is not a regular file
            # (a fifo, a link) cannot be locked by a prune either: it keeps the thing.
            return


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), path.stat())
    except OSError:
        return False


def last_used(root: Path, key: str, fallback: Path) -> float:
    """When *key* was last used: its mark's time, else *fallback*'s (a thing made before
    uses were marked: its record), else 0."""
    for marked in (root / f"{key}.inuse", fallback):
        try:
            return marked.lstat().st_mtime  # a link's own time: its target is no mark
        except OSError:
            continue
    return 0.0


def busy(root: Path, key: str) -> bool:
    """True when a process holds *key* (this one included), or its mark is something
    no process can lock (not a regular file: a prune keeps it too). Creates nothing: a
    holder makes the file."""
    try:
        probe = os.fdopen(open_regular(root / f"{key}.inuse"), "rb")
    except FileNotFoundError:
        return False
    except OSError:
        return True
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
    staged.unlink(missing_ok=True)  # left by a killed process of this pid
    staged.touch(exist_ok=False)  # made here, never a link or fifo found in its place
    os.utime(staged, (last_used, last_used))
    try:
        os.link(staged, inuse)
    except FileExistsError:
        pass  # a holder made it first
    finally:
        staged.unlink()


def remove_unused(
    path: Path,
    locks: Sequence[Path],
    used: Callable[[Path], float],
    *,
    now: float,
    unused_for: float,
    dry_run: bool,
) -> Removal:
    """Remove the kept thing at *path* (a directory or a file), which was last used more
    than *unused_for* seconds before *now*, unless a process holds one of *locks* (its
    mark, its maker's lock; those that do not exist are passed over). It is renamed
    aside (``.pruned-*``) before it is deleted, so no process finds half of it, and its
    last use is read again there (*used* of the aside path): a process that used it
    since it was listed, before the locks were taken, gets it back."""
    with _exclusive(locks) as free:
        if not free:
            return "in use"
        if dry_run:
            return "would remove"
        aside = path.with_name(f".pruned-{path.name.lstrip('.')}-{os.getpid()}")
        try:
            path.rename(aside)
        except OSError:
            return "gone"
        if now - used(aside) <= unused_for:
            with contextlib.suppress(OSError):  # made again meanwhile: this copy goes
                aside.rename(path)
                return "recent"
        remove_path(aside)
        return "removed"


def remove_path(path: Path) -> None:
    """Delete a directory tree or a file; a symlink is removed itself, never followed."""
    try:
        is_tree = stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return
    if is_tree:
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextmanager
def _exclusive(locks: Sequence[Path]) -> Iterator[bool]:
    """Each of *locks* that exists, taken exclusively without waiting: True when all
    were had. One that is not a regular file (a fifo, a link) cannot be taken, so a
    process using the thing could not have marked it: not free."""
    with contextlib.ExitStack() as stack:
        for path in locks:
            try:
                fd = open_regular(path, os.O_WRONLY | os.O_APPEND)
            except FileNotFoundError:
                continue
            except OSError:
                yield False
                return
            lock = stack.enter_context(os.fdopen(fd, "ab"))
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
        yield True
