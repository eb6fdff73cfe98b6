"""Visible, timed steps: a spinner with the build's latest line on a terminal, plain
timed lines in CI logs. Everything goes to stderr so ``--json`` output stays clean."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

console = Console(stderr=True, highlight=False)
_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]|^(building|compiling|copying|running|creating)\b", re.I)


class Step:
    """One running step; ``line`` feeds it the build's output for the spinner."""

    def __init__(self, title: str, status: object | None) -> None:
        self.title = title
        self._status = status
        self._last = 0.0

    def line(self, text: str) -> None:
        if self._status is None or not _PROGRESS.search(text.strip()):
            return
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        shown = text.strip()
        if len(shown) > 100:
            shown = shown[:97] + "..."
        self._status.update(f"{self.title}: [dim]{shown}[/dim]")  # type: ignore[attr-defined]


@contextmanager
def step(title: str, *, quiet: bool = False) -> Iterator[Step]:
    started = time.perf_counter()
    if quiet:
        yield Step(title, None)
        return
    if console.is_terminal:
        with console.status(title) as status:
            yield Step(title, status)
    else:
        console.print(f"▶ {title}")
        yield Step(title, None)
    console.print(f"[green]✓[/green] {title} [dim]({time.perf_counter() - started:.1f} s)[/dim]")


def info(message: str) -> None:
    console.print(message)


def warn(message: str) -> None:
    console.print(f"[yellow]warning:[/yellow] {message}")


def is_interactive() -> bool:
    return sys.stderr.isatty()
