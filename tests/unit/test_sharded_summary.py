"""The summary of ``kiln build --shards``: the cold reference found in the state home
whatever ``--out`` was, an honest label for the slowest-shard-plus-link figure, freed
cores going to the shards that start last, one figure for a shard's seconds, and cache
stores that count real TUs only."""

from __future__ import annotations

import io
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from wheelkiln.builder.record import recall_cold, remember
from wheelkiln.cache.backend import TUOutcome
from wheelkiln.cells import Cell
from wheelkiln.executors.local import schedule_shards, shard_jobs
from wheelkiln.executors.sharded import _shard_table, summary_lines
from wheelkiln.shard.job import describe_stores, store_counts
from wheelkiln.shard.wrapper_log import WrapperRecord

CELL = "demo-cpp-py3.11-linux-x86_64"
DIGEST = "cd" * 32


def _record(*, wall: float, hits: int, misses: int, recache: bool = False) -> dict[str, Any]:
    return {"kind": "build", "cell": CELL, "wall_seconds": wall, "recache": recache,
            "cache": {"hits": hits, "misses": misses, "total": hits + misses}}


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("KILN_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_cold_build_is_remembered_by_cell_and_digest(state: Path) -> None:
    assert recall_cold(CELL, DIGEST) is None
    path = remember(_record(wall=61.25, hits=0, misses=24, recache=True), DIGEST)
    assert path.is_relative_to(state)
    cold = recall_cold(CELL, DIGEST)
    assert cold is not None and cold["wall_seconds"] == 61.25
    # A later warm build of the same inputs is remembered, but is no cold reference.
    remember(_record(wall=3.0, hits=24, misses=0), DIGEST)
    cold = recall_cold(CELL, DIGEST)
    assert cold is not None and cold["wall_seconds"] == 61.25
    # Another cell, other inputs: nothing.
    assert recall_cold("other-cell", DIGEST) is None
    assert recall_cold(CELL, "ef" * 32) is None


def test_a_build_with_no_hits_is_cold_without_recache(state: Path) -> None:
    remember(_record(wall=40.0, hits=0, misses=7), DIGEST)
    cold = recall_cold(CELL, DIGEST)
    assert cold is not None and cold["wall_seconds"] == 40.0
    remember(_record(wall=9.0, hits=3, misses=4), "ef" * 32)
    assert recall_cold(CELL, "ef" * 32) is None


def test_a_torn_remembered_record_reads_as_none(state: Path) -> None:
    path = remember(_record(wall=61.25, hits=0, misses=24, recache=True), DIGEST)
    path.write_text('{"cell": "demo-cpp', encoding="utf-8")
    assert recall_cold(CELL, DIGEST) is None
    remember(_record(wall=50.0, hits=0, misses=24, recache=True), DIGEST)
    cold = recall_cold(CELL, DIGEST)
    assert cold is not None and cold["wall_seconds"] == 50.0


def test_a_digest_that_is_not_one_never_becomes_a_path(state: Path) -> None:
    with pytest.raises(ValueError, match="not an input digest"):
        recall_cold(CELL, "../../etc")


def test_shards_that_start_last_take_the_cores_the_others_free() -> None:
    # 2 cores, 3 shards, 2 at a time: the first two share the cores ...
    assert shard_jobs(cpus=2, free=2, starting=2, waiting_after=1) == 1
    # ... and the third, started while one still runs, takes both: once the other
    # leaves, no core sits idle.
    assert shard_jobs(cpus=2, free=1, starting=1, waiting_after=0) == 2
    # While shards still wait, a start never takes more than the free cores.
    assert shard_jobs(cpus=8, free=3, starting=1, waiting_after=2) == 3
    assert shard_jobs(cpus=8, free=0, starting=1, waiting_after=2) == 1
    # All shards at once: an even split.
    assert shard_jobs(cpus=8, free=8, starting=3, waiting_after=0) == 2


def _scheduled(count: int, parallel: int, cpus: int, fixed: int | None,
               finish_first: set[int]) -> tuple[list[tuple[int, int]], list[int]]:
    """Run the scheduler with futures that finish at once for *finish_first*; any other
    shard finishes when the next shard starts (it was still running until then)."""
    starts: list[tuple[int, int]] = []
    pending: list[Future[int]] = []

    def start(index: int, jobs: int) -> Future[int]:
        starts.append((index, jobs))
        for earlier in pending:
            earlier.set_result(0)
        pending.clear()
        future: Future[int] = Future()
        if index in finish_first or index == count - 1:
            future.set_result(index * 10)
        else:
            pending.append(future)
        return future

    finished = []
    for index, jobs, result in schedule_shards(count, parallel, cpus, fixed, start):
        assert (index, jobs) in starts
        if result:
            assert result == index * 10
        finished.append(index)
    return starts, finished


def test_scheduler_gives_the_last_shard_the_freed_core() -> None:
    # The reported case: 3 shards on 2 cores; shard 1 is still running when shard 0 ends.
    starts, finished = _scheduled(3, 2, 2, None, finish_first={0})
    assert starts == [(0, 1), (1, 1), (2, 2)]
    assert sorted(finished) == [0, 1, 2]


def test_scheduler_keeps_within_the_cores_while_shards_wait() -> None:
    starts, _ = _scheduled(4, 2, 4, None, finish_first={0})
    assert starts == [(0, 2), (1, 2), (2, 2), (3, 4)]


def test_scheduler_keeps_an_explicit_jobs() -> None:
    starts, _ = _scheduled(3, 2, 2, 3, finish_first={0})
    assert starts == [(0, 3), (1, 3), (2, 3)]


def _report(cold: float | None, jobs: list[int]) -> dict[str, Any]:
    return {
        "count": 3, "wall_seconds": 95.04, "slowest_shard_plus_link_seconds": 70.46,
        "measured": {"shards": 3, "parallel": 2, "jobs": jobs, "cpus": 2},
        "unsharded_cold_seconds": cold,
        "link": {"wheel": {"name": "w.whl", "path": "/out/w.whl"},
                 "cache": {"hits": 24, "misses": 0, "total": 24}},
        "gate": {"passed": True, "problems": []},
    }


def test_summary_says_what_the_slowest_shard_plus_link_measured() -> None:
    assert summary_lines(_report(61.25, [1, 1, 2])) == [
        "wall 95.0 s; slowest shard + link 70.5 s (measured here: 3 shards, 2 at a time, "
        "-j1 to -j2 on a 2-core machine; not an estimate for shards on separate machines)",
        "unsharded cold: 61.2 s",
        "wheel: /out/w.whl",
        "verify: not checked",
        "[green]link gate passed[/green]: 0 misses of 24",
    ]
    lines = summary_lines(_report(None, [1, 1, 1]))
    assert lines[0].endswith("(measured here: 3 shards, 2 at a time, -j1 each on a 2-core "
                             "machine; not an estimate for shards on separate machines)")
    assert lines[1] == ("unsharded cold: unknown for these inputs "
                        "(run `kiln build RECIPE --recache` once to record it)")


def _table_text(shards: list[dict[str, Any]]) -> str:
    cell = Cell(package="demo-cpp", python="3.11", cuda="none", torch="none", platform="linux-x86_64")
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(_shard_table(cell, 2, shards))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(text, str)
    return text


def test_table_seconds_and_stores_are_the_process_figures() -> None:
    shard = {
        "shard": {"index": 0, "count": 2, "actions": {"compile": 5, "stub": 4, "probe": 6}},
        # The build inside the job took 30.1 s; the job, as the progress line says, 33.7 s.
        "wall_seconds": 30.1,
        "cache": {"hits": 0, "misses": 11, "stores": 5, "probe_stores": 6},
        "process": {"exit_code": 0, "signal": None, "status": "passed", "jobs": 1,
                    "wall_seconds": 33.7},
    }
    row = next(line for line in _table_text([shard]).splitlines() if "passed" in line)
    cells = row.replace("│", " ").split()
    assert cells[cells.index("passed") + 1:] == ["5", "4", "6", "5", "33.7"]


def test_store_counts_leave_probe_entries_out() -> None:
    records: list[WrapperRecord] = [
        {"action": "compile", "tu": "src/a.cpp", "argv": ["g++", "-c", "src/a.cpp", "-o", "a.o"],
         "cwd": "/w/tree"},
        {"action": "probe", "tu": None,
         "argv": ["g++", "-c", "/tmp/tmpab12/flagcheck.cpp", "-o", "/tmp/tmpab12/f.o"],
         "cwd": "/w/tree"},
        {"action": "probe", "tu": None, "argv": ["gcc", "-c", "conf.c", "-o", "conf.o"],
         "cwd": "/w/tree/build/probe-dir"},
    ]
    outcomes = [
        TUOutcome("src/a.cpp", hit=False),
        TUOutcome("src/b.cpp", hit=True),  # a hit stores nothing
        TUOutcome("/w/build/CMakeFiles/CMakeScratch/TryCompile-x1/src.c", hit=False),
        TUOutcome("/w/build/meson-private/tmpq/testfile.c", hit=False),
        TUOutcome("/tmp/tmpab12/flagcheck.cpp", hit=False),
        TUOutcome("/w/tree/build/probe-dir/conf.c", hit=False),
    ]
    assert store_counts(outcomes, records) == (1, 4)


def test_kiln_shard_names_its_stores_apart_from_probes() -> None:
    assert describe_stores({"misses": 11, "stores": 5, "probe_stores": 6}) == (
        "5 TUs (and 6 probes)"
    )
