"""The Dask executor against the local executor, for one recipe (default demo-kernels at
N=4), measured in one run.

    .venv/bin/python benchmarks/bench_fleet.py [RECIPE] [--count N] [--workers W]
                                               [--jobs J] [--json]

It builds the recipe sharded twice: with the local executor, then on a Dask
``LocalCluster`` on 127.0.0.1 with W worker processes (``--nthreads 1``, resources
``builder=1`` and ``cuda=1``, ``--preload wheelkiln.executors.dask`` unless
``--no-preload``), each with its own KILN_HOME whose build environments are
the ones this machine's KILN_HOME holds (so neither run pays for making one: build the
recipe once before). Both runs give every shard ``--jobs J`` (default 1), so W workers
and the local executor's W-at-a-time shards load the cores alike. Printed:

* Dask critical path / local critical path, each the slowest shard plus the link job
  as that executor measured them (the Dask figure is each task's whole time: bundle
  check, process start, the job)
* per-task overhead, submit -> start: from the moment a worker could take a task (its
  submission, or the end of the task before it on that worker) to the task's start on
  the worker (goal <= 1 s): median, max and n over every task of the run

All of it runs on one machine, so it measures the executor's overhead, not a fleet's
speed-up: on separate machines the shards would not share the cores.
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

from wheelkiln.paths import kiln_home  # noqa: E402


def kiln(*args: str | Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "wheelkiln", *map(str, args), "--json"]
    print("+ kiln", " ".join(map(str, args)), file=sys.stderr)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        sys.exit(f"kiln {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(done.stdout)
    return record


def start_cluster(root: Path, workers: int, preload: bool) -> Any:
    from distributed import Client, LocalCluster, Nanny

    cluster = LocalCluster(host="127.0.0.1", n_workers=0, processes=True, dashboard_address=":0")
    envs = kiln_home() / "envs"
    envs.mkdir(parents=True, exist_ok=True)
    for index in range(workers):
        home = root / f"worker{index}"
        (home / "home").mkdir(parents=True)
        (home / "home" / "envs").symlink_to(envs)
        cluster.worker_spec[f"builder-{index}"] = {
            "cls": Nanny,
            "options": {
                "host": "127.0.0.1",
                "nthreads": 1,
                "memory_limit": 0,
                "resources": {"builder": 1, "cuda": 1},
                # As `dask worker --preload wheelkiln.executors.dask` does: the first task
                # on a worker does not pay for importing kiln.
                "preload": ["wheelkiln.executors.dask"] if preload else [],
                "env": {"KILN_HOME": str(home / "home"), "KILN_STATE_HOME": str(home / "state")},
            },
        }
    cluster.scale(workers)
    with Client(cluster.scheduler_address, set_as_default=False) as client:
        client.wait_for_workers(workers, timeout=120)
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", nargs="?", default=str(ROOT / "recipes" / "demo-kernels.toml"))
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--no-preload", action="store_true", help="Workers import kiln at their first task."
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as scratch:
        tmp = Path(scratch)
        common = ["--shards", str(args.count), "--jobs", str(args.jobs)]
        local = kiln("build", args.recipe, *common, "--workdir", tmp / "local-work",
                     "--out", tmp / "local-dist")
        started = time.perf_counter()
        cluster = start_cluster(tmp / "fleet", args.workers, not args.no_preload)
        cluster_seconds = time.perf_counter() - started
        try:
            (tmp / "handoff").mkdir()
            fleet = kiln("build", args.recipe, *common, "--executor", "dask", "--scheduler",
                         cluster.scheduler_address, "--handoff", tmp / "handoff",
                         "--out", tmp / "fleet-dist")
        finally:
            cluster.close()
    latencies = [
        task["fleet"]["start_latency_seconds"]
        for task in [*fleet["shards"], fleet["link"]]
        if task["fleet"]["start_latency_seconds"] is not None
    ]
    figures = {
        "recipe": Path(args.recipe).stem,
        "count": args.count,
        "workers": args.workers,
        "jobs": args.jobs,
        "preload": not args.no_preload,
        "cores": os.cpu_count(),
        "local_critical_path_seconds": local["slowest_shard_plus_link_seconds"],
        "dask_critical_path_seconds": fleet["slowest_shard_plus_link_seconds"],
        "dask_over_local": round(
            fleet["slowest_shard_plus_link_seconds"] / local["slowest_shard_plus_link_seconds"], 3
        ),
        "start_latency_seconds": {
            "median": round(statistics.median(latencies), 3),
            "max": round(max(latencies), 3),
            "n": len(latencies),
            "each": latencies,
        },
        "cluster_start_seconds": round(cluster_seconds, 2),
        "local_wall_seconds": local["wall_seconds"],
        "dask_wall_seconds": fleet["wall_seconds"],
        "link_misses": [local["link"]["cache"]["misses"], fleet["link"]["cache"]["misses"]],
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    latency = figures["start_latency_seconds"]
    print(
        f"{figures['recipe']} N={args.count}, {args.workers} workers, -j{args.jobs}, "
        f"{figures['cores']} cores\n"
        f"critical path (slowest shard + link): local {figures['local_critical_path_seconds']:.1f} s, "
        f"dask {figures['dask_critical_path_seconds']:.1f} s, dask/local "
        f"{figures['dask_over_local']:.2f}\n"
        f"per-task overhead submit -> start: median {latency['median']:.3f} s, max "
        f"{latency['max']:.3f} s (n={latency['n']}; goal <= 1 s)\n"
        f"wall: local {figures['local_wall_seconds']:.1f} s, dask {figures['dask_wall_seconds']:.1f} s "
        f"(cluster start {figures['cluster_start_seconds']:.1f} s, not included); link misses "
        f"{figures['link_misses']}"
    )


if __name__ == "__main__":
    main()
