"""The acceptance run of issue 13: a fleet run of the bundled examples demo-kernels (CUDA,
scikit-build-core) and demo-cpp (setuptools, C++) on this machine. Opt-in (slow): two
cold builds at once take minutes on two cores."""

from __future__ import annotations

import json
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import Kiln, copy_example, recipe_for

pytestmark = [pytest.mark.slow, pytest.mark.compile, pytest.mark.cuda]


def test_fleet_run_of_the_bundled_examples(kiln: Kiln, tmp_path: Path) -> None:
    recipes = [recipe_for(copy_example(name, tmp_path), name, tmp_path)
               for name in ("demo-kernels", "demo-cpp")]
    summary = json.loads(kiln("fleet", "run", *recipes, "--runs-dir", tmp_path / "runs",
                              "--workdir", tmp_path / "work", "--json").stdout)
    folder = Path(summary["folder"])
    run = json.loads((folder / "run.json").read_text())
    samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    cells = {b["cell"] for b in run["builds"]}
    assert {c.split("-py")[0] for c in cells} == {"demo-kernels", "demo-cpp"}
    assert all(b["outcome"] == "ok" for b in run["builds"])
    # At least one sample per second per builder.
    for builder in {s["builder"] for s in samples}:
        times = [s["t"] for s in samples if s["builder"] == builder]
        assert len(times) >= times[-1] - times[0]
    # The CPU was busy while the builds ran.
    start = min(b["start"] for b in run["builds"])
    end = max(b["end"] for b in run["builds"])
    busy = [s["cpu"]["busy"] for s in samples if start <= s["t"] <= end]
    assert statistics.fmean(busy) > 50
    # Every build is in the Gantt.
    page = (folder / "index.html").read_text()
    root = ET.fromstring("<div>" + page.split("<body>", 1)[1].removesuffix("</body></html>\n")
                         + "</div>")
    gantt = next(f for f in root.iter("figure") if f.get("aria-label") == "Gantt of every build")
    assert cells <= {t.text for t in gantt.iter("{http://www.w3.org/2000/svg}text")}
    print(json.dumps({"folder": str(folder), "wall_seconds": run["wall_seconds"],
                      "builds": [(b["cell"], b["seconds"], b.get("hits"), b.get("misses"))
                                 for b in run["builds"]],
                      "samples": len(samples), "cpu_busy_mean": statistics.fmean(busy)}))
