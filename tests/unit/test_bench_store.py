"""The results store: locked, fsynced appends; a torn last line is a warning, never
fatal; a file that is not a store is refused and left untouched."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.processes import within
from wheelkiln.bench import store
from wheelkiln.errors import KilnError


def record(n: int, **extra: Any) -> dict[str, Any]:
    return {"target": "demo", "cell": "demo-py3.11-linux-x86_64", "scenario": "cold",
            "builder": "b1", "arch": "x86_64", "jobs": 2, "shards": 1, "n": n,
            "step_wall_seconds": 10.0 + n, "status": "ok", **extra}


def test_missing_and_empty_stores_have_no_records(tmp_path: Path) -> None:
    assert store.read(tmp_path / "none.jsonl") == ([], [])
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert store.read(tmp_path / "empty.jsonl") == ([], [])


def test_append_writes_one_line_per_record(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "results.jsonl"
    for n in range(3):
        store.append(record(n), path)
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 4
    records, warnings = store.read(path)
    assert [r["n"] for r in records] == [0, 1, 2]
    assert warnings == []


def test_default_path_is_under_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state"))
    store.append(record(0))
    assert (tmp_path / "state" / "results.jsonl").is_file()


def test_nan_is_refused_rather_than_written_as_invalid_json(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        store.append(record(0, step_wall_seconds=float("nan")), tmp_path / "s.jsonl")


def test_torn_last_line_is_skipped_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    for n in range(3):
        store.append(record(n), path)
    with path.open("ab") as handle:
        handle.write(json.dumps(record(3)).encode()[:25])
    records, warnings = store.read(path)
    assert [r["n"] for r in records] == [0, 1, 2]
    assert len(warnings) == 1 and "line 4" in warnings[0] and "torn" in warnings[0]
    # The next append ends the fragment first: its record survives, the fragment
    # becomes a skipped line in the middle.
    store.append(record(4), path)
    records, warnings = store.read(path)
    assert [r["n"] for r in records] == [0, 1, 2, 4]
    assert len(warnings) == 1 and "line 4" in warnings[0]


def test_a_whole_record_without_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(record(0)) + "\n" + json.dumps(record(1)))
    records, warnings = store.read(path)
    assert [r["n"] for r in records] == [0, 1]
    assert "line 2" in warnings[0]


def test_invalid_lines_in_the_middle_warn_and_the_rest_survive(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join([
        json.dumps(record(0)), "{not json", "[1, 2]", '{"other": "object"}', "",
        json.dumps(record(1)),
    ]) + "\n")
    records, warnings = store.read(path)
    assert [r["n"] for r in records] == [0, 1]
    assert [w.split(": ")[1] for w in warnings] == ["line 2", "line 3", "line 4"]
    assert "not a bench record" in warnings[2]


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)) * 8,  # binary garbage
        b"hello\nworld\n",  # text, not JSON lines
        b'{"name": "x"}\n{"name": "y"}\n',  # JSON lines, but not bench records
        b"\x89PNG\r\n\x1a\n\x00\x00",
    ],
)
def test_a_file_that_is_not_a_store_is_refused_and_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(content)
    with pytest.raises(KilnError) as caught:
        store.read(path)
    assert "corrupt store" in caught.value.message
    assert str(path) in caught.value.message
    assert caught.value.hint and "untouched" in caught.value.hint
    assert path.read_bytes() == content


def test_a_store_holding_only_a_torn_first_record_is_not_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(json.dumps(record(0)).encode()[:30])
    records, warnings = store.read(path)
    assert records == [] and "torn" in warnings[0]


def test_a_directory_as_store_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match="is a directory"):
        store.read(tmp_path)
    with pytest.raises(KilnError, match="is a directory"):
        store.append(record(0), tmp_path)


WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    from wheelkiln.bench import store
    path = sys.argv[1]
    for n in range(5):
        store.append({"target": "demo", "scenario": "cold", "n": n}, __import__("pathlib").Path(path))
    # Now die in the middle of a line, as a killed writer does.
    line = json.dumps({"target": "demo", "scenario": "cold", "n": 5, "pad": "x" * 5000})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, line[:2000].encode())
    os.fsync(fd)
    print("torn", flush=True)
    time.sleep(60)
    """
)


def test_killing_a_writer_mid_append_keeps_every_earlier_record(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "torn"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()  # wait() leaves the pipe open
    records, warnings = store.read(path)
    assert [r["n"] for r in records] == [0, 1, 2, 3, 4]
    assert len(warnings) == 1 and "line 6" in warnings[0]


APPENDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from wheelkiln.bench import store
    for n in range(40):
        store.append({"target": "demo", "scenario": "cold", "writer": sys.argv[2], "n": n,
                      "pad": "y" * 20000}, Path(sys.argv[1]))
    """
)


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(i)]) for i in range(4)]
    assert all(proc.wait() == 0 for proc in procs)
    records, warnings = store.read(path)
    assert warnings == []
    assert len(records) == 160
    for writer in map(str, range(4)):
        assert [r["n"] for r in records if r["writer"] == writer] == list(range(40))


def test_bench_record_adds_the_bench_fields() -> None:
    build = {"schema": 1, "kind": "bench", "target": "demo", "builder": "host", "wall_seconds": 3}
    made = store.bench_record(
        build, run_id="r1", repeat=0, scenario="warm", hot_kind=None, jobs=4, shards=1,
        namespace="bench-r1-1", source_date_epoch=1700086400, step_wall_seconds=5.12345,
        user_seconds=1.0, sys_seconds=0.5, problems=["1 of 2 missed"], builder="farm-1",
    )
    assert made["bench_schema"] == store.BENCH_SCHEMA
    assert made["status"] == "failed" and made["problems"] == ["1 of 2 missed"]
    assert made["step_wall_seconds"] == 5.123 and made["wall_seconds"] == 3
    assert made["builder"] == "farm-1" and made["jobs"] == 4 and made["shards"] == 1
    assert build["builder"] == "host"  # the build record is not changed in place


def _in_time(call: Any, seconds: float = 20) -> Any:
    """``call()``, failing the test (instead of hanging it) when it does not return."""
    with within(seconds):
        return call()


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "a link to /dev/zero"])
def test_only_a_regular_file_is_a_store(tmp_path: Path, kind: str) -> None:
    import os

    path = tmp_path / "results.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path = Path("/dev/zero")
    else:
        path.symlink_to("/dev/zero")
    message = (f"The results store {path} is not a regular file (a fifo, a device or a "
               "socket).")
    for call in (lambda: store.read(path), lambda: store.append(record(0), path)):
        with pytest.raises(KilnError, match="is not a regular file") as caught:
            _in_time(call)
        assert caught.value.message == message and caught.value.exit_code == 2


def test_records_with_a_wall_a_median_cannot_use_are_skipped_by_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    lines = [record(0), record(1, step_wall_seconds=-5.0), record(2, step_wall_seconds=0.0),
             record(3, step_wall_seconds=None, wall_seconds=-1), record(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"x": 1}\n'
                    + json.dumps(record(7, step_wall_seconds=-0.5)) + "\n")
    records, warnings = store.read(path)
    # 0.0 is a step shorter than the record's millisecond: a median may use it.
    assert [r["n"] for r in records] == [0, 2, 4]
    assert warnings[-3:] == [
        f"{path}: line {n}: wall time {wall} s is not a finite number of seconds at or above "
        "0, skipped" for n, wall in ((2, -5.0), (4, -1.0), (7, -0.5))]
    # The fast path (every line a record) names the lines too.
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    records, warnings = store.read(path)
    assert [r["n"] for r in records] == [0, 2, 4] and len(warnings) == 2
    assert warnings[0] == (f"{path}: line 2: wall time -5.0 s is not a finite number of "
                           "seconds at or above 0, skipped")
