"""The builder lock: one build per builder at a time.

Two builds on one machine contend for cores and memory, and a benchmark taken under
contention measures the contention. Every build that should count (``kiln bench``, and
``kiln build`` where the CLI wires it) holds an exclusive ``flock`` on
``state_home()/builder.lock`` for its whole run.

``flock`` belongs to the open file description, so the kernel drops it when the holder
exits for any reason (crash, ``kill -9``, reboot): a stale holder cannot exist, and no
pid check is needed. The holder writes a small JSON description (pid, command, host,
since) into the lock file so a refused caller can say who holds it; the description
of a process that died is still in the file but is ignored, because nobody holds the
lock. The file is opened without truncation, since truncating on open would wipe the
live holder's description every time someone merely asks.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from wheelkiln.errors import KilnError, LockBusyError
from wheelkiln.paths import state_home

LOCK_NAME = "builder.lock"
HELD_ENV = "KILN_BUILDER_LOCK"
"""Exported by the holder as ``PID:PATH`` so its child processes know (see ``inherited``)."""
POLL_SECONDS = 0.5


def default_lock_path() -> Path:
    return state_home() / LOCK_NAME


def _command_line() -> str:
    argv = list(sys.argv) or ["?"]
    argv[0] = Path(argv[0]).name
    return shlex.join(argv)


def describe(holder: dict[str, Any] | None) -> str:
    """One line a person can act on: who holds the lock, where, since when."""
    if holder is None:
        return "nobody"
    if not holder.get("pid"):
        return "a process that has not written its description yet"
    return (
        f"pid {holder.get('pid')} on {holder.get('host', '?')} "
        f"since {holder.get('since', '?')}: {holder.get('command', '?')}"
    )


class BuilderLock:
    """An exclusive, non-inheritable lock on this builder, with a holder description.

    ``try_acquire`` never waits; ``acquire`` polls until ``timeout`` (``None`` waits
    forever) and raises :class:`LockBusyError` naming the holder. Used as a context
    manager it acquires with the ``timeout`` given here (default: do not wait).
    """

    def __init__(
        self, path: Path | None = None, *, command: str | None = None, timeout: float | None = 0.0
    ) -> None:
        self.path = path or default_lock_path()
        self.command = command or _command_line()
        self.timeout = timeout
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _open(self, flags: int) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, flags | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise KilnError(
                f"Cannot open the builder lock {self.path}: {exc.strerror or exc}.",
                hint="Set KILN_STATE_HOME to a writable directory.",
            ) from None

    def inherited(self) -> bool:
        """Whether an ancestor process holds this lock for us.

        A holder exports ``KILN_BUILDER_LOCK`` (its pid and the lock path); the processes
        it starts (shard and link jobs of a sharded build, ``kiln build`` under the
        bench) must not try to take the lock again: they would wait for their own
        parent. This is true only while that pid is the live holder of this lock.
        """
        pid, _, path = os.environ.get(HELD_ENV, "").partition(":")
        if not pid.isdigit() or Path(path) != self.path:
            return False
        holder = self.holder()
        return holder is not None and holder.get("pid") == int(pid)

    def try_acquire(self) -> bool:
        """Take the lock if it is free; ``True`` when this object now holds it."""
        if self._fd is not None:
            return True
        fd = self._open(os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        description = {
            "pid": os.getpid(),
            "command": self.command,
            "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(description, sort_keys=True) + "\n").encode(), 0)
        self._fd = fd
        os.environ[HELD_ENV] = f"{os.getpid()}:{self.path}"
        return True

    def acquire(
        self,
        timeout: float | None = None,
        on_wait: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> None:
        """Wait for the lock. ``on_wait(holder)`` is called once, when waiting starts."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waited = False
        while not self.try_acquire():
            if not waited:
                waited = True
                if on_wait is not None:
                    on_wait(self.holder())
            if deadline is not None and time.monotonic() >= deadline:
                holder = self.holder()
                waited_for = f" after waiting {timeout:g} s" if timeout else ""
                raise LockBusyError(
                    f"Another build holds the builder lock {self.path}{waited_for}: "
                    f"{describe(holder)}.",
                    hint="Wait for it to finish (one build per builder keeps timings honest), "
                    "or stop it if it is stuck.",
                )
            remaining = POLL_SECONDS if deadline is None else deadline - time.monotonic()
            time.sleep(max(0.01, min(POLL_SECONDS, remaining)))

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if os.environ.get(HELD_ENV) == f"{os.getpid()}:{self.path}":
            del os.environ[HELD_ENV]
        try:
            os.ftruncate(fd, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def holder(self) -> dict[str, Any] | None:
        """The live holder's description, or ``None`` when nobody holds the lock.

        While this object holds the lock it is its own holder. A holder that has just
        taken the lock and not yet written its description reads as ``{}``.
        """
        if not self.path.exists():
            return None
        if self._fd is not None:
            return self._read(self._fd)
        fd = self._open(os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                return self._read(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @staticmethod
    def _read(fd: int) -> dict[str, Any]:
        raw = os.pread(fd, 4096, 0)
        try:
            data = json.loads(raw.decode())
        except (UnicodeDecodeError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def __enter__(self) -> BuilderLock:
        self.acquire(self.timeout)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
