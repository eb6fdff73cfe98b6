"""Hot over cold: one run of a recipe (default demo-kernels) built cold with a fresh
cache, then hot (every compile a hit) several times.

For a Cython package (``demo-cython``) both builds' Cython counters are printed too.

    .venv/bin/python benchmarks/bench_cache.py [RECIPE] [--hot-rounds N] [--json]

Two figures, each as hot/cold:

* the build step: the build record's ``wall_seconds``, which times the backend's run
  (configure, compiles, link, wheel) and nothing else;
* the whole job: the ``kiln build`` process from start to exit, timed here around it.
  It holds the build step and kiln's own work in the job (its start, the source copy
  and digest, the build environment's lookup, the toolchain probes, the wheel's checks,
  the record). This is the honest headline: it is what a user waits for.

Hot figures are medians over ``--hot-rounds`` builds (n and min–max printed); the cold
build is one build. The load average before and after is printed, because load
stretches cold and hot builds by different factors. Goal: hot/cold ≤ 0.05 on
demo-kernels.

With ``--floor``, the same is measured for the recipe's floor package
(``benchmarks/floor``: demo-kernels' and demo-cython's build systems with one TU or
module to build) and its hot build is printed as a share of *this* recipe's cold one:
the least hot/cold any hot build that runs the build backend can reach here.

Before the cold build, as ``bench_shard.py`` does, kiln's own modules are compiled to
bytecode (as installing kiln leaves them) and one throw-away shard job (slice 0 of 256,
its own cache and work directory) fetches the source and makes the build environment,
so that the cold build times the compiles, not an environment's creation.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kiln_build(recipe: str, scratch: Path, env: dict[str, str]) -> tuple[dict[str, object], float]:
    """One ``kiln build``: its build record and the process's seconds, start to exit."""
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
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    whole = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"kiln build failed:\n{done.stderr[-3000:]}")
    record: dict[str, object] = json.loads(done.stdout)
    return record, whole


FLOORS = {
    "demo-kernels": ROOT / "benchmarks" / "floor" / "floor-kernels.toml",
    "demo-cython": ROOT / "benchmarks" / "floor" / "floor-cython.toml",
}
"""The floor package of each bundled recipe whose build system has one."""

Run = tuple[dict[str, object], float, list[tuple[dict[str, object], float]]]


def _floor_recipe(recipe: str, chosen: str) -> str | None:
    if chosen != "auto":
        return chosen
    floor = FLOORS.get(Path(recipe).stem)
    return str(floor) if floor is not None else None


def measure(recipe: str, hot_rounds: int) -> Run:
    """One cold build with a fresh cache, then *hot_rounds* hot ones, in a scratch
    directory of their own; the build environment is made first by a warm-up job."""
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cache-") as tmp:
        scratch = Path(tmp)
        env = dict(os.environ)
        warm_up = [sys.executable, "-m", "wheelkiln", "shard", recipe, "--index", "0",
                   "--count", "256", "--out", str(scratch / "warm-up"),
                   "--workdir", str(scratch / "warm-up-work")]  # fmt: skip
        done = subprocess.run(warm_up, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
        if done.returncode != 0:  # the cold build then makes the environment: say so
            print(f"warm-up shard job failed (exit {done.returncode}); the cold build may "
                  f"include making the build environment:\n{done.stderr[-1500:]}", file=sys.stderr)
        # The cache is fresh; the build environment is the one the warm-up made or found.
        cold, cold_whole = kiln_build(recipe, scratch, env)
        hots = [kiln_build(recipe, scratch, env) for _ in range(hot_rounds)]
    return cold, cold_whole, hots


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


def _spread(values: list[float]) -> dict[str, float | int]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "n": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", nargs="?", default="demo-kernels")
    parser.add_argument(
        "--hot-rounds", type=int, default=3, help="hot builds after the cold one (median)"
    )
    parser.add_argument(
        "--floor", nargs="?", const="auto", metavar="RECIPE",
        help="also measure a floor package (default: the recipe's own in benchmarks/floor) "
        "and print its hot build as a share of this cold one",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.hot_rounds < 1:
        parser.error("--hot-rounds must be at least 1")
    floor = _floor_recipe(args.recipe, args.floor) if args.floor else None
    if args.floor and floor is None:
        parser.error(f"--floor: no floor package is known for {args.recipe!r}; name a recipe "
                     f"({', '.join(sorted(FLOORS))} have one)")
    compileall.compile_dir(ROOT / "src", quiet=1)  # writes even under PYTHONDONTWRITEBYTECODE
    load_before = _load()
    cold, cold_whole, hots = measure(args.recipe, args.hot_rounds)
    floor_run = measure(floor, args.hot_rounds) if floor is not None else None
    load_after = _load()
    hot = hots[-1][0]
    cold_cache, hot_cache = cold["cache"], hot["cache"]
    assert isinstance(cold_cache, dict) and isinstance(hot_cache, dict)
    cold_build = float(cold["wall_seconds"])  # type: ignore[arg-type]
    hot_build = _spread([float(record["wall_seconds"]) for record, _ in hots])  # type: ignore[arg-type]
    hot_whole = _spread([whole for _, whole in hots])
    figures = {
        "recipe": args.recipe,
        # The build step (the record's wall_seconds): the backend's run alone.
        "cold_wall_seconds": cold_build,
        "hot_wall_seconds": hot_build["median"],
        "hot_over_cold": round(hot_build["median"] / cold_build, 4),
        "hot_build_seconds": hot_build,
        # The whole job: the kiln process, start to exit (the headline).
        "cold_job_seconds": round(cold_whole, 3),
        "hot_job_seconds": hot_whole,
        "job_hot_over_cold": round(hot_whole["median"] / cold_whole, 4),
        "load_average": {"before": load_before, "after": load_after},
        "cold_cache": {k: cold_cache[k] for k in ("hits", "misses", "total")},
        "hot_cache": {k: hot_cache[k] for k in ("hits", "misses", "total")},
        # Cython transpiles (examples/demo-cython): counted apart from the compiles
        "cold_cython": {k: (cold.get("cython") or {}).get(k, 0) for k in ("hits", "misses", "total")},  # type: ignore[union-attr]
        "hot_cython": {k: (hot.get("cython") or {}).get(k, 0) for k in ("hits", "misses", "total")},  # type: ignore[union-attr]
        "goal": "hot/cold <= 0.05",
    }
    if floor_run is not None:
        floor_cold, floor_cold_whole, floor_hots = floor_run
        floor_build = _spread([float(record["wall_seconds"]) for record, _ in floor_hots])  # type: ignore[arg-type]
        floor_whole = _spread([whole for _, whole in floor_hots])
        floor_cache = floor_hots[-1][0]["cache"]
        assert isinstance(floor_cache, dict)
        figures["floor"] = {
            "recipe": floor,
            "cold_wall_seconds": float(floor_cold["wall_seconds"]),  # type: ignore[arg-type]
            "cold_job_seconds": round(floor_cold_whole, 3),
            "hot_build_seconds": floor_build,
            "hot_job_seconds": floor_whole,
            "hot_cache": {k: floor_cache[k] for k in ("hits", "misses", "total")},
            # The floor's hot build over this recipe's cold one: what no hot build of
            # this recipe that runs its backend gets under.
            "over_cold": round(floor_build["median"] / cold_build, 4),
            "job_over_cold": round(floor_whole["median"] / cold_whole, 4),
        }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    n = hot_build["n"]
    print(
        f"{args.recipe}: cold {cold_cache['hits']} hits / {cold_cache['misses']} misses, "
        f"hot {hot_cache['hits']} hits / {hot_cache['misses']} misses "
        f"(load average 1/5/15 min: {load_before} before, {load_after} after)"
    )
    cold_cython, hot_cython = figures["cold_cython"], figures["hot_cython"]
    assert isinstance(cold_cython, dict) and isinstance(hot_cython, dict)
    if cold_cython["total"]:
        print(
            f"Cython: cold {cold_cython['hits']} hits / {cold_cython['misses']} misses, "
            f"hot {hot_cython['hits']} hits / {hot_cython['misses']} misses"
        )
    print(
        f"whole job (kiln start to exit): cold {cold_whole:.2f} s, hot {hot_whole['median']:.2f} s "
        f"(median of {n}, {hot_whole['min']:.2f}–{hot_whole['max']:.2f}); "
        f"hot/cold = {figures['job_hot_over_cold']:.3f} (goal <= 0.05)"
    )
    print(
        f"build step (record's wall_seconds): cold {cold_build:.2f} s, "
        f"hot {hot_build['median']:.2f} s (median of {n}, {hot_build['min']:.2f}–{hot_build['max']:.2f}); "
        f"hot/cold = {figures['hot_over_cold']:.3f}"
    )
    floor_figures = figures.get("floor")
    if isinstance(floor_figures, dict):
        fb, fw, fc = (floor_figures["hot_build_seconds"], floor_figures["hot_job_seconds"],
                      floor_figures["hot_cache"])  # fmt: skip
        print(
            f"floor ({Path(str(floor_figures['recipe'])).stem}, hot {fc['hits']} hits / "
            f"{fc['misses']} misses): build step {fb['median']:.2f} s "
            f"({fb['min']:.2f}–{fb['max']:.2f}) = {floor_figures['over_cold']:.3f} of this "
            f"cold build step; whole job {fw['median']:.2f} s = "
            f"{floor_figures['job_over_cold']:.3f} of this cold job"
        )


if __name__ == "__main__":
    main()
