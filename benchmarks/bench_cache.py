"""Hot over cold: one run of a recipe (default demo-kernels) built twice with a fresh cache.

For a Cython package (``demo-cython``) both builds' Cython counters are printed too.

    .venv/bin/python benchmarks/bench_cache.py [RECIPE] [--json]

Prints the hot/cold wall-time ratio and both builds' cache counters, measured in one
run so the machine's load affects both alike. Goal: hot/cold ≤ 0.05 on demo-kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kiln_build(recipe: str, scratch: Path, env: dict[str, str]) -> dict[str, object]:
    argv = [
        sys.executable,
        "-m",
        "wheelkiln",
        "build",
        recipe,
        "--json",
        "--out",
        str(scratch / "out"),
        "--workdir",
        str(scratch / "work"),
        "--cache-dir",
        str(scratch / "ccache"),
        "--no-wheel-cache",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        sys.exit(f"kiln build failed:\n{done.stderr[-3000:]}")
    record: dict[str, object] = json.loads(done.stdout)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", default="demo-kernels")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cache-") as tmp:
        scratch = Path(tmp)
        env = dict(os.environ)
        # Reuse the machine's build environments (not part of this figure); the cache is fresh.
        cold = kiln_build(args.recipe, scratch, env)
        hot = kiln_build(args.recipe, scratch, env)
    cold_cache, hot_cache = cold["cache"], hot["cache"]
    assert isinstance(cold_cache, dict) and isinstance(hot_cache, dict)
    figures = {
        "recipe": args.recipe,
        "cold_wall_seconds": cold["wall_seconds"],
        "hot_wall_seconds": hot["wall_seconds"],
        "hot_over_cold": round(float(hot["wall_seconds"]) / float(cold["wall_seconds"]), 4),  # type: ignore[arg-type]
        "cold_cache": {k: cold_cache[k] for k in ("hits", "misses", "total")},
        "hot_cache": {k: hot_cache[k] for k in ("hits", "misses", "total")},
        # Cython transpiles (examples/demo-cython): counted apart from the compiles
        "cold_cython": {k: (cold.get("cython") or {}).get(k, 0) for k in ("hits", "misses", "total")},  # type: ignore[union-attr]
        "hot_cython": {k: (hot.get("cython") or {}).get(k, 0) for k in ("hits", "misses", "total")},  # type: ignore[union-attr]
        "goal": "hot/cold <= 0.05",
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"{args.recipe}: cold {figures['cold_wall_seconds']:.1f} s "
        f"({cold_cache['hits']} hits / {cold_cache['misses']} misses), "
        f"hot {figures['hot_wall_seconds']:.1f} s ({hot_cache['hits']} hits / {hot_cache['misses']} misses)"
    )
    cold_cython, hot_cython = figures["cold_cython"], figures["hot_cython"]
    assert isinstance(cold_cython, dict) and isinstance(hot_cython, dict)
    if cold_cython["total"]:
        print(
            f"Cython: cold {cold_cython['hits']} hits / {cold_cython['misses']} misses, "
            f"hot {hot_cython['hits']} hits / {hot_cython['misses']} misses"
        )
    print(f"hot/cold wall = {figures['hot_over_cold']:.3f} (goal <= 0.05)")


if __name__ == "__main__":
    main()
