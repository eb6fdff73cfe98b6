"""Fleet runs without builds: the sampler's rate and fields, the busy refusal, the run
folder's reader against hostile input."""

from __future__ import annotations

import datetime as dt
import json
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from wheelkiln.builder_lock import BuilderLock
from wheelkiln.cells import Cell
from wheelkiln.errors import UsageError
from wheelkiln.fleet import folder as fmt
from wheelkiln.fleet.executor import LocalFleet, make_executor
from wheelkiln.fleet.runner import FleetSettings, run_fleet
from wheelkiln.fleet.sampler import Sampler
from wheelkiln.fleet.summary import builder_figures


def test_sampler_takes_a_sample_per_interval_and_one_at_each_end() -> None:
    samples: list[dict[str, Any]] = []
    sampler = Sampler("here", samples.append, interval=0.1, cache_counters=lambda: {"hits": 3},
                      running=lambda: 2)
    sampler.start()
    time.sleep(0.55)
    sampler.stop()
    assert sampler.error is None and sampler.count == len(samples)
    assert 6 <= len(samples) <= 9  # first + ~5 ticks + last
    for sample in samples:
        assert sample["builder"] == "here" and sample["cache"] == {"hits": 3}
        assert sample["running"] == 2
        assert set(sample["cpu"]) == {"user", "system", "iowait", "busy"}
        assert 0 <= sample["cpu"]["busy"] <= 100 and sample["memory"]["used_bytes"] > 0
        assert set(sample["disk"]) == {"read_bytes_per_s", "write_bytes_per_s"}
        assert set(sample["net"]) == {"rx_bytes_per_s", "tx_bytes_per_s"}
    gaps = [b["t"] - a["t"] for a, b in pairwise(samples)]
    assert all(gap < 0.3 for gap in gaps[:-1])
    figures = builder_figures(samples, [{"builder": "here", "start": 0, "end": 2e9}])
    assert figures[0].samples == len(samples) and figures[0].samples_per_second > 5


def test_a_run_refuses_to_start_while_a_build_holds_the_builder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KILN_BUILDER_LOCK", raising=False)  # the holder exports it
    lock_path = tmp_path / "builder.lock"
    holder = BuilderLock(lock_path)
    assert holder.try_acquire()
    try:
        cell = Cell("x", "3.11", "none", "none", "linux-x86_64", ())
        result = run_fleet([(object(), cell)], FleetSettings(runs_dir=tmp_path / "runs"),  # type: ignore[list-item]
                           LocalFleet(), lock=BuilderLock(lock_path))
    finally:
        holder.release()
    assert result.status == "busy" and result.folder is None
    assert result.holder is not None and result.holder["pid"] > 0
    assert not (tmp_path / "runs").exists()


def test_unknown_executor_is_named() -> None:
    with pytest.raises(UsageError, match=r"--executor 'ray' is not a fleet executor") as caught:
        make_executor("ray")
    assert "local" in (caught.value.hint or "")


def _write_run(folder: Path, **override: Any) -> None:
    folder.mkdir(parents=True)
    run = {"schema": 1, "stamp": folder.name, "started": "2026-12-01T00:00:00+00:00",
           "builders": [], "builds": [{"cell": "c", "record": "records/c.json"}], **override}
    (folder / "run.json").write_text(json.dumps(run))


def test_reader_checks_run_json_and_keeps_records_inside_the_run(tmp_path: Path) -> None:
    good = tmp_path / "runs" / "20261201T000000Z"
    _write_run(good)
    (good / "records").mkdir()
    (good / "records" / "c.json").write_text('{"cell": "c"}')
    (good / "samples.jsonl").write_text('{"t": 1}\nnot json\n[1]\n')
    read = fmt.read_run(good)
    assert read.records == {"c": {"cell": "c"}} and read.samples == [{"t": 1}]
    assert any("line 2 is not JSON" in w for w in read.warnings)
    outside = tmp_path / "runs" / "20261201T000001Z"
    (tmp_path / "secret.json").write_text('{"cell": "stolen"}')
    _write_run(outside, builds=[{"cell": "c", "record": "../../secret.json"}])
    assert fmt.read_run(outside).records == {}
    bad = tmp_path / "runs" / "20261201T000002Z"
    _write_run(bad, stamp="../../etc")
    with pytest.raises(UsageError, match="is not a run stamp"):
        fmt.read_run(bad)
    assert [p.name for p in fmt.list_runs(tmp_path / "runs")] == [
        "20261201T000000Z", "20261201T000001Z", "20261201T000002Z"]
    assert fmt.find_run(tmp_path / "runs", None).name == "20261201T000002Z"
    with pytest.raises(UsageError, match="is not a run stamp"):
        fmt.find_run(tmp_path / "runs", "../x")


def test_publishing_copies_no_record_outside_the_run(tmp_path: Path) -> None:
    from wheelkiln.fleet.publish import _copy_run

    source = tmp_path / "runs" / "20261201T000000Z"
    _write_run(source, builds=[{"cell": "c", "record": "records/c.json"},
                               {"cell": "c", "record": "records/../../../escaped.json"}])
    (source / "records").mkdir()
    (source / "records" / "c.json").write_text('{"cell": "c"}')
    (source / "index.html").write_text("<html><body>page</body></html>")
    target = tmp_path / "site" / "data" / "perf" / "20261201T000000Z"
    _copy_run(fmt.read_run(source), target, "https://x")
    assert json.loads((target / "records" / "c.json").read_text()) == {"cell": "c"}
    assert not list(tmp_path.rglob("escaped.json"))
    assert 'href="https://x/data/perf/"' in (target / "index.html").read_text()


def test_a_sharded_build_gives_a_gantt_row_per_shard_and_link_job(tmp_path: Path) -> None:
    from wheelkiln.cells import shard_record
    from wheelkiln.executors.sharded import shards_directory
    from wheelkiln.fleet.jobs import FleetJob, JobResult
    from wheelkiln.fleet.runner import shard_entries

    cell = Cell("x", "3.11", "none", "none", "linux-x86_64", ())
    job = FleetJob(cell=cell, recipe=tmp_path / "x.toml", out_dir=tmp_path / "out",
                   log_path=tmp_path / "x.log", cache="ccache", cache_dir=tmp_path / "c",
                   namespace="fleet-1", workdir=tmp_path / "work", shards=2)
    assert "--shards" in job.command() and "--recache" not in job.command()
    shards = shards_directory(tmp_path / "work", cell, 2)
    shards.mkdir(parents=True)
    start = 1_796_000_000
    for index, (end, seconds, passed) in enumerate([(20, 15.0, True), (30, 12.5, False)]):
        record = {"timestamp": dt.datetime.fromtimestamp(start + end, dt.UTC).isoformat(),
                  "wall_seconds": seconds, "gate": {"passed": passed}}
        (shards / shard_record(cell.id, index, 2)).write_text(json.dumps(record))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / f"{cell.id}.link.json").write_text(json.dumps({
        "timestamp": dt.datetime.fromtimestamp(start + 40, dt.UTC).isoformat(),
        "wall_seconds": 8.0, "exit_code": 0}))
    rows = shard_entries(job, JobResult(cell.id, "node", start, start + 41, 0), "node")
    assert [(r["label"].removeprefix(cell.id + " "), r["start"] - start, r["seconds"],
             r["outcome"]) for r in rows] == [
        ("shard 1/2", 5.0, 15.0, "ok"), ("shard 2/2", 17.5, 12.5, "failed"),
        ("link", 32.0, 8.0, "ok")]
