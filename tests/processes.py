"""Watching processes from tests: whether a pid still runs, and waiting for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
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
