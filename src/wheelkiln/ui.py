"""Visible, timed steps: a spinner with the build's latest line on a terminal, plain
timed lines in CI logs. Everything goes to stderr so ``--json`` output stays clean.

Messages are never hard-wrapped where no one reads them at a terminal: without one,
rich would break lines at 80 columns (or ``$COLUMNS``), so a sentence naming a long
path is cut at a point that depends on the path's length, and a grep over a CI log or a
test over stderr misses it. Errors are never wrapped at all; a terminal folds long
lines itself."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.errors import MarkupError
from rich.text import Text

LOG_WIDTH = 160
"""The width tables are laid out at where no terminal shows them (a pipe, a CI log)."""


class _Console(Console):
    """A console whose width, without a terminal, is fixed: rich would otherwise take
    80 columns, ``$COLUMNS``, or the size of whatever terminal the process's other
    streams happen to be on, so a CI log's tables (and a test's output) would depend on
    where the command was started."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if options.get("width") is None:
            self._width = None  # rich took $COLUMNS; size decides, terminal or not

    @property
    def size(self) -> ConsoleDimensions:
        dimensions = super().size
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(LOG_WIDTH, dimensions.height)
        return dimensions

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console: Console = _Console(stderr=True, highlight=False, emoji=False)
"""No emoji codes: kiln writes none, and with them a path or TU name holding ``:fire:``
would print as an emoji; the table of codes also cost every kiln process 30-70 ms to
load at its first line."""
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
        console.print(f"▶ {title}", soft_wrap=True)
        yield Step(title, None)
    console.print(f"[green]✓[/green] {title} [dim]({time.perf_counter() - started:.1f} s)[/dim]")


def _soft_wrap() -> bool:
    """Leave line breaking to whatever shows the text, unless that is our terminal."""
    return not console.is_terminal


def info(message: str) -> None:
    """A line of progress or summary; ``message`` may hold rich markup.

    Values interpolated into it (paths, TU names) should be passed through
    :func:`rich.markup.escape`; one that was not and reads as a broken tag (``[/x]`` in
    a directory name) prints as plain text rather than ending the command.
    """
    try:
        text = Text.from_markup(message, emoji=False)
    except MarkupError:
        text = Text(message)
    console.print(text, soft_wrap=_soft_wrap())


def warn(message: str) -> None:
    """A warning; ``message`` is plain text (paths may hold brackets), never markup."""
    console.print(Text("warning: ", style="yellow") + Text(message), soft_wrap=_soft_wrap())


def error(message: str, *, hint: str | None = None) -> None:
    """An error and its next step, plain text, never wrapped: it is the line people
    paste into a bug report and tools grep for."""
    console.print(Text("error: ", style="red") + Text(message), soft_wrap=True)
    if hint:
        console.print(Text(hint), soft_wrap=True)
