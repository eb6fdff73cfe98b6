"""How long ``kiln matrix --json`` takes on the 44-recipe synthetic farm.

    /work/main/.venv/bin/python benchmarks/bench_matrix.py [--runs 20]

Writes the farm (tests/unit/farm.py) into a temporary directory, then times:

- in process, per run: load and validate every recipe, expand the matrix (no cap: the
  whole farm is over it) and render the JSON;
- as a fresh process, the command a CI dispatch runs (``kiln matrix --lane 13.0 --json``,
  the largest lane that fits the cap), interpreter start and imports included.

Prints medians, min–max and n, and their ratio to the 1 s goal. Not a timed test: a
number to watch, not a gate.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.unit.farm

from tests.unit.farm import FARM, write_farm  # noqa: E402
from wheelkiln.matrix.jobs import expand_matrix  # noqa: E402
from wheelkiln.matrix.render import render_json  # noqa: E402
from wheelkiln.recipe.load import load_recipe  # noqa: E402

GOAL_SECONDS = 1.0


def one_run(paths: list[Path], root: Path) -> tuple[float, int, int]:
    started = time.perf_counter()
    recipes = [load_recipe(path) for path in paths]
    plan = expand_matrix(recipes, root=root, cap=None)
    text = render_json(plan)
    return time.perf_counter() - started, len(plan.jobs), len(text)


COMMAND = (
    "from wheelkiln.cli.matrix import matrix_command; "
    "matrix_command.main(['--lane', '13.0', '--json'], standalone_mode=False)"
)


def one_process(root: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", COMMAND], cwd=root, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def describe(label: str, times: list[float]) -> str:
    median = statistics.median(times)
    return (
        f"{label} median {median * 1000:.1f} ms (min {min(times) * 1000:.1f}, "
        f"max {max(times) * 1000:.1f}, n={len(times)}); {median / GOAL_SECONDS:.3f} of the "
        f"{GOAL_SECONDS:.0f} s goal"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs (default 20)")
    parser.add_argument("--process-runs", type=int, default=5,
                        help="timed fresh-process runs (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-matrix-") as tmp:
        root = Path(tmp)
        paths = write_farm(root)
        one_run(paths, root)  # warm imports and the filesystem cache
        results = [one_run(paths, root) for _ in range(args.runs)]
        processes = [one_process(root) for _ in range(args.process_runs)]
    _seconds, jobs, size = results[0]
    print(f"matrix: {len(FARM)} recipes -> {jobs} jobs, {size / 1024:.0f} KiB JSON")
    print(describe("  load + expand + render (in process):", [r[0] for r in results]))
    print(describe("  kiln matrix --lane 13.0 --json (fresh process):", processes))


if __name__ == "__main__":
    main()
