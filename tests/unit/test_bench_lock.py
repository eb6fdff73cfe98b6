"""The builder lock: one build per builder, a holder a person can identify, no stale
holders, and a bench that refuses politely (exit 0) while another build runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from wheelkiln.builder_lock import BuilderLock, describe
from wheelkiln.cli.bench import bench_group
from wheelkiln.errors import KilnError, LockBusyError

HOLDER = textwrap.dedent(
    """
    import time
    from wheelkiln.builder_lock import BuilderLock
    lock = BuilderLock(command="kiln build demo (test holder)")
    assert lock.try_acquire()
    print(lock.path, flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def holder_process(tmp_path: Path):
    """A separate process holding the builder lock of ``KILN_HOME=tmp_path/home``, with a
    state home of its own (``tmp_path/holder-state``)."""
    env = {**os.environ, "KILN_HOME": str(tmp_path / "home"),
           "KILN_STATE_HOME": str(tmp_path / "holder-state")}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    assert path == tmp_path / "home" / "builder.lock"
    yield proc, path
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()  # wait() leaves the pipe open; communicate() could wait on a grandchild


def test_second_lock_sees_the_holder_and_cannot_take_it(tmp_path: Path) -> None:
    path = tmp_path / "builder.lock"
    first = BuilderLock(path, command="kiln bench demo")
    second = BuilderLock(path)
    assert first.try_acquire()
    assert not second.try_acquire()
    holder = second.holder()
    assert holder is not None
    assert holder["pid"] == os.getpid()
    assert holder["command"] == "kiln bench demo"
    assert holder["host"] and holder["since"]
    assert "kiln bench demo" in describe(holder)
    first.release()
    assert second.holder() is None
    assert second.try_acquire()
    second.release()


def test_acquire_times_out_with_the_holder_and_calls_on_wait_once(tmp_path: Path) -> None:
    path = tmp_path / "builder.lock"
    seen: list[object] = []
    with BuilderLock(path, command="kiln build big"):
        waiter = BuilderLock(path)
        started = time.monotonic()
        with pytest.raises(LockBusyError) as caught:
            waiter.acquire(timeout=0.3, on_wait=seen.append)
        assert time.monotonic() - started >= 0.3
    assert len(seen) == 1 and isinstance(seen[0], dict)
    assert "kiln build big" in caught.value.message
    assert caught.value.exit_code == 6
    # Released on leaving the with-block:
    waiter.acquire(timeout=0)
    waiter.release()


def test_context_manager_refuses_at_once_by_default(tmp_path: Path) -> None:
    path = tmp_path / "builder.lock"
    with BuilderLock(path), pytest.raises(LockBusyError), BuilderLock(path):
        pass


def test_a_killed_holder_leaves_no_stale_lock(holder_process) -> None:
    proc, path = holder_process
    lock = BuilderLock(path)
    holder = lock.holder()
    assert holder is not None and holder["pid"] == proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Its description is still in the file, but nobody holds the lock.
    assert json.loads(path.read_text())["pid"] == proc.pid
    assert lock.holder() is None
    assert lock.try_acquire()
    assert lock.holder()["pid"] == os.getpid()  # type: ignore[index]
    lock.release()
    assert path.read_text() == ""


def test_the_lock_lives_in_kiln_home_whatever_the_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state-a"))
    first = BuilderLock()
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state-b"))
    second = BuilderLock()
    assert first.path == second.path == tmp_path / "home" / "builder.lock"
    with first:
        assert not second.try_acquire()
        assert second.path == tmp_path / "home" / "builder.lock"  # the one that is held
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "other-home"))
    assert BuilderLock().path == tmp_path / "other-home" / "builder.lock"


def test_one_state_home_still_means_one_build_at_a_time_and_both_or_neither(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Builds in two KILN_HOMEs that record into one state home measure each other."""
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home-a"))
    first = BuilderLock(command="kiln bench a")
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home-b"))
    second = BuilderLock()
    assert second.paths == [tmp_path / "home-b" / "builder.lock",
                            tmp_path / "state" / "builder.lock"]
    with first:
        with pytest.raises(LockBusyError) as caught:
            second.acquire(timeout=0)
        assert caught.value.message.startswith(
            f"Another build holds the builder lock {tmp_path / 'state' / 'builder.lock'}: pid "
        )
        assert "kiln bench a" in caught.value.message
        # Refused, it holds nothing: home-b's own lock is free for a build of home-b alone.
        alone = BuilderLock(tmp_path / "home-b" / "builder.lock")
        assert alone.try_acquire()
        alone.release()
    assert second.try_acquire()
    assert json.loads((tmp_path / "state" / "builder.lock").read_text())["pid"] == os.getpid()
    assert json.loads((tmp_path / "home-b" / "builder.lock").read_text())["pid"] == os.getpid()
    second.release()


def _demo_recipe(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    recipe = tmp_path / "demo.toml"
    recipe.write_text('name = "demo"\n[source]\npath = "pkg"\n')
    return recipe


def _nothing_built(home: Path) -> bool:
    return sorted(entry.name for entry in home.iterdir()) == ["builder.lock"]


def test_bench_while_the_lock_is_held_exits_0_naming_the_holder(
    holder_process, tmp_path: Path
) -> None:
    """Same KILN_HOME, another state home: busy, not run beside the holder."""
    proc, _ = holder_process
    recipe = _demo_recipe(tmp_path)
    store = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        bench_group, [str(recipe), "--scenario", "all", "--store", str(store), "--json"],
        env={"KILN_STATE_HOME": str(tmp_path / "state"), "KILN_HOME": str(tmp_path / "home")},
    )
    assert result.exit_code == 0, result.output
    assert f"pid {proc.pid}" in result.stderr
    assert "kiln build demo (test holder)" in result.stderr
    assert json.loads(result.stdout)["holder"]["pid"] == proc.pid
    assert not store.exists()
    assert _nothing_built(tmp_path / "home")


def test_build_while_the_lock_is_held_exits_6_naming_the_holder(
    holder_process, tmp_path: Path
) -> None:
    """``kiln build`` waits by default; with ``--lock-timeout 0`` it is refused at once."""
    proc, path = holder_process
    recipe = _demo_recipe(tmp_path)
    env = {**os.environ, "KILN_HOME": str(tmp_path / "home"),
           "KILN_STATE_HOME": str(tmp_path / "state")}
    result = subprocess.run(
        [sys.executable, "-m", "wheelkiln", "build", str(recipe), "--lock-timeout", "0",
         "--out", str(tmp_path / "dist")],
        capture_output=True, text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 6, result.stderr
    message = " ".join(result.stderr.split())
    assert f"Another build holds the builder lock {path}" in message
    assert f"pid {proc.pid}" in message and "kiln build demo (test holder)" in message
    assert "Traceback" not in result.stderr
    assert _nothing_built(tmp_path / "home")
    assert not (tmp_path / "dist").exists()


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from wheelkiln.builder_lock import BuilderLock
    lock = BuilderLock(Path(sys.argv[1]))
    print(lock.inherited(), lock.try_acquire())
    """
)


def test_child_processes_know_the_lock_is_held_for_them(tmp_path: Path) -> None:
    path = tmp_path / "builder.lock"
    with BuilderLock(path):
        child = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                               text=True, check=True)
        assert child.stdout.split() == ["True", "False"]
    assert "KILN_BUILDER_LOCK" not in os.environ
    child = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                           text=True, check=True)
    assert child.stdout.split() == ["False", "True"]


def test_a_stale_inherited_marker_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "builder.lock"
    monkeypatch.setenv("KILN_BUILDER_LOCK", f"999999:{path}")
    assert not BuilderLock(path).inherited()


def test_an_unwritable_kiln_home_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KILN_HOME", str(blocker / "home"))
    with pytest.raises(KilnError, match="Cannot open the builder lock") as caught:
        BuilderLock().try_acquire()
    assert str(blocker / "home" / "builder.lock") in caught.value.message
    assert caught.value.hint == "Set KILN_HOME to a writable directory."
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KILN_STATE_HOME", str(blocker / "state"))
    with pytest.raises(KilnError, match="Cannot open the builder lock") as caught:
        BuilderLock().try_acquire()
    assert caught.value.hint == "Set KILN_STATE_HOME to a writable directory."
    home_lock = BuilderLock(tmp_path / "home" / "builder.lock")
    assert home_lock.try_acquire()  # the refused lock kept nothing
    home_lock.release()
