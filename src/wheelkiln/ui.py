"""Visible, timed steps: a spinner with the build's latest line on a terminal, plain
timed lines in CI logs. Everything goes to stderr so ``--json`` output stays clean.

Without a terminal a long step writes a line about itself every
:data:`PROGRESS_EVERY` seconds (its time so far and the build's latest progress line):
a CI log otherwise shows nothing between a step's start and its end, hours apart in a
heavy build, and CI systems that end a job silent for ten minutes end it.

Messages are never hard-wrapped where no one reads them at a terminal: without one,
rich would break lines at 80 columns (or ``$COLUMNS``), so a sentence naming a long
path is cut at a point that depends on the path's length, and a grep over a CI log or a
test over stderr misses it. Errors are never wrapped at all; a terminal folds long
lines itself."""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleDimensions
from rich.errors import MarkupError
from rich.markup import escape
from rich.text import Text

if TYPE_CHECKING:  # rich.status loads rich.live: only a terminal's spinner needs it
    from rich.status import Status

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


PROGRESS_EVERY = 60.0
"""Seconds between a step's lines about itself without a terminal (module doc);
``KILN_PROGRESS_SECONDS`` sets another interval."""

SPINNER_EVERY = 1.0
"""Seconds between a spinner's updates from a step's ``where`` (its jobs' logs)."""


def _progress_every() -> float:
    value = os.environ.get("KILN_PROGRESS_SECONDS", "")
    try:
        seconds = float(value) if value.strip() else PROGRESS_EVERY
    except ValueError:
        return PROGRESS_EVERY
    return seconds if math.isfinite(seconds) and seconds > 0 else PROGRESS_EVERY


def progress_line(text: str) -> str | None:
    """*text* shortened for a progress line where it reads as build progress (``[12/80]
    Building ...``, ``compiling ...``); None otherwise."""
    shown = text.strip()
    if not _PROGRESS.search(shown):
        return None
    return shown if len(shown) <= 100 else shown[:97] + "..."


LOG_TAIL_BYTES = 16 * 1024
"""How much of a log's end :func:`latest_progress` reads: a build's lines are short, and
a log of hours is never read whole once a second."""


def latest_progress(log: Path) -> str | None:
    """The last progress line (:func:`progress_line`) in the end of the file *log*; None
    where it has none yet or cannot be read."""
    try:
        with log.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
            tail = handle.read(LOG_TAIL_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    for text in reversed(tail.splitlines()):
        shown = progress_line(text)
        if shown is not None:
            return shown
    return None


def elapsed(seconds: float) -> str:
    """``42 s``, ``5 min 3 s``, ``2 h 7 min``: how long a step has run, for people."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


class Step:
    """One running step; ``line`` feeds it the build's output. Its latest progress line
    is the spinner's text on a terminal and the periodic line's tail without one; a
    step whose work runs elsewhere (shard jobs) says where it is through ``where``."""

    def __init__(
        self, title: str, status: Status | None, where: Callable[[], str | None] | None = None
    ) -> None:
        self.title = title
        self._status = status
        self._where = where
        self._last = 0.0
        self.latest: str | None = None

    def line(self, text: str) -> None:
        shown = progress_line(text)
        if shown is None:
            return
        self.latest = shown
        if self._status is None:
            return
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        self._show(shown)

    def _show(self, shown: str) -> None:
        # A build's line is text, never markup: "[/x]" in it would end the command.
        if self._status is not None:
            self._status.update(f"{self.title}: [dim]{escape(shown)}[/dim]")

    def progress(self) -> str | None:
        """Where the step is: its ``where``, else the build's latest progress line."""
        if self._where is not None:
            try:
                return self._where()
            except OSError:
                return None
        return self.latest


def _report_progress(step: Step, started: float, stop: threading.Event) -> None:
    """Without a terminal, a line every :func:`_progress_every` seconds; with one, the
    spinner's text from the step's ``where`` every :data:`SPINNER_EVERY` seconds."""
    on_terminal = step._status is not None
    every = SPINNER_EVERY if on_terminal else _progress_every()
    while not stop.wait(every):
        where = step.progress()
        if on_terminal:
            if where:
                step._show(where)
            continue
        text = Text(f"  … {step.title}: {elapsed(time.perf_counter() - started)} so far")
        if where:
            text.append(f"; {where}", style="dim")
        console.print(text, soft_wrap=True)


@contextmanager
def step(
    title: str, *, quiet: bool = False, where: Callable[[], str | None] | None = None
) -> Iterator[Step]:
    """A timed step. *where* says where work running elsewhere (other processes' logs)
    has got to; otherwise the lines fed to the step's ``line`` do."""
    started = time.perf_counter()
    if quiet:
        yield Step(title, None)
        return
    stop = threading.Event()
    with console.status(title) if console.is_terminal else _no_status() as status:
        running = Step(title, status, where)
        if status is None:
            console.print(f"▶ {title}", soft_wrap=True)
        reporter = None
        if status is None or where is not None:
            reporter = threading.Thread(
                target=_report_progress, args=(running, started, stop), daemon=True
            )
            reporter.start()
        try:
            yield running
        finally:
            stop.set()
            if reporter is not None:
                reporter.join()
    console.print(f"[green]✓[/green] {title} [dim]({time.perf_counter() - started:.1f} s)[/dim]")


@contextmanager
def _no_status() -> Iterator[Status | None]:
    yield None


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
