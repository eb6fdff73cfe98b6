"""Sharding figures for one recipe (default demo-kernels at N=4), measured in one run.

    .venv/bin/python benchmarks/bench_shard.py [RECIPE] [--count N] [--rounds R] [--json]

The shards run one at a time, so each is timed alone, as it would be on its own
machine. Printed as ratios of times measured in this run:

* critical path (slowest shard + link job) / unsharded cold wall   (goal <= 0.35),
  with the hash partition and again with a map from `kiln shard-plan`
* link job / plain hot build                                       (goal <= 1.10)
* seat-wrapper cost per TU over a direct ccache hit, and per stub  (goal <= +10 ms)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from wheelkiln import per_tu  # noqa: E402
from wheelkiln.builder.toolchain import real_python  # noqa: E402
from wheelkiln.cache.backend import CacheConfig  # noqa: E402
from wheelkiln.cache.ccache import Ccache  # noqa: E402
from wheelkiln.cells import shard_job_suffix  # noqa: E402
from wheelkiln.shard import wrapper  # noqa: E402
from wheelkiln.shard.wrapper_log import WRAPPER_LOG, read_wrapper_log  # noqa: E402


def kiln(*args: str | Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "wheelkiln", *map(str, args), "--json"]
    print("+ kiln", " ".join(map(str, args[:2])), "...", file=sys.stderr)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        sys.exit(f"kiln {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(done.stdout)
    return record


def spawn_ms(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) * 1000


def wrapper_costs(job_dir: Path, cache_dir: Path, workdir: Path, index: int, count: int,
                  rounds: int) -> dict[str, float]:
    """Median ms: a TU's ccache hit called directly, the same through the wrapper, a stub."""
    records = read_wrapper_log(job_dir / WRAPPER_LOG)
    compiled = next(r for r in records if r["action"] == "compile" and r["argv"][0].endswith("nvcc"))
    stubbed = next(r for r in records if r["action"] == "stub")
    cache = Ccache(CacheConfig(cache_dir=cache_dir, base_dir=workdir))
    env = {**os.environ, **cache.environment()}
    env.pop("CCACHE_STATSLOG", None)
    seat = wrapper.SeatConfig(
        shard_index=index, shard_count=count, package_root=str(job_dir / "src"), log_path=os.devnull,
        cache=cache.executable(), stub_object=str(job_dir / "empty.o"),
    )
    seat_env = {**env, **seat.to_environ()}
    command = per_tu.seat_wrapper_argv(real_python())
    direct, wrapped, stub = [], [], []
    for _ in range(rounds):  # interleaved, so load changes hit all three alike
        direct.append(spawn_ms([cache.executable(), *compiled["argv"]], compiled["cwd"], env))
        wrapped.append(spawn_ms([*command, *compiled["argv"]], compiled["cwd"], seat_env))
        stub.append(spawn_ms([*command, *stubbed["argv"]], stubbed["cwd"], seat_env))
    return {
        "direct_ccache_hit_ms": statistics.median(direct),
        "wrapper_hit_ms": statistics.median(wrapped),
        "wrapper_added_ms": statistics.median(w - d for w, d in zip(wrapped, direct, strict=True)),
        "stub_ms": statistics.median(stub),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("recipe", nargs="?", default="demo-kernels")
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-bench-shard-") as tmp:
        scratch = Path(tmp)
        work = scratch / "work"
        common = ("--workdir", work)
        cold = kiln("build", args.recipe, "--out", scratch / "plain", "--cache-dir", scratch / "plain-cache",
                    "--no-wheel-cache", *common)
        hot = kiln("build", args.recipe, "--out", scratch / "plain", "--cache-dir", scratch / "plain-cache",
                   "--no-wheel-cache", *common)
        shards = [kiln("shard", args.recipe, "--index", str(i), "--count", str(args.count),
                       "--out", scratch / "shards", *common) for i in range(args.count)]
        link = kiln("link", args.recipe, "--archives", scratch / "shards", "--out", scratch / "linked", *common)
        # The same again with TUs placed by the first round's compile times.
        kiln("shard-plan", scratch / "shards", "--count", str(args.count), "--out", scratch / "map.json")
        planned = [kiln("shard", args.recipe, "--index", str(i), "--count", str(args.count),
                        "--partition-map", scratch / "map.json", "--out", scratch / "planned", *common)
                   for i in range(args.count)]
        planned_link = kiln("link", args.recipe, "--archives", scratch / "planned", "--out",
                            scratch / "planned-linked", *common)
        cell = link["cell"]
        slowest = max(range(args.count), key=lambda i: shards[i]["wall_seconds"])
        suffix = shard_job_suffix(slowest, args.count)
        costs = wrapper_costs(work / f"{cell}-{suffix}", work / f"{cell}-{suffix}.cache", work.resolve(),
                              slowest, args.count, args.rounds)
    critical = shards[slowest]["wall_seconds"] + link["wall_seconds"]
    planned_critical = max(s["wall_seconds"] for s in planned) + planned_link["wall_seconds"]
    figures = {
        "recipe": args.recipe,
        "count": args.count,
        "unsharded_cold_seconds": cold["wall_seconds"],
        "plain_hot_seconds": hot["wall_seconds"],
        "shard_seconds": [s["wall_seconds"] for s in shards],
        "link_seconds": link["wall_seconds"],
        "link_misses": link["cache"]["misses"],
        "link_total": link["cache"]["total"],
        "critical_path_over_cold": round(critical / cold["wall_seconds"], 3),
        "balanced_shard_seconds": [s["wall_seconds"] for s in planned],
        "balanced_link_misses": planned_link["cache"]["misses"],
        "balanced_critical_path_over_cold": round(planned_critical / cold["wall_seconds"], 3),
        "link_over_hot": round(link["wall_seconds"] / hot["wall_seconds"], 3),
        **{k: round(v, 2) for k, v in costs.items()},
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{args.recipe}, N={args.count}, shards run one at a time")
    print(f"  unsharded cold {cold['wall_seconds']:.1f} s, plain hot {hot['wall_seconds']:.1f} s")
    print(f"  shards {', '.join(f'{s:.1f}' for s in figures['shard_seconds'])} s; link {link['wall_seconds']:.1f} s "
          f"({link['cache']['hits']} hits, {link['cache']['misses']} misses)")
    print(f"  critical path / unsharded cold = {figures['critical_path_over_cold']:.2f} (goal <= 0.35)")
    print(f"  with a cost-balanced map: shards {', '.join(f'{x:.1f}' for x in figures['balanced_shard_seconds'])} s, "
          f"link misses {figures['balanced_link_misses']}, critical path / unsharded cold = "
          f"{figures['balanced_critical_path_over_cold']:.2f}")
    print(f"  link job / plain hot build     = {figures['link_over_hot']:.2f} (goal <= 1.10)")
    print(f"  wrapper added to a ccache hit  = {figures['wrapper_added_ms']:+.1f} ms "
          f"(direct {figures['direct_ccache_hit_ms']:.1f} ms; goal <= +10 ms)")
    print(f"  stub                           = {figures['stub_ms']:.1f} ms per out-of-slice TU (goal <= 10 ms)")


if __name__ == "__main__":
    main()
