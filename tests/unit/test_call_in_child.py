"""A library function called in a worker process (how the local executor runs a shard
job): its value comes back typed, a KilnError comes back as itself with its exit code,
and a worker killed by a signal is reported with that signal, not as a value."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from wheelkiln import run
from wheelkiln.errors import ToolNotFoundError


def test_a_call_in_a_child_returns_its_value_raises_typed_or_dies_by_its_signal() -> None:
    done = run.call_in_child(["test"], run.exit_description, -9)
    assert done.returned and done.value == "killed by SIGKILL"
    assert done.completed.returncode == 0 and done.error is None

    failed = run.call_in_child(["test"], run.find_executable, "kiln-no-such-tool")
    assert isinstance(failed.error, ToolNotFoundError) and not failed.returned
    assert failed.error.message.startswith("'kiln-no-such-tool' was not found on PATH")
    assert failed.completed.returncode == ToolNotFoundError.exit_code and failed.value is None
    assert "error: 'kiln-no-such-tool' was not found" in failed.completed.output

    killed = run.call_in_child(["test"], signal.raise_signal, signal.SIGKILL)
    assert killed.completed.returncode == -signal.SIGKILL
    assert killed.value is None and killed.error is None and not killed.returned


def test_call_directories_of_killed_kiln_processes_are_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kiln killed with SIGKILL leaves its call directory; the next call removes it,
    and nothing of a live process or of another host."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    abandoned = tmp_path / f"kiln-call-{host}.{gone.pid}-abc"
    live = tmp_path / f"kiln-call-{host}.{os.getpid()}-def"
    elsewhere = tmp_path / f"kiln-call-other-host.{gone.pid}-ghi"
    for scratch in (abandoned, live, elsewhere):
        scratch.mkdir()
        (scratch / "call.pickle").write_bytes(b"x")
    done = run.call_in_child(["test"], run.exit_description, 0)
    assert done.value == run.exit_description(0)
    assert not abandoned.exists()
    assert live.is_dir() and elsewhere.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, elsewhere.name])
