"""The builder lock: one build per builder at a time.

Two builds on one machine contend for cores and memory, and a benchmark taken under
contention measures the contention. Two builds in one ``KILN_HOME`` also share its work
trees, sources and environments, and one deletes what the other is compiling. Every
build that should count (``kiln bench``, and ``kiln build``, ``shard`` and ``link``
where the CLI wires it) holds an exclusive ``flock`` on ``kiln_home()/builder.lock``
for its whole run. The lock lives with what it guards: under the state home, two builds
with one ``KILN_HOME`` and two state homes ran at once.

``flock`` belongs to the open file description, so the kernel drops it when the holder
exits for any reason (crash, ``kill -9``, reboot): a stale holder cannot exist, and no
pid check is needed. The holder writes a small JSON description (pid, command, host,
since) into the lock file so a refused caller can say who holds it; the description
of a process that died is still in the file but is ignored, because nobody holds the
lock. The file is opened without truncation, since truncating on open would wipe the
live holder's description every time someone merely asks.

What the kernel does not drop is the holder's build: after a ``kill -9`` its compilers
go on. So the description also lists the process groups of the commands the holder is
running (kept current through ``run.watch_groups``), and whoever takes the lock next
ends what is left of them before it starts anything: a build never runs beside an
orphan of the last one.
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
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from wheelkiln import run, ui
from wheelkiln.errors import KilnError, LockBusyError
from wheelkiln.paths import kiln_home

LOCK_NAME = "builder.lock"
HELD_ENV = "KILN_BUILDER_LOCK"
"""Exported by the holder as ``PID:PATH`` so its child processes know (see ``inherited``)."""
POLL_SECONDS = 0.5


def default_lock_path() -> Path:
    return kiln_home() / LOCK_NAME


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
        self._description: dict[str, Any] = {}
        self._unwatch: Callable[[], None] | None = None
        # The description is rewritten from whichever thread starts a command.
        self._writing = threading.Lock()

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
                hint="Set KILN_HOME to a writable directory.",
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
        try:
            self._end_orphans(self._read(fd))
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        self._description = {
            "pid": os.getpid(),
            "command": self.command,
            "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        self._fd = fd
        self._write(())
        self._unwatch = run.watch_groups(self._write)
        os.environ[HELD_ENV] = f"{os.getpid()}:{self.path}"
        return True

    def _write(self, groups: tuple[run.ProcessGroup, ...]) -> None:
        """Rewrite the description with the process groups of the commands running now."""
        with self._writing:
            if self._fd is None:
                return
            description = {**self._description, "process_groups": [g.as_json() for g in groups]}
            data = (json.dumps(description, sort_keys=True) + "\n").encode()
            os.pwrite(self._fd, data, 0)
            os.ftruncate(self._fd, len(data))

    def _end_orphans(self, previous: dict[str, Any]) -> None:
        """End what the last holder, now dead, left running; refuse if it cannot be ended."""
        recorded = previous.get("process_groups")
        if previous.get("host") != socket.gethostname() or not isinstance(recorded, list):
            return
        groups = [g for item in recorded if (g := run.ProcessGroup.from_json(item)) is not None]
        ended = run.end_groups(groups)
        if not ended:
            return
        survivors = sorted(pid for group in groups for pid in run.members(group))
        count = sum(len(pids) for pids in ended.values())
        if survivors:
            raise LockBusyError(
                f"An earlier build that holds no lock any more ({describe(previous)}) left "
                f"{count} process(es) running, and pid {', '.join(map(str, survivors))} "
                "could not be ended. A build does not start beside them.",
                hint=f"End them (kill -KILL {' '.join(map(str, survivors))}), then run again.",
            )
        ui.warn(
            f"Ended {count} process(es) that an earlier build left running when it was killed "
            f"({describe(previous)}); a build does not start beside them."
        )

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
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        with self._writing:
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
        raw = os.pread(fd, 1 << 16, 0)
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
