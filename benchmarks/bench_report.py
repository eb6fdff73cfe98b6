"""How long `kiln bench report` takes over 100,000 records (goal: well under 2 s).

Writes 100,000 synthetic records, shaped and sized like real bench records (build
record fields, extension digests, tool versions, bench fields), to a temporary store,
then times what `kiln bench report` does: read the store, aggregate, render Markdown.
Run it with the project's interpreter:

    .venv/bin/python benchmarks/bench_report.py [--records N] [--repeat R]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from wheelkiln.bench import store
from wheelkiln.bench.report import render_markdown
from wheelkiln.bench.stats import summarize
from wheelkiln.cli.bench import produce_report

GOAL_SECONDS = 2.0
SCENARIOS = ("cold", "warm", "hot", "hot", "frozen")
TARGETS = ("demo-cpp", "demo-kernels", "flash-attn", "natten", "spconv", "cuda-bindings")
BUILDERS = ("farm-1", "farm-2", "gh-ubuntu-24.04", "snoc-think")


def digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def synthetic(n: int) -> dict[str, Any]:
    target = TARGETS[n % len(TARGETS)]
    scenario = SCENARIOS[n % len(SCENARIOS)]
    hot_kind = ("all-hits", "wheel-cache")[n // 5 % 2] if scenario == "hot" else None
    jobs = (2, 8, 32)[n % 3]
    cell = f"{target}-py3.11-cu12.8-linux-x86_64"
    tus = 24 + n % 7
    cold = scenario in ("cold", "frozen")
    wall = (900.0 if cold else 40.0) * (1 + (n % 13) / 10) / (jobs ** 0.5)
    record: dict[str, Any] = {
        "schema": 1, "kind": "bench", "bench_schema": store.BENCH_SCHEMA,
        "timestamp": f"2026-05-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00+00:00",
        "target": target, "cell": cell,
        "axes": {"python": "3.11", "cuda": "12.8", "torch": "none", "platform": "linux-x86_64"},
        "arch_list": ["8.0", "9.0"], "builder": BUILDERS[n % len(BUILDERS)], "arch": "x86_64",
        "exit_code": 0, "wall_seconds": round(wall * 0.9, 3), "cpu_seconds": round(wall * 1.7, 3),
        "peak_rss_bytes": 1_800_000_000 + n, "run_id": f"20260501T000000-{n // 4:06x}",
        "repeat": n % 3, "scenario": scenario, "hot_kind": hot_kind,
        "status": "failed" if n % 997 == 0 else "ok", "problems": [],
        "jobs": jobs, "shards": 1, "namespace": f"bench-{n // 4:06x}-1",
        "source_date_epoch": 1700000000, "step_wall_seconds": round(wall, 3),
        "user_seconds": round(wall * 1.6, 3), "sys_seconds": round(wall * 0.1, 3),
        "cache": {"backend": "ccache", "hits": 0 if cold else tus, "misses": tus if cold else 0,
                  "total": tus, "uncacheable": 3, "errors": 0, "missed_tus": []},
        "wheel": {"name": f"{target.replace('-', '_')}-0.1.0-cp311-cp311-linux_x86_64.whl",
                  "sha256": digest(n, "wheel"), "size": 48_000_000 + n},
        "extensions": {f"{target.replace('-', '_')}/_mod{i}.cpython-311-x86_64-linux-gnu.so":
                       digest(n, i) for i in range(3)},
        "source_digest": digest(target),
        "build_env": f"/home/builder/.cache/wheelkiln/envs/{digest(target)[:16]}",
        "tool_versions": {"wheelkiln": "0.1.0", "gcc": "12.2.0", "ccache": "4.14",
                          "nvcc": "Build cuda_12.8.r12.8/compiler.35404655_0", "cmake": "3.31.6"},
        "log": f"/home/builder/.local/state/wheelkiln/bench-logs/{n // 4:06x}/{scenario}-1.log",
    }
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (median is reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.jsonl"
        # Written in bulk (the same line format append() writes): 100,000 fsynced appends
        # would time the disk, not the report.
        with path.open("w", encoding="utf-8") as handle:
            for n in range(args.records):
                handle.write(json.dumps(synthetic(n), sort_keys=True, separators=(",", ":")))
                handle.write("\n")
        size = path.stat().st_size
        walls: list[float] = []
        cpus: list[float] = []
        for _ in range(args.repeat):
            cpu_started, started = time.process_time(), time.perf_counter()
            # Exactly what `kiln bench report` runs (cli/bench.py, bench_report).
            with store.paused_gc(freeze=True):
                markdown = produce_report(path, (), "md")
            walls.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu_started)
            del markdown
            gc.unfreeze()  # let this run's records go before the next one
        # Where the time goes, once (same steps, timed one by one):
        with store.paused_gc(freeze=True):
            started = time.perf_counter()
            records, warnings = store.read(path)
            read_s = time.perf_counter() - started
            summary = summarize(records)
            aggregate_s = time.perf_counter() - started - read_s
            markdown = render_markdown(summary, source=str(path))
            render_s = time.perf_counter() - started - read_s - aggregate_s
        assert len(records) == args.records and not warnings
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(f"{args.records:,} records, {size / 2**20:.1f} MiB store -> {len(summary.groups)} "
          f"groups, {len(summary.ratios)} ratios, {len(markdown.splitlines())} Markdown lines")
    print(f"read + aggregate + render Markdown, median of {args.repeat}: {wall:.3f} s wall, "
          f"{cpu:.3f} s CPU (min {min(walls):.3f} s wall)")
    print(f"  one run split: read {read_s:.3f} s, aggregate {aggregate_s:.3f} s, "
          f"render {render_s:.3f} s")
    print(f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (wall above CPU "
          "means the machine was busy)")
    print(f"goal < {GOAL_SECONDS:.1f} s: {wall / GOAL_SECONDS:.0%} of it "
          f"({'met' if wall < GOAL_SECONDS else 'MISSED'})")


if __name__ == "__main__":
    main()
