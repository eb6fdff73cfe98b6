"""``kiln timeline`` with traces that are not what kiln writes: each is refused by its
file and event, with exit 2, never a traceback, and the JSON it prints is strict JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import kiln_in_process
from tests.processes import within
from wheelkiln.shard.trace import Span, build_trace

EPOCH = 1_796_000_000.0


def good_trace(cell: str = "demo-cell", label: str = "build") -> dict[str, Any]:
    spans = [Span("src/a.cpp", "miss", EPOCH, 2.0), Span("src/b.cpp", "hit", EPOCH + 0.5, 0.25)]
    return build_trace(
        spans, cell=cell, kind="build", label=label, index=None, count=None,
        wall_seconds=3.0, timing="ninja log", end=EPOCH + 3.0,
    )  # fmt: skip


def kiln(argv: list[str], capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:  # fmt: skip
    return kiln_in_process(monkeypatch, capsys, [*argv])


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_trace_gives_strict_json_a_page_and_a_merged_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = write(tmp_path / "demo.build.trace.json", json.dumps(good_trace()))
    code, out, err = kiln(["timeline", str(trace), "--json", "--html", str(tmp_path / "t.html"),
                           "--out", str(tmp_path / "m.json")], capsys, monkeypatch)  # fmt: skip
    assert code == 0, err
    strict = {"parse_constant": lambda name: pytest.fail(f"{name} in the output")}
    data = json.loads(out, **strict)
    assert [(e["tu"], e["action"], e["seconds"]) for e in data["slowest_tus"]] == [
        ("src/a.cpp", "miss", 2.0), ("src/b.cpp", "hit", 0.25)
    ]
    assert data["jobs"][0]["tail_tus"] == ["src/a.cpp"]
    merged = json.loads((tmp_path / "m.json").read_text(), **strict)
    assert sum(1 for e in merged["traceEvents"] if e["ph"] == "X") == 2
    assert "src/a.cpp (miss, 2.00 s)" in (tmp_path / "t.html").read_text()


def _event(**changes: Any) -> str:
    """The good trace with its first TU event changed (a value of ... removes the key)."""
    trace = good_trace()
    event = next(e for e in trace["traceEvents"] if e["ph"] == "X")
    for key, value in changes.items():
        if value is ...:
            del event[key]
        else:
            event[key] = value
    return json.dumps(trace)


EVENT = 3
"""The first TU event's index: after the process's and two slots' names."""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_event(tid="x"), f"event {EVENT} has a tid that is not a job slot"),
        (_event(tid=-1), f"event {EVENT} has a tid that is not a job slot"),
        (_event(tid=True), f"event {EVENT} has a tid that is not a job slot"),
        (_event(cat=["x"]), f"event {EVENT} has a cat that is not a string"),
        (_event(args=["x"]), f"event {EVENT} has args that are not an object"),
        (_event(ts=True), f"event {EVENT} has a ts out of range"),
        (_event(ts=-5), f"event {EVENT} has a ts out of range"),
        (_event(ts=1e300), f"event {EVENT} has a ts out of range"),
        (_event(dur=10**200), f"event {EVENT} has a dur out of range"),
        (_event(dur=-1), f"event {EVENT} has a dur out of range"),
        (_event(dur=...), f"event {EVENT} lacks ts, dur or name"),
        (_event(name=5), f"event {EVENT} lacks ts, dur or name"),
        (_event(dur=2).replace('"dur": 2,', '"dur": Infinity,'),
         "not a readable trace (Infinity is not a number JSON allows)"),
        (_event(ts=2).replace('"ts": 2,', '"ts": NaN,'),
         "not a readable trace (NaN is not a number JSON allows)"),
        (_event(dur=2).replace('"dur": 2,', '"dur": ' + "9" * 5000 + ","),
         "not a readable trace (Exceeds the limit"),
        ('{"traceEvents": ' + "[" * 100_000, "not a readable trace (nested too deep)"),
        (_event(args={"a": [[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}),
         "nested deeper than 16 levels; not a kiln trace"),
    ],
)  # fmt: skip
def test_a_hostile_event_is_refused_by_file_and_index(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    trace = write(tmp_path / "demo.build.trace.json", text)
    for extra in (["--json"], ["--html", str(tmp_path / "t.html")],
                  ["--out", str(tmp_path / "m.json")]):  # fmt: skip
        code, out, err = kiln(["timeline", str(trace), *extra], capsys, monkeypatch)
        assert (code, out) == (2, "")
        assert f"error: {trace}: {message}" in err
        assert "Traceback" not in err
    assert not (tmp_path / "t.html").exists() and not (tmp_path / "m.json").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"start": "x"}, "otherData.start is not a number of seconds"),
        ({"end": 1e300}, "otherData.end is not a number of seconds"),
        ({"end": EPOCH - 10}, "otherData.end is before otherData.start"),
        ({"job": ["x"]}, "otherData.job is not a string"),
        ({"cell": {"a": 1}}, "otherData.cell is not a string"),
        ({"index": "1"}, "otherData.index is not a shard's index"),
    ],
)
def test_hostile_other_data_is_refused_by_file_and_key(
    change: dict[str, Any], message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    trace = good_trace()
    trace["otherData"].update(change)
    path = write(tmp_path / "demo.build.trace.json", json.dumps(trace))
    code, out, err = kiln(["timeline", str(path), "--json"], capsys, monkeypatch)
    assert (code, out) == (2, "")
    assert f"error: {path}: {message}." in err


def test_a_trace_that_is_a_fifo_or_a_link_to_dev_zero_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "fifo.trace.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.trace.json"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        with within(5):
            code, out, err = kiln(["timeline", str(path), "--json"], capsys, monkeypatch)
        assert (code, out) == (2, "")
        assert f"error: {path}: not a regular file; not a kiln trace." in err


def test_tus_of_no_width_and_no_action_are_timed_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = good_trace()
    for event in trace["traceEvents"]:
        if event["ph"] == "X":
            event["dur"] = 0
            del event["cat"]
    path = write(tmp_path / "demo.build.trace.json", json.dumps(trace))
    code, out, err = kiln(["timeline", str(path), "--json"], capsys, monkeypatch)
    assert code == 0, err
    data = json.loads(out)
    assert "tail_seconds" not in data["jobs"][0]  # no TU took time: no tail
    assert {e["action"] for e in data["slowest_tus"]} == {""}
    code, _, err = kiln(["timeline", str(path)], capsys, monkeypatch)
    assert code == 0, err
