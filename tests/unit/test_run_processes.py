"""Nothing a command starts outlives kiln: commands run in process groups of their own,
the direct child dies with kiln (PR_SET_PDEATHSIG), a signal or a command's end ends its
group, and whoever takes the builder lock after a ``kill -9`` ends what the dead holder
left running before starting anything. Real processes throughout; every wait is a poll
with a deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wheelkiln import run
from wheelkiln.builder_lock import BuilderLock

DEADLINE = 30.0  # generous: polls end as soon as the condition holds, and CI machines are loaded


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie waiting to be collected is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def pgid_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[2])


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE:g} s: {what}")
        time.sleep(0.02)


# A stand-in for a build under kiln: it holds the builder lock and runs, through
# run.py, a command whose own child (the "compiler") is a grandchild of kiln. The shell
# writes "<its pid> <the compiler's pid>" once both run.
BUILD = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path
    # As from a terminal, whatever the test runner inherited (a background job ignores ^C).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from wheelkiln import run
    from wheelkiln.builder_lock import BuilderLock
    lock = BuilderLock(Path(sys.argv[1]), command="kiln bench demo (test build)")
    assert lock.try_acquire()
    run.run(["sh", "-c", 'sleep 300 & echo "$$ $!" > "$1.tmp"; mv "$1.tmp" "$1"; wait',
             "sh", sys.argv[2]])
    """
)


def recorded_groups(lock_path: Path) -> list[int]:
    """The process groups the builder lock file names."""
    try:
        groups = json.loads(lock_path.read_text())["process_groups"]
    except (OSError, ValueError, KeyError):  # not written yet, or caught mid-rewrite
        return []
    return [group["pgid"] for group in groups]


class Build:
    def __init__(self, proc: subprocess.Popen[str], shell: int, compiler: int) -> None:
        self.proc, self.shell, self.compiler = proc, shell, compiler


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Build]:
    pids = tmp_path / "pids"
    proc = subprocess.Popen(
        [sys.executable, "-c", BUILD, str(tmp_path / "builder.lock"), str(pids)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    wait_until(pids.exists, "the build started its compiler")
    shell, compiler = map(int, pids.read_text().split())
    yield Build(proc, shell, compiler)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()  # wait() leaves the pipe open; communicate() could wait on a grandchild
    for pid in (shell, compiler):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_command_runs_in_a_group_of_its_own(build: Build) -> None:
    assert pgid_of(build.shell) == build.shell
    assert pgid_of(build.compiler) == build.shell
    assert pgid_of(build.shell) != os.getpgrp()


def test_after_kill_9_the_next_lock_holder_ends_the_orphans_before_it_starts(
    build: Build, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "builder.lock"
    # The holder records the group just after the command starts (a few instructions
    # after the fork, which under load can come after the shell wrote its pids).
    wait_until(
        lambda: recorded_groups(path) == [build.shell], "the lock file names the build's group"
    )

    build.proc.send_signal(signal.SIGKILL)
    build.proc.wait()
    # The direct child dies with kiln (PR_SET_PDEATHSIG); its own child does not, and
    # nobody holds the lock any more: this is the orphan a new build must not run beside.
    wait_until(lambda: not alive(build.shell), "the direct child died with kiln")
    assert alive(build.compiler)
    lock = BuilderLock(path)
    assert lock.holder() is None

    assert lock.try_acquire()
    try:
        assert not alive(build.compiler)  # ended before try_acquire returned
        err = " ".join(capsys.readouterr().err.split())
        assert (
            "Ended 1 process(es) that an earlier build left running when it was killed "
            f"(pid {build.proc.pid} on "
        ) in err
        assert "kiln bench demo (test build)); a build does not start beside them." in err
        assert json.loads(path.read_text())["process_groups"] == []
    finally:
        lock.release()
    # Once ended, nothing is left to end.
    assert lock.try_acquire()
    lock.release()
    assert "Ended" not in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signalled_kiln_ends_its_commands_groups(
    build: Build, signum: int, tmp_path: Path
) -> None:
    # kiln knows a group only once the command has started (Popen returned and the group
    # was registered); the lock file's record says so. A signal before that moment is
    # the kill -9 case, which the next lock holder covers.
    wait_until(
        lambda: recorded_groups(tmp_path / "builder.lock") == [build.shell],
        "the lock file names the build's group",
    )
    build.proc.send_signal(signum)
    build.proc.wait(timeout=DEADLINE)
    # Gone at once, not at the next lock acquire.
    wait_until(lambda: not alive(build.compiler), "the compiler was ended with kiln")
    assert not alive(build.shell)
    # Died of the signal, as it would have without the handler (an unhandled
    # KeyboardInterrupt ends Python by SIGINT too).
    assert build.proc.returncode == -signum


def test_what_a_command_leaves_running_is_ended_when_it_returns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    done = run.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
    left = int(done.output)
    assert done.returncode == 0
    assert not alive(left)
    err = capsys.readouterr().err
    assert f"kiln: ended 1 process(es) that sh -c 'sleep 300 >/dev/null 2>&1 & echo $!' left " \
           f"running (pid {left})" in err
    assert run.live_groups() == ()


TERMINAL = textwrap.dedent(
    """
    import os, sys
    os.setsid()
    os.open(sys.argv[1], os.O_RDWR)  # a session leader's first terminal becomes its own
    os.close(os.open("/dev/tty", os.O_RDONLY))  # kiln has a terminal
    from wheelkiln import run
    print(run.run(["sh", "-c", "(exec 3</dev/tty) 2>/dev/null && echo terminal || echo none"])
          .output.strip())
    """
)


def test_a_command_has_no_terminal_to_wait_on() -> None:
    """A prompt on the terminal (git asking for a password) fails instead of stopping the
    command forever, as it would in a background group of kiln's own session."""
    master, slave = os.openpty()
    try:
        done = subprocess.run([sys.executable, "-c", TERMINAL, os.ttyname(slave)],
                              capture_output=True, text=True, timeout=60, check=True)
    finally:
        os.close(master)
        os.close(slave)
    assert done.stdout.strip() == "none"


def test_a_timeout_ends_the_whole_group() -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run.run(["sh", "-c", "sleep 300 & echo $!; wait"], timeout=0.5)
    assert time.monotonic() - started < DEADLINE
    assert not alive(int(caught.value.output))
    assert run.live_groups() == ()


NESTED = textwrap.dedent(
    """
    import os
    from wheelkiln import run
    print(os.getpid(), run.run(["sh", "-c", "echo $$"]).output.strip(), flush=True)
    """
)


def test_a_kiln_started_by_kiln_keeps_its_commands_in_the_group_made_for_it() -> None:
    """So the lock holder's record of that one group covers the whole job."""
    code = NESTED.replace('"echo $$"', '"cut -d\\" \\" -f5 /proc/$$/stat"')
    inner, inner_command_pgid = map(int, run.run([sys.executable, "-c", code]).output.split())
    assert inner_command_pgid == inner  # the group the outer kiln made for the inner one


def test_a_group_whose_number_was_reused_is_left_alone() -> None:
    other = subprocess.Popen(["sleep", "30"], process_group=0)
    try:
        stat = Path(f"/proc/{other.pid}/stat").read_text().rpartition(")")[2].split()
        session, start = int(stat[3]), int(stat[19])
        assert run.members(run.ProcessGroup(other.pid, session, start)) == [other.pid]
        # The same number, recorded for a group whose leader started at another time:
        stale = run.ProcessGroup(other.pid, session, start - 1)
        assert run.members(stale) == []
        assert run.end_groups([stale]) == {}
        assert run.end_groups([run.ProcessGroup(other.pid, session + 1, start)]) == {}
        assert other.poll() is None
        assert run.end_groups([run.ProcessGroup(other.pid, session, start)]) == {
            other.pid: [other.pid]
        }
        assert other.wait(timeout=DEADLINE) == -signal.SIGTERM
    finally:
        other.kill()
        other.wait()


def test_a_lock_file_never_makes_kiln_end_its_own_group(tmp_path: Path) -> None:
    path = tmp_path / "builder.lock"
    stat = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    own = {"pgid": os.getpgrp(), "session": int(stat[3]), "leader_start": 0}
    path.write_text(json.dumps({"pid": 1, "host": os.uname().nodename, "process_groups": [own]}))
    lock = BuilderLock(path)
    assert lock.try_acquire()  # and this test process is still here
    lock.release()


@pytest.mark.parametrize(
    "item",
    [None, [], "12", {"pgid": "12", "session": 1, "leader_start": 1},
     {"pgid": True, "session": 1, "leader_start": 1}, {"pgid": 1, "session": 1, "leader_start": 1},
     {"pgid": 0, "session": 1, "leader_start": 1}, {"pgid": -5, "session": 1, "leader_start": 1},
     {"pgid": 12, "session": 1}],
)
def test_a_malformed_group_record_is_ignored(item: object) -> None:
    assert run.ProcessGroup.from_json(item) is None
