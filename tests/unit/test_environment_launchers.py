"""An environment's scripts start the interpreter beside the path they are called by.

Builds call an environment's scripts through the job's view of it (a link inside the
job's directory), so that what they print is inside ccache's base directory. uv's
relocatable scripts resolved that link (``realpath``), and pip's named the environment's
own path: the script's Python then ran from ``$KILN_HOME/envs/<key>``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wheelkiln.builder.environment import LAUNCHERS_MARKER, launch_where_called

PRINT_PREFIX = "import sys\nprint(sys.prefix)\n"
UV_RELOCATABLE = (
    "#!/bin/sh\n"
    "'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")\"/'python' \"$0\" \"$@\"\n"
    "' '''\n"
)


def _venv(root: Path) -> Path:
    """A real venv (no pip) with three scripts: uv's relocatable one, pip's with the
    venv's own interpreter in its shebang, and one for another interpreter."""
    env = root / "envs" / "0123abcd"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    scripts = {
        "uv-tool": UV_RELOCATABLE + PRINT_PREFIX,
        "pip-tool": f"#!{env / 'bin' / 'python'}\n" + PRINT_PREFIX,
        "other-tool": "#!/usr/bin/env python3\n" + PRINT_PREFIX,
    }
    for name, text in scripts.items():
        (env / "bin" / name).write_text(text)
        (env / "bin" / name).chmod(0o755)
    return env


def test_scripts_run_their_environment_as_seen_through_the_view(tmp_path: Path) -> None:
    env = _venv(tmp_path)
    view = tmp_path / "work" / ".envs" / env.name
    view.parent.mkdir(parents=True)
    view.symlink_to(env, target_is_directory=True)

    def prefix(name: str) -> str:
        done = subprocess.run([str(view / "bin" / name)], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    # before: both of the environment's own kinds of script run Python from its home path
    assert prefix("uv-tool") == prefix("pip-tool") == str(env)
    launch_where_called(env)
    assert prefix("uv-tool") == prefix("pip-tool") == str(view)
    assert os.access(env / "bin" / "uv-tool", os.X_OK)
    assert (env / "bin" / "other-tool").read_text().startswith("#!/usr/bin/env python3\n")
    assert (env / LAUNCHERS_MARKER).is_file()
    # called by the environment's own path, a script still runs its own environment
    done = subprocess.run([str(env / "bin" / "pip-tool")], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(env)


def test_links_and_fifos_in_bin_are_left_alone_and_a_second_call_reads_nothing(tmp_path: Path) -> None:
    env = _venv(tmp_path)
    outside = tmp_path / "outside-script"
    outside.write_text(UV_RELOCATABLE + PRINT_PREFIX)
    (env / "bin" / "linked-tool").symlink_to(outside)
    os.mkfifo(env / "bin" / "a-fifo")
    launch_where_called(env)
    assert outside.read_text() == UV_RELOCATABLE + PRINT_PREFIX
    assert (env / "bin" / "linked-tool").is_symlink()
    (env / "bin" / "uv-tool").write_text(UV_RELOCATABLE + PRINT_PREFIX)  # after the marker
    launch_where_called(env)
    assert (env / "bin" / "uv-tool").read_text() == UV_RELOCATABLE + PRINT_PREFIX
