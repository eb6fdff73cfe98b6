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

from wheelkiln.bench.commands import bench_group
from wheelkiln.bench.lock import BuilderLock, describe
from wheelkiln.errors import KilnError, LockBusyError

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from wheelkiln.bench.lock import BuilderLock
    lock = BuilderLock(Path(sys.argv[1]), command="kiln build demo (test holder)")
    assert lock.try_acquire()
    print("held", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def holder_process(tmp_path: Path):
    """A separate process holding the lock at ``tmp_path/state/builder.lock``."""
    path = tmp_path / "state" / "builder.lock"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    yield proc, path
    if proc.poll() is None:
        proc.kill()
    proc.wait()


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


def test_bench_while_the_lock_is_held_exits_0_naming_the_holder(
    holder_process, tmp_path: Path
) -> None:
    proc, _ = holder_process
    (tmp_path / "pkg").mkdir()
    recipe = tmp_path / "demo.toml"
    recipe.write_text('name = "demo"\n[source]\npath = "pkg"\n')
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
    assert not (tmp_path / "home").exists()  # nothing was built


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from wheelkiln.bench.lock import BuilderLock
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


def test_an_unwritable_state_home_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(KilnError, match="Cannot open the builder lock"):
        BuilderLock(blocker / "builder.lock").try_acquire()
