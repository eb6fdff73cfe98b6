"""kiln fleet run --executor dask: two cells built at once on a LocalCluster of two worker
processes (builder=1 each, homes of their own), each worker sampled in its own process.
Opt-in (slow): a cluster and two real builds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Kiln
from tests.integration.test_dask_executor import Fleet
from tests.projects import c_extension

pytestmark = [pytest.mark.slow, pytest.mark.compile]


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    running = Fleet(tmp_path_factory.mktemp("cluster"))
    yield running
    running.close()


def test_fleet_run_on_two_dask_workers(kiln: Kiln, cluster: Fleet, tmp_path: Path) -> None:
    recipes = [c_extension(name, tus=3).generate(tmp_path)[1] for name in ("dask-a", "dask-b")]
    summary = json.loads(kiln(
        "fleet", "run", *recipes, "--executor", "dask", "--scheduler", cluster.address,
        "--handoff", tmp_path / "handoff", "--runs-dir", tmp_path / "runs", "--json").stdout)
    run = summary["run"]
    assert run["executor"] == "dask"
    assert sorted(b["name"] for b in run["builders"]) == ["builder-0", "builder-1"]
    assert all(b["outcome"] == "ok" and b["misses"] == 3 and b["hits"] == 0
               for b in run["builds"])
    # One build per builder: the two ran on different workers, at once.
    assert {b["builder"] for b in run["builds"]} == {"builder-0", "builder-1"}
    first, second = sorted(run["builds"], key=lambda b: b["start"])
    assert second["start"] < first["end"]
    folder = Path(summary["folder"])
    samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    for builder in ("builder-0", "builder-1"):
        times = [s["t"] for s in samples if s["builder"] == builder]
        assert len(times) >= 2 and len(times) >= times[-1] - times[0]
    page = (folder / "index.html").read_text()
    assert all(b["cell"] in page for b in run["builds"])
    assert "Builder builder-0" in page and "Builder builder-1" in page
