"""Per-TU traces from a real ninja build, checked against the trace-event format, and
kiln timeline merging a shard's and a link job's traces of one cell."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import Kiln
from wheelkiln.cache.backend import TUOutcome
from wheelkiln.cells import shard_stem
from wheelkiln.shard.trace import build_trace, job_spans, trace_path
from wheelkiln.shard.wrapper import encode_record

# Chrome's trace-event format, JSON object form: the parts Perfetto reads from kiln.
TRACE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
        "traceEvents": {
            "type": "array",
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["ph", "name", "ts", "dur", "pid", "tid"],
                        "properties": {
                            "ph": {"const": "X"},
                            "name": {"type": "string", "minLength": 1},
                            "cat": {"type": "string"},
                            "ts": {"type": "number"},
                            "dur": {"type": "number", "minimum": 0},
                            "pid": {"type": "integer"},
                            "tid": {"type": "integer"},
                            "args": {"type": "object"},
                        },
                    },
                    {
                        "type": "object",
                        "required": ["ph", "name", "pid", "args"],
                        "properties": {
                            "ph": {"const": "M"},
                            "name": {
                                "enum": [
                                    "process_name",
                                    "thread_name",
                                    "process_sort_index",
                                    "thread_sort_index",
                                ]
                            },
                            "pid": {"type": "integer"},
                            "tid": {"type": "integer"},
                            "args": {"type": "object"},
                        },
                    },
                ]
            },
        },
    },
}

TUS = ["src/a.cpp", "src/b.cpp", "src/c.cpp", "gen/d.cpp"]
CMAKE = """\
cmake_minimum_required(VERSION 3.20)
project(t LANGUAGES CXX)
add_library(t SHARED src/a.cpp src/b.cpp src/c.cpp gen/d.cpp)
"""


@pytest.fixture(scope="module")
def ninja_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job directory as kiln lays it out (src/, build/), built once by CMake + ninja."""
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("cmake and ninja are needed")
    job = tmp_path_factory.mktemp("job")
    tree = job / "src"
    for number, key in enumerate(TUS):
        (tree / key).parent.mkdir(parents=True, exist_ok=True)
        (tree / key).write_text(f"int f{number}(int x) {{ return x * {number + 2}; }}\n")
    (tree / "CMakeLists.txt").write_text(CMAKE)
    build = job / "build"
    for argv in (
        [
            "cmake",
            "-S",
            str(tree),
            "-B",
            str(build),
            "-G",
            "Ninja",
            "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        ],
        ["cmake", "--build", str(build), "-j", "2"],
    ):
        subprocess.run(argv, check=True, capture_output=True)
    return job


def shard_trace(job: Path, index: int) -> dict[str, Any]:
    log = job / "wrapper.jsonl"
    log.write_bytes(
        b"".join(
            encode_record(
                {
                    "tu": key,
                    "action": "compile" if n % 2 == index else "stub",
                    "seconds": 0.1,
                    "exit": 0,
                }
            )
            for n, key in enumerate(TUS)
        )
    )
    spans, timing = job_spans(job, [], shard=True)
    assert timing == "ninja log"
    return build_trace(
        spans,
        cell="t-cell",
        kind="shard",
        label=f"shard {index + 1}/2",
        index=index,
        count=2,
        wall_seconds=3.0,
        timing=timing,
    )


@pytest.mark.compile
def test_a_shard_trace_is_valid_trace_events_with_one_event_per_tu(ninja_job: Path) -> None:
    trace = shard_trace(ninja_job, 0)
    jsonschema.validate(trace, TRACE_EVENT_SCHEMA)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["name"] for e in complete) == sorted(TUS)  # one event per TU
    assert {e["name"]: e["cat"] for e in complete} == {
        "src/a.cpp": "compile",
        "src/b.cpp": "stub",
        "src/c.cpp": "compile",
        "gen/d.cpp": "stub",
    }
    assert {e["args"]["shard"] for e in complete} == {"shard 1/2"}
    # Concurrent compiles (-j 2) sit on separate slots; no slot runs two at once.
    by_slot: dict[int, list[tuple[int, int]]] = {}
    for event in complete:
        by_slot.setdefault(event["tid"], []).append((event["ts"], event["ts"] + event["dur"]))
    for spans in by_slot.values():
        spans.sort()
        assert all(
            end <= next_start + 1 for (_s, end), (next_start, _e) in itertools.pairwise(spans)
        )
    # The ninja log's times are anchored to the wall clock by the objects' mtimes.
    first = min(e["ts"] for e in complete) / 1e6
    assert abs(first - (ninja_job / "build" / "build.ninja").stat().st_mtime) < 120


@pytest.mark.compile
def test_a_link_trace_labels_hits_and_misses(ninja_job: Path) -> None:
    outcomes = [TUOutcome(f"../src/{key}", hit=key != "src/b.cpp") for key in TUS]
    spans, _timing = job_spans(ninja_job, outcomes, shard=False)
    assert {s.tu: s.action for s in spans} == {
        "src/a.cpp": "hit",
        "src/b.cpp": "miss",
        "src/c.cpp": "hit",
        "gen/d.cpp": "hit",
    }


@pytest.mark.compile
def test_kiln_timeline_merges_one_cells_jobs_and_marks_the_critical_path(
    ninja_job: Path, tmp_path: Path, kiln: Kiln
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for index in (0, 1):
        trace = shard_trace(ninja_job, index)
        trace["otherData"]["end"] = trace["otherData"]["start"] + 3.0 + index  # shard 2 slower
        (out / f"{shard_stem('t-cell', index, 2)}.trace.json").write_text(json.dumps(trace))
    spans, timing = job_spans(ninja_job, [], shard=False)
    link = build_trace(
        spans,
        cell="t-cell",
        kind="link",
        label="link",
        index=None,
        count=None,
        wall_seconds=2.0,
        timing=timing,
    )
    record = out / "t-cell.link.json"
    record.write_text("{}")
    trace_path(record).write_text(json.dumps(link))
    merged = tmp_path / "merged.json"
    page = tmp_path / "timeline.html"
    result = kiln(
        "timeline",
        out / f"{shard_stem('t-cell', 0, 2)}.trace.json",
        out / f"{shard_stem('t-cell', 1, 2)}.trace.json",
        record,
        "--out",
        merged,
        "--html",
        page,
        "--json",
    )
    data = json.loads(result.stdout)
    assert data["critical_path"] == ["shard 2/2", "link"]
    assert [(j["job"], j["offset_seconds"], j["tus"]) for j in data["jobs"]] == [
        ("shard 1/2", 0.0, 4),
        ("shard 2/2", 0.0, 4),
        ("link", data["jobs"][1]["seconds"], 4),
    ]
    assert data["critical_path_seconds"] == pytest.approx(
        data["jobs"][1]["seconds"] + data["jobs"][2]["seconds"]
    )
    for job in data["jobs"]:  # each job's tail, from its own TUs' times
        assert 0 <= job["tail_seconds"] <= job["compile_seconds"]
        assert set(job["tail_tus"]) <= set(TUS)
    assert len(data["slowest_tus"]) == 10  # of 12 TU events
    assert data["slowest_tus"][0]["seconds"] >= data["slowest_tus"][-1]["seconds"]
    merged_trace = json.loads(merged.read_text())
    jsonschema.validate(merged_trace, TRACE_EVENT_SCHEMA)
    assert sum(1 for e in merged_trace["traceEvents"] if e["ph"] == "X") == 3 * len(TUS)
    assert "critical path: shard 2/2 + link" in page.read_text()
