"""Compiling ahead (shard/ahead.py): one claim per TU, taken by whoever starts it; the
queue handed out from its end once each; a call whose TU is being compiled ahead
compiles the next one meanwhile and waits only when none is left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wheelkiln.shard import ahead, wrapper


def test_the_wrapper_and_the_queue_name_one_child_variable() -> None:
    assert wrapper.AHEAD_CHILD == ahead.CHILD


def test_a_claim_is_taken_once_and_over_when_its_holder_lets_go(tmp_path: Path) -> None:
    (tmp_path / "claims").mkdir()
    held = ahead.claim(str(tmp_path), "/b/x.o")
    assert held is not None
    assert ahead.claim(str(tmp_path), "/b/x.o") is None
    assert not ahead._compile_over(str(tmp_path), "/b/x.o", wait=False)
    os.close(held)
    assert ahead._compile_over(str(tmp_path), "/b/x.o", wait=False)
    assert ahead.claim(str(tmp_path), "/b/x.o") is None  # compiled once: never again
    assert sorted(p.name for p in (tmp_path / "claims").iterdir()) == [
        ahead._claim_path(str(tmp_path), "/b/x.o").rsplit("/", 1)[1]
    ]  # no staged file left behind


def write_queue(directory: Path, *items: tuple[str, str]) -> None:
    """A queue as build_queue leaves it: (output, command) per line, run in
    *directory*."""
    (directory / "queue").write_text(
        "".join("\0".join([output, str(directory), command]) + "\n" for output, command in items)
    )


def never(_words: list[str], _cwd: str) -> str | None:
    raise AssertionError("the queue is built already")


def test_the_queue_is_handed_out_in_order_each_tu_once(tmp_path: Path) -> None:
    write_queue(tmp_path, ("/b/c.o", "true c"), ("/b/b.o", "true b"), ("/b/a.o", "true a"))
    (tmp_path / "claims").mkdir()
    started_by_ninja = ahead.claim(str(tmp_path), "/b/b.o")
    first = ahead.take(str(tmp_path), never)
    second = ahead.take(str(tmp_path), never)
    assert first is not None and second is not None
    assert (first[2], second[2]) == ("true c", "true a")  # b was ninja's
    assert (tmp_path / "exhausted").is_file()
    assert ahead.take(str(tmp_path), never) is None
    for fd in (first[0], second[0], started_by_ninja):
        assert fd is not None
        os.close(fd)


def holding(directory: Path, then: str) -> subprocess.Popen[str]:
    """Another process that holds /b/a.o's claim (as its compile ahead would) while it
    runs the Python code *then*; started once it holds it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, time; from wheelkiln.shard import ahead; "
         f"fd = ahead.claim({str(directory)!r}, '/b/a.o'); print(fd is not None, flush=True)\n"
         + then],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "True"
    return holder


def test_a_call_whose_tu_is_compiled_ahead_compiles_the_next_meanwhile(tmp_path: Path) -> None:
    (tmp_path / "claims").mkdir()
    marker = tmp_path / "b-compiled"
    # Another process compiles a.o ahead: it holds a.o's claim until b.o has been
    # compiled, so a.o's call can only get past its wait by compiling b.o itself first.
    holder = holding(
        tmp_path,
        "deadline = time.monotonic() + 60\n"
        f"while not os.path.exists({str(marker)!r}) and time.monotonic() < deadline: "
        "time.sleep(0.01)",
    )
    with holder:
        write_queue(
            tmp_path, ("/b/b.o", f'test "$KILN_AHEAD_CHILD" = 1 && touch {marker}')
        )
        result, _waited = ahead.before_compile(str(tmp_path), "/b/a.o", never)
        assert holder.wait(timeout=60) == 0
    assert result is None  # a.o was compiled: ninja's call of it is a cache hit
    assert marker.is_file()  # b.o, compiled ahead meanwhile, as an ahead compile
    assert (tmp_path / "exhausted").is_file()
    assert ahead.claim(str(tmp_path), "/b/b.o") is None


def test_the_queue_puts_the_longest_known_tus_first_then_ninjas_last(tmp_path: Path) -> None:
    """From a real ninja's command list: this shard's compiles (a, c, d, e; b is another
    shard's), the ones this builder timed longest first, then the rest, ninja's last
    first, each as ninja would run it."""
    import shutil

    ninja = shutil.which("ninja")
    assert ninja is not None, "ninja is on every builder"
    seat = tmp_path / "bin" / "kiln-seat"
    edges = "".join(f"build {name}.o: cc {name}.c\n" for name in "abcde")
    (tmp_path / "build.ninja").write_text(
        f"rule cc\n  command = {seat} g++ -c $in -o $out\n{edges}"
        "rule link\n  command = g++ $in -o $out\n"
        "build app: link a.o b.o c.o d.o e.o\ndefault app\n"
    )

    def owned(words: list[str], cwd: str) -> tuple[str, str | None] | None:
        assert words[0] == str(seat) and cwd == str(tmp_path)
        source = words[3]
        return None if source == "b.c" else (f"{cwd}/{words[-1]}", f"src/{source}")

    lines = ahead.build_queue(ninja, str(tmp_path), owned, {"src/c.c": 2.0, "src/a.c": 9.5})
    assert [line.split("\0")[0].rsplit("/", 1)[1] for line in lines] == [
        "a.o", "c.o", "e.o", "d.o"
    ]  # fmt: skip
    assert lines[0].split("\0") == [f"{tmp_path}/a.o", str(tmp_path), f"{seat} g++ -c a.c -o a.o"]


def test_what_a_builder_timed_is_kept_per_cell_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wheelkiln.shard.balance import TU_SECONDS_DIR, recall_seconds, remember_seconds

    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path))
    assert recall_seconds("pkg-py3.11-linux-x86_64") == {}
    remember_seconds("pkg-py3.11-linux-x86_64", {"src/a.cpp": 3.25, "src/b.cpp": 1.0})
    remember_seconds("pkg-py3.11-linux-x86_64", {"src/a.cpp": 4.5})  # the last time wins
    assert recall_seconds("pkg-py3.11-linux-x86_64") == {"src/a.cpp": 4.5, "src/b.cpp": 1.0}
    (tmp_path / TU_SECONDS_DIR / "pkg-py3.11-linux-x86_64.json").write_text("{torn")
    assert recall_seconds("pkg-py3.11-linux-x86_64") == {}  # it only orders work
    with pytest.raises(ValueError, match="not a cell id"):
        remember_seconds("../elsewhere", {"src/a.cpp": 1.0})
    assert recall_seconds("../elsewhere") == {}
    ahead.write_seconds(str(tmp_path / "ahead"), {"src/a.cpp": 4.5, "src/odd\tname.cpp": 1.0})
    assert ahead.read_seconds(str(tmp_path / "ahead")) == {"src/a.cpp": 4.5}


def test_with_nothing_left_to_compile_a_call_waits_and_says_how_long(tmp_path: Path) -> None:
    (tmp_path / "claims").mkdir()
    write_queue(tmp_path)  # every TU taken
    holder = holding(tmp_path, "time.sleep(0.5)")
    with holder:
        result, waited = ahead.before_compile(str(tmp_path), "/b/a.o", never)
        assert holder.wait(timeout=60) == 0
    assert result is None
    assert 0 < waited < 60
