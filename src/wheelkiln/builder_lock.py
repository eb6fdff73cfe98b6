"""The builder lock: one build per builder at a time.

Two builds in one ``KILN_HOME`` share its work trees, sources and environments, and one
deletes what the other is compiling. Two builds on one machine contend for cores and
memory, and a benchmark taken under contention measures the contention. Every build
that should count (``kiln bench``, and ``kiln build``, ``shard`` and ``link`` where the
CLI wires it) holds an exclusive ``flock`` on ``kiln_home()/builder.lock`` and on
``state_home()/builder.lock`` for its whole run, both or neither. Each guards what lives
beside it: the lock used to be in the state home only, and two builds with one
``KILN_HOME`` and two state homes ran at once, one crashing on the other's tree.

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

import contextlib
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
from wheelkiln.paths import kiln_home, state_home

LOCK_NAME = "builder.lock"
HELD_ENV = "KILN_BUILDER_LOCK"
"""Exported by the holder as ``PID:PATH`` so its child processes know (see ``inherited``)."""
POLL_SECONDS = 0.5


def default_lock_paths() -> list[Path]:
    """``KILN_HOME``'s lock, for the trees, sources and environments it guards, then the
    state home's, for the results it keeps honest (two builds measure each other)."""
    paths = [kiln_home() / LOCK_NAME, state_home() / LOCK_NAME]
    return paths[:1] if paths[0] == paths[1] else paths


def default_lock_path() -> Path:
    return default_lock_paths()[0]


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

    By default it is two lock files, taken together or not at all (``default_lock_paths``):
    the one in ``KILN_HOME`` and the one in the state home. Given a ``path``, it is that
    one file.

    ``try_acquire`` never waits; ``acquire`` polls until ``timeout`` (``None`` waits
    forever) and raises :class:`LockBusyError` naming the holder. Used as a context
    manager it acquires with the ``timeout`` given here (default: do not wait).
    """

    def __init__(
        self, path: Path | None = None, *, command: str | None = None, timeout: float | None = 0.0
    ) -> None:
        self.paths = [path] if path is not None else default_lock_paths()
        # The first lock file, or after a refusal the one another build holds.
        self.path = self.paths[0]
        self.command = command or _command_line()
        self.timeout = timeout
        self._fds: list[int] = []
        self._description: dict[str, Any] = {}
        self._unwatch: Callable[[], None] | None = None
        # The description is rewritten from whichever thread starts a command.
        self._writing = threading.Lock()

    @property
    def held(self) -> bool:
        return bool(self._fds)

    @staticmethod
    def _open(path: Path, flags: int) -> int:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, flags | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            home = "KILN_STATE_HOME" if path == state_home() / LOCK_NAME else "KILN_HOME"
            raise KilnError(
                f"Cannot open the builder lock {path}: {exc.strerror or exc}.",
                hint=f"Set {home} to a writable directory.",
            ) from None

    def inherited(self) -> bool:
        """Whether an ancestor process holds this lock for us.

        A holder exports ``KILN_BUILDER_LOCK`` (its pid and the lock path); the processes
        it starts (shard and link jobs of a sharded build, ``kiln build`` under the
        bench) must not try to take the lock again: they would wait for their own
        parent. This is true only while that pid is the live holder of this lock.
        """
        pid, _, path = os.environ.get(HELD_ENV, "").partition(":")
        if not pid.isdigit() or Path(path) != self.paths[0]:
            return False
        holder = self._holder_of(self.paths[0])
        return holder is not None and holder.get("pid") == int(pid)

    def try_acquire(self) -> bool:
        """Take the lock if it is free; ``True`` when this object now holds it."""
        if self._fds:
            return True
        taken: list[int] = []
        try:
            for path in self.paths:
                fd = self._open(path, os.O_RDWR | os.O_CREAT)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    os.close(fd)
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        self.path = path
                        self._let_go(taken)
                        return False
                    raise
                taken.append(fd)
            self._end_orphans([self._read(fd) for fd in taken])
        except BaseException:
            self._let_go(taken)
            raise
        self.path = self.paths[0]
        self._description = {
            "pid": os.getpid(),
            "command": self.command,
            "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        self._fds = taken
        self._write(())
        self._unwatch = run.watch_groups(self._write)
        os.environ[HELD_ENV] = f"{os.getpid()}:{self.paths[0]}"
        return True

    @staticmethod
    def _let_go(fds: list[int]) -> None:
        for fd in fds:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        fds.clear()

    def _write(self, groups: tuple[run.ProcessGroup, ...]) -> None:
        """Rewrite the description with the process groups of the commands running now."""
        with self._writing:
            description = {**self._description, "process_groups": [g.as_json() for g in groups]}
            data = (json.dumps(description, sort_keys=True) + "\n").encode()
            for fd in self._fds:
                # The record only helps the next holder clean up: a full disk must not
                # stop the build that is running.
                with contextlib.suppress(OSError):
                    os.pwrite(fd, data, 0)
                    os.ftruncate(fd, len(data))

    def _end_orphans(self, previous: list[dict[str, Any]]) -> None:
        """End what the last holders, now dead, left running; refuse if it cannot be ended."""
        groups: dict[run.ProcessGroup, dict[str, Any]] = {}
        for description in previous:
            recorded = description.get("process_groups")
            if description.get("host") != socket.gethostname() or not isinstance(recorded, list):
                continue
            for item in recorded:
                if (group := run.ProcessGroup.from_json(item)) is not None:
                    groups.setdefault(group, description)
        ended = run.end_groups(list(groups))
        if not ended:
            return
        holders = "; ".join(
            dict.fromkeys(describe(groups[g]) for g in groups if g.pgid in ended)
        )
        survivors = sorted(pid for group in groups for pid in run.members(group))
        count = sum(len(pids) for pids in ended.values())
        if survivors:
            raise LockBusyError(
                f"An earlier build that holds no lock any more ({holders}) left "
                f"{count} process(es) running, and pid {', '.join(map(str, survivors))} "
                "could not be ended. A build does not start beside them.",
                hint=f"End them (kill -KILL {' '.join(map(str, survivors))}), then run again.",
            )
        ui.warn(
            f"Ended {count} process(es) that an earlier build left running when it was killed "
            f"({holders}); a build does not start beside them."
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
        if not self._fds:
            return
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        with self._writing:
            fds, self._fds = self._fds, []
        if os.environ.get(HELD_ENV) == f"{os.getpid()}:{self.paths[0]}":
            del os.environ[HELD_ENV]
        for fd in fds:
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
        if self._fds:
            return self._read(self._fds[0])
        for path in ([self.path] + [p for p in self.paths if p != self.path]):
            if (holder := self._holder_of(path)) is not None:
                return holder
        return None

    def _holder_of(self, path: Path) -> dict[str, Any] | None:
        if self._fds:
            return self._read(self._fds[self.paths.index(path)])
        if not path.exists():
            return None
        fd = self._open(path, os.O_RDONLY)
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
