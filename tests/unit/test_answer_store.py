"""The answers builds keep about this machine (CMake's identification, meson's and the
compilers' answers): a prune removes what no build read for its age, never an entry a
running build holds, and follows no symlink."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import Kiln
from wheelkiln.builder.answer_store import AnswerStore
from wheelkiln.builder.meson_version import meson_front

DAY = 86400.0

HOLD = """
import sys
from pathlib import Path
from wheelkiln import holds
holds.hold(Path(sys.argv[1]), sys.argv[2])
print("held", flush=True)
sys.stdin.readline()  # holds it until told to end
"""


def _age(path: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(path, (then, then), follow_symlinks=False)


def _entry(path: Path, days: float, *, tree: bool = True) -> Path:
    if tree:
        (path / "checks-1").mkdir(parents=True)
        (path / "CMakeCXXCompiler.cmake").write_text("set(CMAKE_CXX_COMPILER /usr/bin/g++)\n")
        (path / "checks-1" / "cache.txt").write_text("HAS_FLTO_AUTO:INTERNAL=1\n")
        for inside in (path / "checks-1" / "cache.txt", path / "checks-1", path / "CMakeCXXCompiler.cmake"):
            _age(inside, days)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("1.12.1\n")
    _age(path, days)
    return path


def test_prune_keeps_what_a_build_holds_or_read_lately_and_removes_the_rest(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old_id = _entry(home / "cmake-id" / "a1", 3)
    held_id = _entry(home / "cmake-id" / "b2", 3)
    old_version = _entry(home / "meson-version" / "c3", 3, tree=False)
    recent = _entry(home / "compiler-answers" / "d4", 0)
    leftover = _entry(home / "compiler-answers" / ".d4.4242", 3)
    outside = _entry(tmp_path / "elsewhere", 3)
    (home / "cmake-id" / "e5").symlink_to(outside, target_is_directory=True)
    store = AnswerStore(home)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home / "cmake-id"), "b2"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        listed = {(e.store, e.name): e for e in store.kept()}
        assert sorted(listed) == [("cmake-id", "a1"), ("cmake-id", "b2"),
                                  ("compiler-answers", ".d4.4242"), ("compiler-answers", "d4"),
                                  ("meson-version", "c3")]  # fmt: skip
        assert listed["cmake-id", "a1"].kind == "CMake identification"
        assert listed["compiler-answers", ".d4.4242"].kind == "leftover"
        assert listed["cmake-id", "a1"].size == len("set(CMAKE_CXX_COMPILER /usr/bin/g++)\n") + len(
            "HAS_FLTO_AUTO:INTERNAL=1\n")
        # The holder marked b2 used now, as a build does when it reads it.
        assert time.time() - listed["cmake-id", "b2"].last_used < 60
        _age(home / "cmake-id" / "b2.inuse", 3)  # a build that started 3 days ago

        dry = {r.entry.name: r.outcome for r in store.prune(DAY, dry_run=True)}
        assert dry == {"a1": "would remove", "b2": "in use", "c3": "would remove",
                       ".d4.4242": "would remove", "d4": "recent"}  # fmt: skip
        assert old_id.is_dir() and old_version.is_file() and leftover.is_dir()
        assert not (home / "cmake-id" / "a1.inuse").exists(), "a dry run writes nothing"

        done = {r.entry.name: r.outcome for r in store.prune(DAY)}
        assert done == {"a1": "removed", "b2": "in use", "c3": "removed",
                        ".d4.4242": "removed", "d4": "recent"}  # fmt: skip
        assert not old_id.exists() and not old_version.exists() and not leftover.exists()
        assert held_id.is_dir() and recent.is_dir()
        assert (outside / "checks-1" / "cache.txt").is_file(), "a symlink is not followed"
        assert (home / "cmake-id" / "e5").is_symlink()
        assert not [p for p in home.rglob(".pruned-*")], "nothing left aside"
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
        holder.stdout.close()
    assert {r.entry.name: r.outcome for r in store.prune(DAY)} == {"b2": "removed", "d4": "recent"}


def test_a_build_marks_the_answer_it_uses(tmp_path: Path) -> None:
    """meson's version, kept once and used again: each use marks it, and this process
    holds it until it ends."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    meson = bin_dir / "meson"
    meson.write_text("#!/bin/sh\necho 1.12.1\n")
    meson.chmod(0o755)
    store = tmp_path / "home" / "meson-version"
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    assert meson_front(environ, store, tmp_path / "fronts") is not None
    [entry] = AnswerStore(tmp_path / "home").kept()
    _age(store / f"{entry.name}.inuse", 3)
    assert meson_front(environ, store, tmp_path / "fronts") is not None
    [entry] = AnswerStore(tmp_path / "home").kept()
    assert time.time() - entry.last_used < 60
    _age(store / f"{entry.name}.inuse", 3)
    [result] = AnswerStore(tmp_path / "home").prune(DAY)
    assert result.outcome == "in use", "this process holds what it used"


def test_the_command_lists_and_prunes(tmp_path: Path) -> None:
    kiln = Kiln(tmp_path / "home", tmp_path / "state")
    _entry(tmp_path / "home" / "cmake-id" / "a1", 3)
    _entry(tmp_path / "home" / "dpkg-architecture" / "f6", 0, tree=False)
    listed = json.loads(kiln("answers", "list", "--json").stdout)
    assert [(e["store"], e["name"]) for e in listed] == [("cmake-id", "a1"), ("dpkg-architecture", "f6")]
    done = kiln("answers", "prune", "--unused-for", "2d")
    assert "removed: a1 (CMake identification)" in done.stderr + done.stdout
    assert "removed 1 of 2 entries" in done.stderr + done.stdout
    assert "kept 1 used in the last 2 d." in done.stderr + done.stdout
    assert json.loads(kiln("answers", "list", "--json").stdout)[0]["name"] == "f6"
    bad = kiln("answers", "prune", "--unused-for", "soon", check=False)
    assert bad.returncode == 2 and "'soon' is not an age" in bad.stderr
