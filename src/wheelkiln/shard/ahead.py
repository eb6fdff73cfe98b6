"""Compiles ahead: a shard's own TUs compiled in the job slots ninja gives its stubs,
the ones ninja would start last first (stdlib only: the seat wrapper imports it).

ninja (1.12 and later) starts the ready edge with the longest chain of edges after it,
then the first in its manifest; it never knows how long an edge takes. A target whose
objects have one edge fewer after them (a Python module linked against the package's own
library) therefore compiles last, and a shard that owns one long such TU ends on it
alone, a core idle: in awkward-cpp at N=3, every shard ended on one of its module's TUs
(5-11 s each), 15-26 slot-seconds idle per round of three shards (``kiln timeline``
shows each job's tail).

Most calls in a shard are stubs, done in milliseconds, and the slot a stub holds is
free for a compile. So after writing its stub, a stub call compiles one of the shard's
own TUs that nobody has started yet, from the build's command list (``ninja -t
commands``): the longest first where this builder timed them before (:data:`SECONDS_FILE`,
from :func:`wheelkiln.shard.balance.recall_seconds`), then the rest from the **end** of
the list. The compile runs exactly as ninja's own call would (the same command through
``/bin/sh -c``, so through the seat wrapper, in ninja's directory), output discarded, its
wrapper record an ``ahead``. When ninja starts that TU, its compile finds the result in
the cache, so the object, the depfile and the diagnostics come from ninja's own call as
always; an ahead compile that failed (a header the build has not generated yet) leaves
nothing that call relies on.

One process compiles a TU at a time: a **claim** (a file per output, created already
locked) is taken by whoever starts it, ninja's call or an ahead compile. A ninja call
whose TU is being compiled ahead compiles the next TU ahead meanwhile, and waits only
when none is left. Nothing is held while waiting, so nothing waits in a circle.

**Off by default; ``KILN_SHARD_AHEAD=1`` turns it on.** On this project's 2-core
builder it removed the tails (15-26 slot-seconds per round of awkward-cpp's three shards
down to 0.1-1.3) but not the time: the shard sum was no lower. The TUs it compiles
first are the longest, and two of them side by side slowed each other down
(``awkward_argsort.cpp`` 27.9 s beside small TUs, 36.1 s beside ``ForthMachine.cpp``,
which went from 13.4 to 19.2 s), which cost what the tails had. Always off without a
compiler cache (ninja's call would compile again), outside the seat partition, and for
builds ninja does not run.

Files in ``KILN_AHEAD_DIR``: ``queue`` (one TU per line: its output, directory and
ninja's command, NUL-separated), ``cursor`` (the next line to take), ``queue.lock``, ``claims/``, and
``exhausted`` once every line was taken.
"""

# Per-TU path: os strings, no pathlib (see wrapper.py).
# ruff: noqa: PTH103, PTH105, PTH108, PTH110, PTH115, PTH118, PTH119, PTH120
from __future__ import annotations

import fcntl
import os
import zlib

from wheelkiln.per_tu import SEAT_SCRIPT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    Owned = Callable[[list[str], str], tuple[str, str | None] | None]
    """A command line of ninja's and its directory: (output, TU key) when it is one of
    this shard's compiles, else None (the wrapper's own decision)."""

SWITCH = "KILN_SHARD_AHEAD"
"""``1`` turns compiling ahead on (it is off by default: see the module's doc)."""
CHILD = "KILN_AHEAD_CHILD"
"""Set in an ahead compile's environment: the wrapper it starts compiles, logs an
``ahead`` record, and takes no claim (the wrapper's ``AHEAD_CHILD``: the wrapper imports
this module only when it compiles ahead, and a unit test keeps the two equal)."""


def _claim_path(directory: str, output: str) -> str:
    # A collision only makes one TU wait for another's compile, never skips a compile.
    return os.path.join(directory, "claims", f"{zlib.crc32(output.encode()):08x}-{len(output)}")


def claim(directory: str, output: str) -> int | None:
    """Take *output*'s claim: an open descriptor holding its lock (close it when the
    compile is over), or None when someone took it first."""
    path = _claim_path(directory, output)
    staged = f"{path}.{os.getpid()}"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # locked before anyone can see it
    try:
        os.link(staged, path)
    except FileExistsError:
        os.close(fd)
        return None
    finally:
        os.unlink(staged)
    return fd


def _compile_over(directory: str, output: str, *, wait: bool) -> bool:
    """Whether the compile that claimed *output* has ended (with *wait*: once it has)."""
    fd = os.open(_claim_path(directory, output), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _running_ninja() -> tuple[str, str] | None:
    """(executable, directory) of the ninja running this build: an ancestor of this
    process (ninja starts each command through ``/bin/sh -c``), or None."""
    pid = os.getppid()
    for _ in range(3):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            if os.path.basename(exe) == "ninja":
                return exe, os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/stat", "rb") as handle:
                pid = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


def is_kiln_front(word: str, seat: str | None) -> bool:
    """Whether a command's first word starts the seat wrapper: its launcher script, or a
    compiler front installed beside it (meson and setuptools builds)."""
    if os.path.basename(word) == SEAT_SCRIPT:
        return True
    return bool(seat) and os.path.dirname(word) == os.path.dirname(seat or "")


def build_queue(
    ninja: str, cwd: str, owned: Owned, seconds: Mapping[str, float] | None = None
) -> list[str]:
    """The shard's own compiles as queue lines (output, directory and ninja's command,
    NUL-separated): the longest first where *seconds* (what each TU took last time on
    this builder) knows them, then the rest, ninja's last first. A command is split here
    only to decide whose it is; it runs as ninja runs it, through ``/bin/sh -c``."""
    import shlex
    import subprocess

    done = subprocess.run(
        [ninja, "-t", "commands"], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return []
    seat = os.environ.get("KILN_FRONT_SEAT")
    known = seconds or {}
    timed: list[tuple[float, int, str]] = []
    untimed: list[str] = []
    for number, text in enumerate(done.stdout.splitlines()):
        try:
            words = shlex.split(text)
        except ValueError:
            continue
        if not words or not is_kiln_front(words[0], seat) or "\n" in text or "\0" in text:
            continue
        mine = owned(words, cwd)
        if mine is None:
            continue
        line = "\0".join([mine[0], cwd, text])
        if mine[1] is not None and mine[1] in known:
            timed.append((-known[mine[1]], -number, line))
        else:
            untimed.append(line)
    untimed.reverse()
    return [line for *_key, line in sorted(timed)] + untimed


SECONDS_FILE = "seconds"
"""In the ahead directory: ``SECONDS<TAB>TU`` per line, what each TU took when this
builder last compiled it (the shard job writes it; the queue puts the longest first)."""


def read_seconds(directory: str) -> dict[str, float]:
    """The shard job's :data:`SECONDS_FILE`; empty without one."""
    seconds: dict[str, float] = {}
    try:
        with open(os.path.join(directory, SECONDS_FILE), encoding="utf-8") as handle:
            for line in handle:
                value, _, tu = line.rstrip("\n").partition("\t")
                try:
                    seconds[tu] = float(value)
                except ValueError:
                    continue
    except OSError:
        return {}
    return seconds


def write_seconds(directory: str, seconds: Mapping[str, float]) -> None:
    """Write :data:`SECONDS_FILE` for a shard's wrappers (TU keys hold no line break:
    they are paths a compile database named, and one that does is left out)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, SECONDS_FILE), "w", encoding="utf-8") as handle:
        handle.writelines(
            f"{value}\t{tu}\n" for tu, value in seconds.items() if "\n" not in tu and "\t" not in tu
        )


def _make_queue(directory: str, owned: Owned) -> str:
    """The queue's path, the queue built first by the first process that needs it (under
    ``queue.lock``)."""
    path = os.path.join(directory, "queue")
    if not os.path.exists(path):
        found = _running_ninja()
        lines = build_queue(found[0], found[1], owned, read_seconds(directory)) if found else []
        staged = f"{path}.{os.getpid()}"
        with open(staged, "wb") as handle:
            handle.write(b"".join(os.fsencode(line) + b"\n" for line in lines))
        os.replace(staged, path)
    return path


Taken = tuple[int, str, str]
"""A claimed TU: (claim descriptor, directory, ninja's command)."""


def take(directory: str, owned: Owned) -> Taken | None:
    """The next TU nobody has started, claimed, or None when every one was taken. The
    cursor is a byte offset into the queue, so a call reads only from where the last one
    stopped."""
    if os.path.exists(os.path.join(directory, "exhausted")):
        return None
    os.makedirs(os.path.join(directory, "claims"), exist_ok=True)
    with open(os.path.join(directory, "queue.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cursor_path = os.path.join(directory, "cursor")
        try:
            with open(cursor_path) as handle:
                offset = int(handle.read() or 0)
        except (OSError, ValueError):
            offset = 0
        taken = None
        with open(_make_queue(directory, owned), "rb") as queue:
            queue.seek(offset)
            while taken is None and (line := queue.readline()):
                output, cwd, command = os.fsdecode(line.rstrip(b"\n")).split("\0")
                fd = claim(directory, output)
                if fd is not None:
                    taken = (fd, cwd, command)
            offset = queue.tell()
            if not queue.peek(1):  # every line taken: later stubs skip all of this
                with open(os.path.join(directory, "exhausted"), "w"):
                    pass
        with open(cursor_path, "w") as handle:
            handle.write(str(offset))
        return taken


def compile_ahead(item: Taken) -> None:
    """Run one taken TU's command as ninja would, its output discarded, then release its
    claim. The wrapper that command starts compiles and logs an ``ahead`` record."""
    import subprocess

    fd, cwd, command = item
    try:
        subprocess.run(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env={**os.environ, CHILD: "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    except OSError:
        pass  # ninja's own call runs it and says why
    finally:
        os.close(fd)


def after_stub(directory: str, owned: Owned) -> None:
    """In a stub's slot: compile one TU ahead, if one is left."""
    item = take(directory, owned)
    if item is not None:
        compile_ahead(item)


def before_compile(directory: str, output: str, owned: Owned) -> tuple[int | None, float]:
    """For ninja's own call of a TU of this shard: (its claim to hold while compiling, or
    None once an ahead compile of it has ended, when the compile is a cache hit; the
    seconds it waited for that with nothing else to do, its slot idle). Compiles other
    TUs ahead while one of this TU is running."""
    import time

    os.makedirs(os.path.join(directory, "claims"), exist_ok=True)
    held = claim(directory, output)
    if held is not None:
        return held, 0.0
    while not _compile_over(directory, output, wait=False):
        item = take(directory, owned)
        if item is None:
            started = time.perf_counter()
            _compile_over(directory, output, wait=True)
            return None, time.perf_counter() - started
        compile_ahead(item)
    return None, 0.0
