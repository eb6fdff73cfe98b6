"""The CMake hook that puts the seat wrapper in front of CUDA device links, run by a real
CMake: the rule variables of the device link get the wrapper in front, once, whether
CUDA is enabled in project() or after it. (CMake has no launcher for device links.)"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from wheelkiln.builder.cmake_id import identification_key
from wheelkiln.builder.toolchain import Launch, toolchain_environment

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake"),
]

RULE = "<CMAKE_CUDA_COMPILER> <FLAGS> -shared -dlink <OBJECTS> -o <TARGET>"


@pytest.fixture(autouse=True)
def _own_kiln_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The front scripts live under $KILN_HOME/bin/<digest>/: never the user's home.
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "kiln-home"))


def _seat(tmp_path: Path) -> Path:
    (seat,) = (tmp_path / "kiln-home" / "bin").glob("*/kiln-seat")
    return seat


def _configure(tmp_path: Path, body: str) -> list[str]:
    env = toolchain_environment(Launch(None, seat_wrapper=True), "cmake", tmp_path / "kiln-bin")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "CMakeLists.txt").write_text(body)
    result = subprocess.run(
        ["cmake", *shlex.split(env["CMAKE_ARGS"]), "-S", tmp_path / "project", "-B", tmp_path / "build"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line.removeprefix("rule=") for line in result.stderr.splitlines() if line.startswith("rule=")]


def test_rule_set_before_the_hook_runs_gets_the_wrapper_once(tmp_path: Path) -> None:
    lines = _configure(
        tmp_path,
        f'cmake_minimum_required(VERSION 3.21)\nset(CMAKE_CUDA_DEVICE_LINK_LIBRARY "{RULE}")\n'
        "project(p LANGUAGES NONE)\nproject(p LANGUAGES NONE)\n"  # the hook runs twice
        'message("rule=${CMAKE_CUDA_DEVICE_LINK_LIBRARY}")\n',
    )
    assert lines == [f"{_seat(tmp_path)} {RULE}"]


def test_rule_defined_after_project_is_wrapped_at_the_end_of_the_directory(tmp_path: Path) -> None:
    lines = _configure(
        tmp_path,
        "cmake_minimum_required(VERSION 3.21)\nproject(p LANGUAGES NONE)\n"
        f'set(CMAKE_CUDA_DEVICE_LINK_EXECUTABLE "{RULE}")\n'
        'function(show)\n  message("rule=${CMAKE_CUDA_DEVICE_LINK_EXECUTABLE}")\nendfunction()\n'
        "cmake_language(DEFER CALL show)\n",
    )
    assert lines == [f"{_seat(tmp_path)} {RULE}"]


def test_a_project_include_the_build_was_given_still_runs(tmp_path: Path) -> None:
    """A recipe's ``CMAKE_ARGS=-DCMAKE_PROJECT_INCLUDE=...`` would lose to the hook's
    (the last -D wins): the hook includes it instead, once per project(), before its own
    work, and the rest of the build's arguments stay as they were."""
    from wheelkiln.builder.toolchain import merge_cmake_args

    users = tmp_path / "user include.cmake"
    users.write_text('message("user=${PROJECT_NAME}")\n')
    env = toolchain_environment(Launch(None, seat_wrapper=True), "cmake", tmp_path / "kiln-bin")
    merged = merge_cmake_args(
        f"-DFOO=1 -D CMAKE_PROJECT_INCLUDE:FILEPATH='{users}' -D BAR=2", env["CMAKE_ARGS"]
    )
    assert shlex.split(merged)[:4] == [
        "-DFOO=1", f"-DKILN_USER_PROJECT_INCLUDE={users}", "-D", "BAR=2"
    ]
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(first LANGUAGES NONE)\n"
        f'set(CMAKE_CUDA_DEVICE_LINK_LIBRARY "{RULE}")\nproject(second LANGUAGES NONE)\n'
        'message("rule=${CMAKE_CUDA_DEVICE_LINK_LIBRARY} foo=${FOO} bar=${BAR}")\n'
    )
    result = subprocess.run(
        ["cmake", *shlex.split(merged), "-S", tmp_path / "project", "-B", tmp_path / "build"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.startswith(("user=", "rule="))]
    assert lines == ["user=first", "user=second", f"rule={_seat(tmp_path)} {RULE} foo=1 bar=2"]
    assert merge_cmake_args("", env["CMAKE_ARGS"]) == env["CMAKE_ARGS"]


def test_shard_jobs_in_other_directories_share_one_kept_identification(tmp_path: Path) -> None:
    """The hook is written where the fronts are, named by its content: ``CMAKE_ARGS``,
    part of the key of CMake's kept identification and check results, names no job's
    directory, so every shard job of a cell reuses what the first one kept."""
    envs = [
        toolchain_environment(Launch(None, seat_wrapper=True), "cmake", tmp_path / job / "kiln-bin")
        for job in ("shard-0", "shard-1")
    ]
    assert envs[0]["CMAKE_ARGS"] == envs[1]["CMAKE_ARGS"]
    assert "shard-0" not in envs[0]["CMAKE_ARGS"]
    tree = tmp_path / "project"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.21)\nproject(p CXX)\n")
    keys = {
        identification_key(shutil.which("cmake") or "cmake", "3.25.1", tree, {**os.environ, **env}, [])
        for env in envs
    }
    assert len(keys) == 1
