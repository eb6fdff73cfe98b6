"""The one way wheelkiln starts a subprocess.

Every command is echoed as ``+ cmd`` (shell-quoted) when verbose, its executable is
checked before it starts so a missing tool gets a message that names PATH, and its
output is captured: shown only on failure unless verbose, or streamed line by line
into a log file for long builds.

Every command also runs in a process group (and session) of its own, and nothing it
starts outlives kiln. A build is a tree (pip, the build backend, ninja, the compilers), and ending only
the process kiln started leaves the rest compiling: after a ``kill -9`` of ``kiln
bench`` its compilers went on, and the next bench timed its build under their load
and deleted their tree. Four things close that:

- The child asks the kernel for ``SIGKILL`` when its parent dies (``PR_SET_PDEATHSIG``
  on Linux), which covers the one process a ``kill -9`` leaves behind directly. The
  kernel sends it when the *thread* that started the child ends, so a command is only
  ever started by a thread that then waits for it.
- When a command ends, what it left running in its group is ended too.
- On ``SIGTERM``, ``SIGHUP``, ``SIGINT`` and at exit, kiln ends every group it started.
- The builder lock records the live groups (``watch_groups``), so whoever takes the lock
  after a ``kill -9`` ends the grandchildren that ``PR_SET_PDEATHSIG`` does not reach.

A kiln started by kiln (the shard and link jobs of ``kiln build --shards``) stays in
the group its parent made for it and starts its children there, so one group holds a
whole job and the lock holder can end it.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pickle
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Generic, ParamSpec, TypeVar

from wheelkiln.errors import BuildError, ToolNotFoundError

VERBOSE = os.environ.get("KILN_VERBOSE", "") not in ("", "0")

GROUP_PARENT_ENV = "KILN_GROUP_PARENT"
"""Set for a child to the pid of the kiln that made its process group (see ``_nested``)."""
GRACE_SECONDS = 2.0
"""How long a group has to go after ``SIGTERM`` before it gets ``SIGKILL``."""
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    output: str
    wall_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int


def signal_name(returncode: int) -> str | None:
    """``SIGKILL`` for a command ended by signal 9 (``returncode`` -9), else None."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def exit_description(returncode: int) -> str:
    """How a command ended, in words: ``exit 0``, ``exit 5``, ``killed by SIGKILL``."""
    name = signal_name(returncode)
    return f"killed by {name}" if name is not None else f"exit {returncode}"


def find_executable(name: str, env: Mapping[str, str] | None = None) -> str:
    """Resolve ``name`` on PATH (or accept an existing path), or explain what is missing."""
    if os.sep in name:
        if os.access(name, os.X_OK):
            return name
        raise ToolNotFoundError(
            f"{name} does not exist or is not executable.",
            hint="Check the path, or install the tool.",
        )
    search_path = (env or os.environ).get("PATH", os.defpath)
    found = shutil.which(name, path=search_path)
    if found is None:
        raise ToolNotFoundError(
            f"'{name}' was not found on PATH ({search_path}).",
            hint=f"Install {name} or put it on PATH, then run the command again.",
        )
    return found


def quote(argv: Sequence[str]) -> str:
    return shlex.join(argv)


# --- process groups -------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessGroup:
    """A process group kiln started, described well enough to find it again later.

    A group's number is its leader's pid, and it can be reused once the group is empty,
    so the session and the leader's start time (clock ticks since boot) come with it:
    ``members`` finds nothing when the number now names someone else's group.
    """

    pgid: int
    session: int
    leader_start: int

    def as_json(self) -> dict[str, int]:
        return {"pgid": self.pgid, "session": self.session, "leader_start": self.leader_start}

    @classmethod
    def from_json(cls, data: object) -> ProcessGroup | None:
        """The group ``as_json`` wrote, or ``None`` for anything else (the lock file is
        plain text on disk that anyone can have edited)."""
        if not isinstance(data, dict):
            return None
        values = [data.get(key) for key in ("pgid", "session", "leader_start")]
        if not all(type(value) is int and value >= 0 for value in values) or values[0] in (0, 1):
            return None
        pgid, session, leader_start = values
        assert isinstance(pgid, int) and isinstance(session, int)
        assert isinstance(leader_start, int)
        return cls(pgid, session, leader_start)


@dataclass(frozen=True)
class _ProcStat:
    pid: int
    state: str
    pgid: int
    session: int
    start: int


def _proc_stat(pid: int) -> _ProcStat | None:
    """Fields of ``/proc/<pid>/stat``, or ``None`` when there is no such process."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) is in parentheses and may hold spaces and ')'.
    fields = raw.rpartition(b")")[2].split()
    try:
        return _ProcStat(pid, fields[0].decode(), int(fields[2]), int(fields[3]), int(fields[19]))
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def members(group: ProcessGroup) -> list[int]:
    """The live (not zombie) processes in ``group``; none when its number was reused."""
    leader = _proc_stat(group.pgid)
    if leader is not None and leader.start != group.leader_start:
        return []  # another process has the leader's pid: the group is gone
    try:
        with os.scandir("/proc") as entries:
            pids = [int(entry.name) for entry in entries if entry.name.isdigit()]
    except OSError:
        return []
    found = []
    for pid in pids:
        stat = _proc_stat(pid)
        if (
            stat is not None
            and stat.pgid == group.pgid
            and stat.session == group.session
            and stat.start >= group.leader_start
            and stat.state not in ("Z", "X")
        ):
            found.append(pid)
    return found


def _signal_group(pgid: int, signum: int) -> None:
    # PermissionError too: what cannot be signalled shows up as a survivor in members().
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def end_groups(groups: Sequence[ProcessGroup], grace: float = GRACE_SECONDS) -> dict[int, list[int]]:
    """End every process in ``groups``: ``SIGTERM``, then ``SIGKILL`` after ``grace``.

    Returns the processes found in each group that had any, and waits (up to another
    ``grace``) for them to be gone. Survivors (another user's, or stuck in the kernel)
    are left; callers that must not start beside them check ``members`` again.
    """
    own = os.getpgrp()  # never this process's own group, whatever a lock file says
    groups = [group for group in groups if group.pgid != own]
    found = {group.pgid: pids for group in groups if (pids := members(group))}
    if not found:
        return {}
    live = [group for group in groups if group.pgid in found]
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for group in live:
            _signal_group(group.pgid, signum)
            if signum == signal.SIGTERM:
                _signal_group(group.pgid, signal.SIGCONT)  # a stopped process cannot act on it
        deadline = time.monotonic() + grace
        while live and time.monotonic() < deadline:
            time.sleep(0.02)
            live = [group for group in live if members(group)]
        if not live:
            break
    return found


_registry = threading.RLock()
_live_groups: dict[int, ProcessGroup] = {}
_watchers: list[Callable[[tuple[ProcessGroup, ...]], None]] = []


def live_groups() -> tuple[ProcessGroup, ...]:
    """The groups of the commands this process is running now."""
    with _registry:
        return tuple(_live_groups.values())


def watch_groups(callback: Callable[[tuple[ProcessGroup, ...]], None]) -> Callable[[], None]:
    """Call ``callback(live groups)`` now and after every change; returns the way to stop.

    The callback runs on the thread that started or ended a command, right after the
    command started: only a ``kill -9`` in that moment escapes the record, and then the
    direct child, which dies with us, has had only that moment to start anything.
    """
    with _registry:
        _watchers.append(callback)
        callback(tuple(_live_groups.values()))

    def unwatch() -> None:
        with _registry, suppress(ValueError):
            _watchers.remove(callback)

    return unwatch


def _set_live(group: ProcessGroup, live: bool) -> None:
    with _registry:
        if live:
            _live_groups[group.pgid] = group
        else:
            _live_groups.pop(group.pgid, None)
        snapshot = tuple(_live_groups.values())
        for callback in list(_watchers):
            callback(snapshot)


def end_all_groups() -> None:
    """End every command this process started (on a signal, and at exit)."""
    # A snapshot without the lock: a signal handler may run while this thread holds it.
    end_groups(list(_live_groups.values()))


def _load_prctl() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_prctl = _load_prctl()


def _die_with(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking for ``SIGKILL`` when ``parent`` dies (``None`` off Linux).

    It runs in the child between fork and exec, where only async-signal-safe work is
    sound: one foreign call and one system call, nothing that takes a lock.
    """
    prctl = _prctl
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request was in place
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _nested() -> bool:
    """Whether this process leads a group that the kiln which started it made for it.

    Its commands then stay in that group: the parent records the group and ends it, and
    a group of its own would escape both.
    """
    return (
        os.environ.get(GROUP_PARENT_ENV) == str(os.getppid()) and os.getpgrp() == os.getpid()
    )


@contextmanager
def _started(
    resolved: Sequence[str], *, cwd: Path | str | None, env: Mapping[str, str] | None
) -> Iterator[tuple[subprocess.Popen[str], ProcessGroup | None]]:
    """Start a command with its output on a pipe; end what is left of it on the way out."""
    install_signal_handlers()
    own_group = not _nested()
    child_env = dict(env if env is not None else os.environ)
    if own_group:
        child_env[GROUP_PARENT_ENV] = str(os.getpid())
    else:
        child_env.pop(GROUP_PARENT_ENV, None)
    proc = subprocess.Popen(
        resolved,
        cwd=cwd,
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        # A session of its own is a group of its own without the terminal: a command
        # that asks there (git's password prompt) fails, where in a background group of
        # kiln's session it would be stopped by SIGTTIN and wait forever.
        start_new_session=own_group,
        preexec_fn=_die_with(os.getpid()),
    )
    group = None
    if own_group:
        stat = _proc_stat(proc.pid)
        session = stat.session if stat is not None else os.getsid(0)
        group = ProcessGroup(proc.pid, session, stat.start if stat is not None else 0)
    try:
        if group is not None:
            _set_live(group, True)
        yield proc, group
    finally:
        try:
            if proc.returncode is None:  # interrupted: the command is still running
                if group is not None:
                    end_groups([group])
                else:
                    proc.kill()
                proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            if group is not None:
                _set_live(group, False)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(
    proc: subprocess.Popen[str], group: ProcessGroup | None, argv: Sequence[str]
) -> resource.struct_rusage:
    """Wait for the command, collect it, and end what it left running in its group.

    Almost always the group is empty by then, which one ``killpg(pgid, 0)`` tells. While
    anything is left in it, its number cannot be given to another group; if everything
    left ends at this very moment and the number is reused at once, ``members`` sees a
    leader with another start time and nothing is signalled.
    """
    # wait4 gives this command's own usage (its whole process tree), where
    # RUSAGE_CHILDREN would mix in every other command of this process.
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if group is None or not _group_exists(group.pgid):
        return usage
    if left := end_groups([group]).get(group.pgid):
        print(
            f"kiln: ended {len(left)} process(es) that {quote(argv)} left running "
            f"(pid {', '.join(map(str, left[:10]))})",
            file=sys.stderr,
        )
    return usage


# --- running commands -------------------------------------------------------------------


def run(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    what: str | None = None,
    timeout: float | None = None,
    stop: threading.Event | None = None,
) -> Completed:
    """Run a short command to completion with its output captured.

    After ``timeout`` seconds the command's group is killed and
    :class:`subprocess.TimeoutExpired` is raised. When ``stop`` is set (by another
    thread: a cancelled fleet task), the group is ended as on ``SIGTERM`` and the
    command's ending is returned like any other.
    """
    resolved = [find_executable(argv[0], env), *argv[1:]]
    if VERBOSE:
        print(f"+ {quote(argv)}", file=sys.stderr)
    started = time.perf_counter()
    expired = threading.Event()
    with _started(resolved, cwd=cwd, env=env) as (proc, group):
        assert proc.stdout is not None
        timer = None
        if timeout is not None:

            def expire() -> None:
                expired.set()
                if group is not None:
                    _signal_group(group.pgid, signal.SIGKILL)
                else:
                    proc.kill()

            timer = threading.Timer(timeout, expire)
            timer.daemon = True
            timer.start()
        finished = threading.Event()
        stopper = None
        if stop is not None:
            watched = stop

            def end_when_stopped() -> None:
                while not finished.is_set():
                    if watched.wait(0.1):
                        if group is not None:
                            end_groups([group])
                        else:
                            proc.terminate()
                        return

            stopper = threading.Thread(target=end_when_stopped, daemon=True)
            stopper.start()
        try:
            output = proc.stdout.read()
        finally:
            finished.set()
            if timer is not None:
                timer.cancel()
                timer.join()  # it must not signal the group after the leader is collected
            if stopper is not None:
                stopper.join()
        usage = _reap(proc, group, argv)
    wall = time.perf_counter() - started
    if expired.is_set():
        raise subprocess.TimeoutExpired(resolved, timeout or 0.0, output=output)
    returncode = proc.returncode
    cpu = usage.ru_utime + usage.ru_stime
    done = Completed(tuple(argv), returncode, output, wall, cpu, usage.ru_maxrss * 1024)
    if check and returncode != 0:
        tail = "\n".join(output.splitlines()[-30:])
        raise BuildError(
            f"{what or 'Command'} failed with exit code {returncode}: {quote(argv)}\n{tail}",
            hint="Run again with KILN_VERBOSE=1 to see every command.",
        )
    return done


def run_logged(
    argv: Sequence[str],
    *,
    log_path: Path,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> Completed:
    """Run a long command, streaming its merged output into ``log_path``.

    ``on_line`` sees each line as it arrives (for progress). The exit code is returned,
    not raised: callers such as the shard gate decide what a failure means.
    """
    resolved = [find_executable(argv[0], env), *argv[1:]]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    kept: list[str] = []
    with log_path.open("w", encoding="utf-8") as log:
        log.write(f"+ {quote(argv)}\n")
        log.flush()
        with _started(resolved, cwd=cwd, env=env) as (proc, group):
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                kept.append(line)
                if VERBOSE:
                    sys.stderr.write(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            usage = _reap(proc, group, argv)
    wall = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    return Completed(
        tuple(argv), proc.returncode, "".join(kept), wall, cpu, usage.ru_maxrss * 1024
    )


# --- library calls in a process of their own ----------------------------------------------

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class ChildCall(Generic[T]):
    """A library function called in a process of its own (:func:`call_in_child`)."""

    completed: Completed
    """The process: its exit code (negative: killed by that signal), output and times."""
    value: T | None
    """What the function returned; None when it did not return."""
    error: BaseException | None
    """What the function raised, when it raised."""

    @property
    def returned(self) -> bool:
        return self.completed.returncode == 0 and self.error is None


_CALL_PREFIX = "kiln-call-"


def _call_owner() -> str:
    """This process, as call directories name it: host and process id (``/tmp`` can be
    shared by containers whose process ids overlap, not by their host names)."""
    return f"{socket.gethostname()}.{os.getpid()}"


def _sweep_abandoned_calls() -> None:
    """Remove this user's call directories whose kiln process is gone from this host: a
    kiln killed with SIGKILL cannot remove its own."""
    host = socket.gethostname()
    for scratch in Path(tempfile.gettempdir()).glob(f"{_CALL_PREFIX}{host}.*-*"):
        pid = scratch.name[len(f"{_CALL_PREFIX}{host}.") :].split("-", 1)[0]
        try:
            if not pid.isdigit() or scratch.lstat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(scratch, ignore_errors=True)
        except OSError:
            continue  # alive under another user, or gone meanwhile


def call_in_child(
    label: Sequence[str], function: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> ChildCall[T]:
    """Call ``function(*args, **kwargs)`` in a new Python process, and get its value.

    The process is a command like any other (:func:`run`): a process group of its own
    that the builder lock records and that ends with kiln, and the commands the function
    runs stay in that group. So a job (a shard's whole build) can be killed or crash
    without taking kiln or its sibling jobs with it, and kiln learns how it ended.
    Arguments and the value travel pickled through a private temporary directory, so
    they are the library's own typed values, never re-parsed from a command line.
    ``label`` follows the call on the child's command line, for people reading ``ps``
    (``shard --index 1 --count 4``); the child does not read it.
    """
    _sweep_abandoned_calls()
    with tempfile.TemporaryDirectory(prefix=f"{_CALL_PREFIX}{_call_owner()}-") as scratch:
        request, answer = Path(scratch) / "call.pickle", Path(scratch) / "answer.pickle"
        request.write_bytes(pickle.dumps((function, args, kwargs)))
        argv = [sys.executable, "-m", "wheelkiln.worker", str(request), str(answer), *label]
        done = run(argv, check=False)
        value: Any = None
        error: BaseException | None = None
        if done.returncode >= 0 and answer.is_file():
            returned, payload = pickle.loads(answer.read_bytes())
            if returned:
                value = payload
            else:
                error = payload
    return ChildCall(done, value, error)


# --- signals and exit -------------------------------------------------------------------

_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_previous_handlers: dict[int, Any] = {}
_handlers_installed = False


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """End every group this process started, then do what the signal did before."""
    end_all_groups()
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)  # SIGINT: KeyboardInterrupt, handled by the CLI
        return
    signal.signal(signum, previous)
    os.kill(os.getpid(), signum)  # die of it, so our parent sees the signal


def install_signal_handlers() -> None:
    """End the groups on ``SIGTERM``, ``SIGHUP`` and ``SIGINT`` and at exit (once).

    Commands run in sessions of their own, away from the terminal, so a signal to kiln
    (or ^C) no longer reaches them. Handlers can only be set from the main
    thread; this runs at import and again before each command. A signal that someone
    else handles or ignores (``nohup``) is left alone.
    """
    global _handlers_installed
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    _handlers_installed = True
    atexit.register(end_all_groups)
    for signum in _ENDING_SIGNALS:
        current = signal.getsignal(signum)
        if current in (signal.SIG_DFL, signal.default_int_handler):
            _previous_handlers[signum] = current
            signal.signal(signum, _on_signal)


install_signal_handlers()
