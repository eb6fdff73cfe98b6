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

from tests.processes import within
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
    assert any("line 2: not JSON" in w for w in read.warnings)
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


def _in_time(call: Any, seconds: float = 20) -> Any:
    """``call()``, failing the test (instead of hanging it) when it does not return."""
    with within(seconds):
        return call()


def test_reader_follows_no_link_and_waits_on_no_fifo(tmp_path: Path) -> None:
    import os

    secret = tmp_path / "secret.txt"
    secret.write_text('{"t": 1, "secret": "hunter2"}\n')
    (tmp_path / "secret.json").write_text('{"cell": "stolen"}')
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "c.json").write_text('{"cell": "stolen"}')
    folder = tmp_path / "runs" / "20261201T000000Z"
    _write_run(folder, builds=[{"cell": "a", "record": "records/a.json"},
                               {"cell": "b", "record": "records/b.json"},
                               {"cell": "c", "record": "records/c.json"}])
    (folder / "samples.jsonl").symlink_to(secret)
    (folder / "index.html").symlink_to(secret)
    (folder / "records").mkdir()
    (folder / "records" / "a.json").symlink_to(tmp_path / "secret.json")
    os.mkfifo(folder / "records" / "b.json")
    (folder / "records" / "c.json").write_text('{"cell": "c"}')
    read = _in_time(lambda: fmt.read_run(folder))
    assert read.records == {"c": {"cell": "c"}} and read.samples == []
    text = "\n".join(read.warnings)
    assert f"{folder / 'samples.jsonl'}: a symbolic link, not followed; no samples read" in text
    assert f"{folder / 'records' / 'a.json'}: a symbolic link, not followed, ignored" in text
    assert f"{folder / 'records' / 'b.json'}: not a regular file, ignored" in text
    assert "hunter2" not in repr(read)

    # records/ itself a link out of the run: nothing under it is read.
    (folder / "records" / "c.json").unlink()
    (folder / "records" / "b.json").unlink()
    (folder / "records" / "a.json").unlink()
    (folder / "records").rmdir()
    (folder / "records").symlink_to(tmp_path / "elsewhere")
    assert fmt.read_run(folder).records == {}

    os.mkfifo(folder / "samples.fifo")
    (folder / "samples.jsonl").unlink()
    (folder / "samples.fifo").rename(folder / "samples.jsonl")
    assert "not a regular file" in " ".join(_in_time(lambda: fmt.read_run(folder)).warnings)
    (folder / "run.json").unlink()
    os.mkfifo(folder / "run.json")
    with pytest.raises(UsageError, match=r"run\.json is not a fleet run's run\.json: not a "
                       r"regular file"):
        _in_time(lambda: fmt.read_run(folder))
    (folder / "run.json").unlink()
    (folder / "run.json").symlink_to(tmp_path / "secret.json")
    with pytest.raises(UsageError, match="a symbolic link, not followed"):
        fmt.read_run(folder)
    assert fmt.list_runs(tmp_path / "runs") == []  # its run.json is a link: not a run


def test_a_run_folders_own_page_is_never_published(tmp_path: Path) -> None:
    from wheelkiln.fleet.publish import _copy_run

    source = tmp_path / "runs" / "20261201T000000Z"
    _write_run(source, builds=[{"cell": "c", "record": "records/c.json", "outcome": "ok",
                                "start": 1.0, "end": 2.0, "seconds": 1.0}])
    (source / "records").mkdir()
    (source / "records" / "c.json").write_text('{"cell": "c"}')
    (source / "index.html").write_text("<html><body><script>alert(1)</script></body></html>")
    target = tmp_path / "site" / "20261201T000000Z"
    _copy_run(fmt.read_run(source), target, "https://x")
    page = (target / "index.html").read_text()
    assert "<script" not in page and "alert" not in page
    assert "kiln fleet run 20261201T000000Z" in page  # drawn from run.json


HOSTILE_RUN = {
    "builders": ["str", {"name": "n1", "cpus": "many", "memory_bytes": [1]}],
    "tool_versions": [1, 2], "jobs_of_builds": 5, "wall_seconds": "long", "note": {"x": 1},
    "builds": [{"cell": "c", "record": "records/c.json", "peak_rss_bytes": "big",
                "seconds": [3], "start": None, "builder": 7, "outcome": "ok"},
               {"cell": "d", "record": 12}],
}
HOSTILE_SAMPLES = [
    '{"t": 1, "builder": "n1", "cpu": null, "memory": {"used_bytes": "lots"}}',
    '{"t": 2, "builder": "n1", "memory": {"used_bytes": NaN}}',
    '{"t": 3, "builder": "n1", "disk": {"read_bytes_per_s": 1e999}}',
    '{"t": 4, "builder": "n1", "net": [1, 2], "interval": "1s"}',
    "[" * 100_000,
    '{"t": 5, "builder": "n1\\ud800"}',
]


def test_hostile_values_are_left_out_and_the_page_still_draws(tmp_path: Path) -> None:
    from wheelkiln.fleet.page import render_run_page
    from wheelkiln.fleet.publish import _copy_run
    from wheelkiln.fleet.summary import run_summary

    folder = tmp_path / "runs" / "20261201T000000Z"
    _write_run(folder, **HOSTILE_RUN)
    (folder / "samples.jsonl").write_text("\n".join(HOSTILE_SAMPLES) + "\n")
    (folder / "records").mkdir()
    (folder / "records" / "c.json").write_text("[" * 100_000)
    read = fmt.read_run(folder)
    run_json = str(folder / "run.json")
    wrong = [w for w in read.warnings if w.startswith(run_json)]
    assert len(wrong) == 1, read.warnings
    for named in ("builders[0] is not an object", "tool_versions is not an object",
                  "jobs_of_builds is not a list", "builds[0].peak_rss_bytes is not a number",
                  "wall_seconds is not a number"):
        assert named in wrong[0] or "…" in wrong[0]
    samples = str(folder / "samples.jsonl")
    assert f"{samples}: line 2: not JSON (NaN is not a JSON number), skipped" in read.warnings
    assert (f"{samples}: line 3: holds the number inf, which JSON cannot carry, skipped"
            in read.warnings)
    assert f"{samples}: line 5: nested too deeply, skipped" in read.warnings
    assert (f"{samples}: line 6: holds text that is not UTF-8 (a lone surrogate), skipped"
            in read.warnings)
    assert any(w.startswith(f"{samples}: values of the wrong type left out on 2 line(s) "
                            "(first line 1)") for w in read.warnings)
    assert f"{folder / 'records' / 'c.json'}: nested too deeply, ignored" in read.warnings
    assert [s["t"] for s in read.samples] == [1, 4] and read.records == {}
    page = render_run_page(read)
    assert "peak memory" in page and "–" in page
    assert run_summary(read.run, read.samples)["builds"] == 2
    target = tmp_path / "site" / "20261201T000000Z"
    _copy_run(read, target, "https://x")  # what is published writes back as JSON
    assert json.loads((target / "run.json").read_text())["builders"] == [
        {"name": "n1"}]


@pytest.mark.parametrize(("override", "why"), [
    ({"builds": [{"cell": "a\ud800b"}]}, "holds text that is not UTF-8 (a lone surrogate)"),
    ({"note": "[" * 100_000}, None),
    ({"builders": [{"name": "TOO BIG"}]}, "holds the number inf"),
])
def test_run_json_that_cannot_be_published_is_refused(
    tmp_path: Path, override: dict[str, Any], why: str | None
) -> None:
    folder = tmp_path / "runs" / "20261201T000000Z"
    _write_run(folder, **override)
    text = (folder / "run.json").read_text()
    (folder / "run.json").write_text(text.replace('"TOO BIG"', "1e999"))  # JSON, not Infinity
    if why is None:  # the whole run.json a deep nest, not only a value in it
        (folder / "run.json").write_text("[" * 100_000)
        why = "nested too deeply"
    with pytest.raises(UsageError, match=r"is not a fleet run's run\.json") as caught:
        fmt.read_run(folder)
    assert why in caught.value.message
