"""Watching processes from tests: whether a pid still runs, waiting for a condition, and
a block that must end in time."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def alive(pid: int) -> bool:
    """True while *pid* runs (a zombie or a dead process is not running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def wait_until(condition: Callable[[], bool], what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        time.sleep(0.05)


class TookTooLong(BaseException):
    """Not an OSError (TimeoutError is one), which the code under test may catch."""


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fails the test, instead of hanging it or filling the disk, when the block (run in
    the main thread) is still running after *seconds*."""

    def late(_signal: int, _frame: object) -> None:
        raise TookTooLong(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
