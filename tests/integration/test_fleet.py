"""kiln fleet run with real builds: two small generated C packages built at once, cold,
while this machine is sampled every second."""

from __future__ import annotations

import json
import statistics
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kiln
from tests.fleet_packages import write_package

pytestmark = pytest.mark.compile

UNITS = 2


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory, kiln_home: Path) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fleet")
    recipes = [write_package(root, name, units=UNITS, functions=60)
               for name in ("fleet-a", "fleet-b")]
    kiln = Kiln(kiln_home, root / "state")
    result = kiln("fleet", "run", *recipes, "--runs-dir", root / "runs", "--workdir",
                  root / "work", "--json")
    summary = json.loads(result.stdout)
    folder = Path(summary["folder"])
    return {"root": root, "summary": summary, "folder": folder, "stderr": result.stderr,
            "kiln": kiln, "run": json.loads((folder / "run.json").read_text()),
            "samples": [json.loads(line) for line in
                        (folder / "samples.jsonl").read_text().splitlines()]}


def test_run_folder_says_what_was_built_where_and_with_what(fleet_run: dict[str, Any]) -> None:
    run, folder = fleet_run["run"], fleet_run["folder"]
    assert folder.parent == fleet_run["root"] / "runs" and folder.name == run["stamp"]
    cells = sorted(b["cell"] for b in run["builds"])
    assert [c.split("-py")[0] for c in cells] == ["fleet-a", "fleet-b"]
    assert all(b["outcome"] == "ok" and b["exit_code"] == 0 for b in run["builds"])
    assert len(run["builders"]) == 1 and run["builders"][0]["executor"] == "local"
    assert {"wheelkiln", "gcc", "ccache", "psutil"} <= set(run["tool_versions"])
    assert "throughput under contention" in run["note"].lower()
    assert "never mixed into a bench median" in fleet_run["stderr"]
    # Every build record is kept, and each build was cold: no hit, every TU a miss.
    for build in run["builds"]:
        record = json.loads((folder / build["record"]).read_text())
        assert record["cell"] == build["cell"] and record["fleet_run"] == run["stamp"]
        assert record["cache"]["hits"] == 0 and record["cache"]["misses"] == UNITS + 1
        assert (folder / build["log"]).read_text().startswith("+ ")
    # The builds overlapped: they ran at once, not one after the other.
    first, second = sorted(run["builds"], key=lambda b: b["start"])
    assert second["start"] < first["end"]
    # Nothing reached the bench's results store.
    assert not (fleet_run["root"] / "state" / "results.jsonl").exists()


def test_samples_every_second_with_the_cpu_busy_while_building(fleet_run: dict[str, Any]) -> None:
    run, samples = fleet_run["run"], fleet_run["samples"]
    builder = run["builders"][0]["name"]
    assert {s["builder"] for s in samples} == {builder}
    times = [s["t"] for s in samples]
    assert times == sorted(times)
    duration = times[-1] - times[0]
    assert duration > 1 and len(samples) >= duration  # at least one sample per second
    assert max(b - a for a, b in pairwise(times)) < 2.5
    start = min(b["start"] for b in run["builds"])
    end = max(b["end"] for b in run["builds"])
    during = [s for s in samples if start <= s["t"] <= end]
    assert during and statistics.fmean(s["cpu"]["busy"] for s in during) > 50
    assert max(s["cpu"]["user"] for s in during) > 20
    assert all(s["memory"]["used_bytes"] > 0 for s in samples)
    assert all(s["disk"]["write_bytes_per_s"] >= 0 and s["net"]["rx_bytes_per_s"] >= 0
               for s in samples)
    # The cache counters over time: cumulative, ending at every TU of both builds stored.
    caches = [s["cache"] for s in samples if s["cache"] is not None]
    misses = [c["misses"] for c in caches]
    assert misses == sorted(misses) and misses[-1] == 2 * (UNITS + 1)
    assert caches[-1]["hits"] == 0 and caches[-1]["stores"] >= 2 * (UNITS + 1)
    assert max(s["running"] for s in samples) == 2


def test_the_run_page_has_a_bar_for_every_build(fleet_run: dict[str, Any]) -> None:
    import xml.etree.ElementTree as ET

    page = (fleet_run["folder"] / "index.html").read_text()
    assert "<script" not in page
    body = page.split("<body>", 1)[1].removesuffix("</body></html>\n")
    root = ET.fromstring(f"<div>{body}</div>")
    gantt = next(f for f in root.iter("figure") if f.get("aria-label") == "Gantt of every build")
    svg = "{http://www.w3.org/2000/svg}"
    bars = [path for group in gantt.iter(f"{svg}g")
            if group.get("class", "").startswith("mark-rect role-mark")
            for path in group.findall(f"{svg}path")]
    labels = {text.text for text in gantt.iter(f"{svg}text")}
    cells = {b["cell"] for b in fleet_run["run"]["builds"]}
    assert len(bars) == len(cells) == 2 and cells <= labels
    assert any(f.get("aria-label", "").startswith("time series of builder")
               for f in root.iter("figure"))
