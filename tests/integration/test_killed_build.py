"""A ``kill -9`` of ``kiln build`` leaves no compile running beside the next build.

The package's in-tree build backend starts a long "compile" (``sleep``) and waits for
it, as setuptools waits for gcc. kiln runs the backend's hook process, and the backend
runs the compile: after ``kill -9`` of kiln, the hook's process dies with it
(``PR_SET_PDEATHSIG``) but its compile does not. The next ``kiln build`` in the same
``KILN_HOME`` ends it when it takes the builder lock, says so, and only then builds; its
own backend checks that nothing of the first build still runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.processes import alive, wait_until
from tests.wheels import in_tree_backend

BACKEND = textwrap.dedent(
    '''
    import os, subprocess
    from pathlib import Path

    from kiln_test_wheels import pure_wheel

    STATE = Path({state!r})


    def get_requires_for_build_wheel(config_settings=None):
        return []


    def _alive(pid):
        try:
            stat = Path(f"/proc/{{pid}}/stat").read_text()
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        pids = STATE / "pids"
        if not pids.exists():
            compile_ = subprocess.Popen(["sleep", "300"])
            (STATE / "pids.tmp").write_text(f"{{os.getpid()}} {{compile_.pid}}")
            (STATE / "pids.tmp").rename(pids)
            compile_.wait()
        else:
            first = [int(pid) for pid in pids.read_text().split()]
            (STATE / "second-saw").write_text(" ".join(
                str(pid) for pid in first if _alive(pid)))
        files = {{"orphan_demo/__init__.py": b"ANSWER = 42\\n"}}
        return pure_wheel(Path(wheel_directory), "orphan-demo", "0.1", files).name
    '''
)


def test_kill_9_of_kiln_build_leaves_no_compile_beside_the_next_build(tmp_path: Path) -> None:
    state = tmp_path / "state-of-backend"
    state.mkdir()
    in_tree_backend(tmp_path / "pkg", "orphan_backend", BACKEND.format(state=str(state)))
    recipe = tmp_path / "orphan.toml"
    recipe.write_text('name = "orphan-demo"\n[source]\npath = "pkg"\n[cache]\nbackend = "none"\n')
    home = tmp_path / "home"

    def kiln_build(state_home: str) -> subprocess.Popen[str]:
        env = {**os.environ, "KILN_HOME": str(home), "KILN_STATE_HOME": str(tmp_path / state_home)}
        env.pop("KILN_BUILDER_LOCK", None)
        return subprocess.Popen(
            [sys.executable, "-m", "wheelkiln", "build", str(recipe), "--no-wheel-cache",
             "--lock-timeout", "0", "--out", str(tmp_path / "dist")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=tmp_path,
        )

    first = kiln_build("state-1")
    try:
        # Environment creation comes first: allow for it on a loaded machine.
        wait_until(lambda: (state / "pids").exists() or first.poll() is not None,
                   "the first build started its compile", 300)
        assert first.poll() is None, first.communicate()
        backend, compile_ = map(int, (state / "pids").read_text().split())
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        # Not communicate(): the orphans this test is about still hold the pipes.
        for pipe in (first.stdout, first.stderr):
            if pipe is not None:
                pipe.close()
    try:
        time.sleep(0.5)  # the hook's process, killed with kiln, has no more say
        assert alive(compile_), "the orphan this test is about"

        second = kiln_build("state-2")  # another state home: the lock is in KILN_HOME
        _, err = second.communicate(timeout=300)
        assert second.returncode == 0, err
        shown = " ".join(err.split())
        assert "Ended 1 process(es) that an earlier build left running when it was killed" \
            in shown, err
        assert f"(pid {first.pid} on " in shown
        assert not alive(backend) and not alive(compile_)
        assert (state / "second-saw").read_text() == ""  # nothing of the first build ran
        assert list((tmp_path / "dist").glob("orphan_demo-0.1-py3-none-any.whl"))
    finally:
        for pid in (backend, compile_):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
