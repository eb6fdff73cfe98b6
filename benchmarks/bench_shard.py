"""Sharding figures for one recipe (default demo-kernels at N=4), measured in one run.

    .venv/bin/python benchmarks/bench_shard.py [RECIPE] [--count N] [--rounds R]
        [--no-balanced] [--compare-linker mold|lld] [--link-rounds K] [--pairs K]
        [--cold-rounds K] [--compare-ahead] [--json]

The shards run one at a time, so each is timed alone, as it would be on its own
machine. Every job is timed two ways: its build step (the record's ``wall_seconds``, the
frontend's run) and the whole job (the ``kiln`` process, start to exit: the CLI's start,
archive merge, environment check, wheel checks, records). Printed as ratios of times
measured in this run:

* critical path (slowest shard + link job) / unsharded cold wall   (goal <= 0.35),
  with the hash partition and again with a map from `kiln shard-plan` (skipped with
  --no-balanced)
* whole link job / whole hot build                                 (goal <= 1.05); with
  --pairs K, K hot builds and link jobs run alternately, and the median of their ratios
* sum of the whole shard jobs / whole unsharded cold build         (goal <= 1.05),
  and the same for the build steps' CPU time (what the shards cost the machines; wall
  time on a shared host also moves with what else runs there); with --cold-rounds K, K
  rounds of the unsharded cold build and then its N shards, each round in a workdir and
  caches of its own, and the median of the rounds' ratios
* with --compare-ahead, each round's shards again compiling ahead in their stubs' slots
  (``KILN_SHARD_AHEAD=1``, see ``wheelkiln.shard.ahead``), each right after the same
  shard without it
* where each round's sum goes: every job's tail (the slot-seconds idle at the end of its
  compiles, and the TU that ends them: see ``wheelkiln.plan.timeline``) and its seconds
  outside the compiles (start, configure, links, install, archives), from the traces
* seat-wrapper cost per TU over a direct ccache hit, and per stub  (goal <= +10 ms;
  skipped with --rounds 0)
* with --compare-linker L: shards again with ``build.linker = L``, then K link jobs with
  each linker, interleaved: the whole link job's median with the default linker and with L.

Before the cold build, one throw-away shard job (slice 1 of 256) fetches the source and
makes the build environment, so the cold build times compiles, not a download. And
kiln's own modules are compiled to bytecode first, as installing kiln (pip, uv) compiles
them: an editable checkout run under PYTHONDONTWRITEBYTECODE (this machine, CI) would
compile every module kiln imports again at every job's start (0.6-1.3 s of each job),
which no installed kiln pays.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
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
from wheelkiln.plan.timeline import compile_tail  # noqa: E402
from wheelkiln.shard import wrapper  # noqa: E402
from wheelkiln.shard.trace import TRACE_SUFFIX, read_trace  # noqa: E402
from wheelkiln.shard.wrapper_log import WRAPPER_LOG, read_wrapper_log  # noqa: E402


def kiln(*args: str | Path, check: bool = True, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run kiln; its JSON record, with the whole process's wall time as ``job_seconds``."""
    argv = [sys.executable, "-m", "wheelkiln", *map(str, args), "--json"]
    print("+ kiln", " ".join(map(str, args[:2])), "...", file=sys.stderr)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False, env=env)
    job_seconds = time.perf_counter() - started
    if done.returncode != 0:
        if not check:
            return {}
        sys.exit(f"kiln {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(done.stdout)
    record["job_seconds"] = round(job_seconds, 3)
    if "--out" in args:  # the job's trace is the newest one in its --out
        traces = Path(args[args.index("--out") + 1]).glob(f"*{TRACE_SUFFIX}")
        newest = max(traces, key=lambda path: path.stat().st_mtime_ns, default=None)
        tail = compile_tail(read_trace(newest)) if newest is not None else None
        record["tail"] = tail.as_dict() if tail is not None else None
    print(f"  {job_seconds:.1f} s (build step {record.get('wall_seconds', 0):.1f} s)", file=sys.stderr)
    return record


def with_linker(recipe: Path, linker: str, directory: Path) -> Path:
    """A copy of *recipe* with ``build.linker = linker``, beside it (so its relative paths
    stay valid), named after this run's *directory*. The caller deletes it."""
    text = recipe.read_text()
    line = f'linker = "{linker}"'
    if re.search(r"(?m)^linker\s*=", text):
        text = re.sub(r"(?m)^linker\s*=.*$", line, text)
    elif re.search(r"(?m)^\[build\]\s*$", text):
        text = re.sub(r"(?m)^\[build\]\s*$", f"[build]\n{line}", text, count=1)
    else:
        text += f"\n[build]\n{line}\n"
    copy = recipe.with_name(f".bench-{directory.name}-{linker}-{recipe.name}")
    copy.write_text(text)
    return copy


def resolve_recipe(name: str) -> Path:
    path = Path(name)
    if path.suffix == ".toml":
        return path.resolve()
    return ROOT / "recipes" / f"{name}.toml"


def spawn_ms(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) * 1000


def wrapper_costs(job_dir: Path, cache_dir: Path, workdir: Path, index: int, count: int,
                  rounds: int) -> dict[str, float]:
    """Median ms: a TU's ccache hit called directly, the same through the wrapper, a stub."""
    records = read_wrapper_log(job_dir / WRAPPER_LOG)
    compiles = [r for r in records if r["action"] == "compile"]
    compiled = next((r for r in compiles if r["argv"][0].endswith("nvcc")), compiles[0])
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


def shard(recipe: Path, index: int, count: int, out: Path, *rest: str | Path,
          env: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``kiln shard`` job: slice *index* of *count*, its archive into *out*."""
    return kiln("shard", recipe, "--index", str(index), "--count", str(count), "--out", out, *rest,
                env=env)


def shard_all(recipe: Path, count: int, out: Path, common: tuple[str | Path, ...],
              *extra: str | Path) -> list[dict[str, Any]]:
    return [shard(recipe, i, count, out, *common, *extra) for i in range(count)]


AHEAD = {**os.environ, "KILN_SHARD_AHEAD": "1"}
"""Shards compiling ahead in their stubs' slots (``--compare-ahead``)."""


def shards_with_and_without(recipe: Path, count: int, scratch: Path, name: str,
                            common: tuple[str | Path, ...]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each shard as kiln runs it and then compiling ahead (in a workdir of its own),
    index by index, so a change of the machine's speed hits both alike."""
    ahead_work = ("--workdir", scratch / f"{name}-ahead-work")
    pairs = [
        (shard(recipe, i, count, scratch / name, *common),
         shard(recipe, i, count, scratch / f"{name}-ahead", *ahead_work, env=AHEAD))
        for i in range(count)
    ]
    return [plain for plain, _ in pairs], [ahead for _, ahead in pairs]


def outside(record: dict[str, Any]) -> float:
    """A job's seconds outside its build step: the whole kiln process less the build."""
    return round(record["job_seconds"] - record["wall_seconds"], 3)


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def breakdown(plain: dict[str, Any], done: list[dict[str, Any]]) -> dict[str, Any]:
    """Where one round's shard sum differs from its cold build: each job's tail (the
    slot-seconds idle at the end of its compiles, and the TU that ends them) and its
    seconds outside the compiles (the kiln process less first TU start to last TU end:
    start, configure, links, install, archives)."""

    def parts(record: dict[str, Any]) -> dict[str, Any]:
        tail = record.get("tail") or {}
        return {
            "tail_idle_slot_seconds": tail.get("tail_idle_slot_seconds"),
            # a slot idle inside ninja's edge, which the trace counts as busy
            "ahead_waited_seconds": (record.get("shard") or {}).get("ahead_waited_seconds", 0.0),
            "tail_tu": (tail.get("tail_tus") or [None])[0],
            "outside_compiles_seconds": round(record["job_seconds"] - tail["compile_seconds"], 3)
            if tail else None,
        }

    return {"cold": parts(plain), "shards": [parts(record) for record in done]}


def total(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else round(sum(v or 0.0 for v in values), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("recipe", nargs="?", default="demo-kernels")
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30, help="wrapper-cost rounds (0: skip)")
    parser.add_argument("--no-balanced", action="store_true", help="skip the shard-plan pass")
    parser.add_argument("--compare-linker", choices=["mold", "lld"], help="time link jobs with it too")
    parser.add_argument("--link-rounds", type=int, default=3, help="link jobs per linker (--compare-linker)")
    parser.add_argument("--pairs", type=int, default=1,
                        help="hot build and link job pairs, run alternately; the ratio is their median")
    parser.add_argument("--cold-rounds", type=int, default=1,
                        help="rounds of the unsharded cold build and its shards; the sum ratio is their median")
    parser.add_argument("--compare-ahead", action="store_true",
                        help="each round's shards again compiling ahead (KILN_SHARD_AHEAD=1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    recipe = resolve_recipe(args.recipe)
    compileall.compile_dir(ROOT / "src", quiet=1)  # writes even under PYTHONDONTWRITEBYTECODE
    copies: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-shard-") as tmp:
        scratch = Path(tmp)
        work = scratch / "work"
        common: tuple[str | Path, ...] = ("--workdir", work)
        kiln("shard", recipe, "--index", "0", "--count", "256", "--out", scratch / "warm-up",
             "--workdir", scratch / "warm-up-work", check=False)
        cold = kiln("build", recipe, "--out", scratch / "plain", "--cache-dir", scratch / "plain-cache",
                    "--no-wheel-cache", *common)
        hot = kiln("build", recipe, "--out", scratch / "plain", "--cache-dir", scratch / "plain-cache",
                   "--no-wheel-cache", *common)
        ahead: list[list[dict[str, Any]]] = []
        if args.compare_ahead:
            shards, on = shards_with_and_without(recipe, args.count, scratch, "shards", common)
            ahead.append(on)
        else:
            shards = shard_all(recipe, args.count, scratch / "shards", common)
        link = kiln("link", recipe, "--archives", scratch / "shards", "--out", scratch / "linked", *common)
        pairs = [(hot, link)]
        for _ in range(args.pairs - 1):  # alternately, so a change of load hits both alike
            pairs.append((
                kiln("build", recipe, "--out", scratch / "plain", "--cache-dir", scratch / "plain-cache",
                     "--no-wheel-cache", *common),
                kiln("link", recipe, "--archives", scratch / "shards", "--out", scratch / "linked", *common),
            ))
        rounds = [(cold, shards)]
        for round_ in range(2, args.cold_rounds + 1):
            # Its own workdir and caches, so the round's cold build and shards start as
            # cold as the first round's.
            round_work: tuple[str | Path, ...] = ("--workdir", scratch / f"work-{round_}")
            plain = kiln("build", recipe, "--out", scratch / f"plain-{round_}", "--cache-dir",
                         scratch / f"plain-cache-{round_}", "--no-wheel-cache", *round_work)
            if args.compare_ahead:
                done, on = shards_with_and_without(recipe, args.count, scratch, f"shards-{round_}",
                                                    round_work)
                ahead.append(on)
            else:
                done = shard_all(recipe, args.count, scratch / f"shards-{round_}", round_work)
            rounds.append((plain, done))
        planned: list[dict[str, Any]] = []
        planned_link: dict[str, Any] = {}
        if not args.no_balanced:
            # The same again with TUs placed by the first round's compile times.
            kiln("shard-plan", scratch / "shards", "--count", str(args.count), "--out", scratch / "map.json")
            planned = shard_all(recipe, args.count, scratch / "planned", common,
                                "--partition-map", scratch / "map.json")
            planned_link = kiln("link", recipe, "--archives", scratch / "planned", "--out",
                                scratch / "planned-linked", *common)
        linkers: dict[str, list[dict[str, Any]]] = {}
        if args.compare_linker:
            other = with_linker(recipe, args.compare_linker, scratch)
            copies.append(other)
            try:
                other_work: tuple[str | Path, ...] = ("--workdir", scratch / "work-linker")
                shard_all(other, args.count, scratch / "shards-linker", other_work)
                linkers = {"default": [], args.compare_linker: []}
                for _ in range(args.link_rounds):  # interleaved, so load changes hit both alike
                    linkers["default"].append(kiln("link", recipe, "--archives", scratch / "shards",
                                                   "--out", scratch / "linked", *common))
                    linkers[args.compare_linker].append(kiln(
                        "link", other, "--archives", scratch / "shards-linker", "--out",
                        scratch / "linked-linker", *other_work))
            finally:
                for copy in copies:
                    copy.unlink(missing_ok=True)
        cell = link["cell"]
        slowest = max(range(args.count), key=lambda i: shards[i]["wall_seconds"])
        suffix = shard_job_suffix(slowest, args.count)
        costs = (
            wrapper_costs(work / f"{cell}-{suffix}", work / f"{cell}-{suffix}.cache", work.resolve(),
                          slowest, args.count, args.rounds)
            if args.rounds > 0 else {}
        )
    critical = shards[slowest]["wall_seconds"] + link["wall_seconds"]
    figures: dict[str, Any] = {
        "recipe": args.recipe,
        "count": args.count,
        "unsharded_cold_seconds": cold["wall_seconds"],
        "plain_hot_seconds": hot["wall_seconds"],
        "shard_seconds": [s["wall_seconds"] for s in shards],
        "link_seconds": link["wall_seconds"],
        "link_misses": link["cache"]["misses"],
        "link_total": link["cache"]["total"],
        "critical_path_over_cold": round(critical / cold["wall_seconds"], 3),
        "link_over_hot": round(link["wall_seconds"] / hot["wall_seconds"], 3),
        "shard_cpu_seconds": [s["cpu_seconds"] for s in shards],
        "unsharded_cold_cpu_seconds": cold["cpu_seconds"],
        "shard_cpu_sum_over_cold_cpu": round(sum(s["cpu_seconds"] for s in shards) / cold["cpu_seconds"], 3),
        "jobs": {
            "unsharded_cold_seconds": cold["job_seconds"],
            "hot_seconds": hot["job_seconds"],
            "shard_seconds": [s["job_seconds"] for s in shards],
            "link_seconds": link["job_seconds"],
            "link_job_over_hot_build": round(link["job_seconds"] / hot["job_seconds"], 3),
            "pairs_link_job_over_hot_build": [round(b["job_seconds"] / a["job_seconds"], 3) for a, b in pairs],
            "median_link_job_over_hot_build": median([b["job_seconds"] / a["job_seconds"] for a, b in pairs]),
            "shard_sum_over_cold": round(sum(s["job_seconds"] for s in shards) / cold["job_seconds"], 3),
            "rounds_shard_sum_over_cold": [
                round(sum(s["job_seconds"] for s in done) / plain["job_seconds"], 3) for plain, done in rounds
            ],
            "median_shard_sum_over_cold": median(
                [sum(s["job_seconds"] for s in done) / plain["job_seconds"] for plain, done in rounds]
            ),
            "rounds_breakdown": [breakdown(plain, done) for plain, done in rounds],
            **({
                "rounds_shard_sum_over_cold_with_ahead": [
                    round(sum(s["job_seconds"] for s in done) / plain["job_seconds"], 3)
                    for (plain, _), done in zip(rounds, ahead, strict=True)
                ],
                "median_shard_sum_over_cold_with_ahead": median([
                    sum(s["job_seconds"] for s in done) / plain["job_seconds"]
                    for (plain, _), done in zip(rounds, ahead, strict=True)
                ]),
                "rounds_breakdown_with_ahead": [
                    breakdown(plain, done) for (plain, _), done in zip(rounds, ahead, strict=True)
                ],
            } if ahead else {}),
            "rounds_shard_cpu_sum_over_cold_cpu": [
                round(sum(s["cpu_seconds"] for s in done) / plain["cpu_seconds"], 3) for plain, done in rounds
            ],
            # Each job's own cost: the kiln process less its build step (the CLI's start,
            # source copy and digest, environment check, archives, gate, checks, records).
            "outside_build_seconds": {
                "unsharded_cold": outside(cold),
                "hot": outside(hot),
                "shards": [outside(s) for s in shards],
                "link": outside(link),
            },
        },
        **{k: round(v, 2) for k, v in costs.items()},
    }
    if planned:
        planned_critical = max(s["wall_seconds"] for s in planned) + planned_link["wall_seconds"]
        figures["balanced_shard_seconds"] = [s["wall_seconds"] for s in planned]
        figures["balanced_link_misses"] = planned_link["cache"]["misses"]
        figures["balanced_critical_path_over_cold"] = round(planned_critical / cold["wall_seconds"], 3)
    if linkers:
        figures["linkers"] = {
            name: {
                "link_job_seconds": [r["job_seconds"] for r in runs],
                "link_build_seconds": [r["wall_seconds"] for r in runs],
                "median_link_job_seconds": median([r["job_seconds"] for r in runs]),
                "median_link_build_seconds": median([r["wall_seconds"] for r in runs]),
                "misses": [r["cache"]["misses"] for r in runs],
                "linker": runs[0]["tool_versions"].get("linker", "default") if runs else None,
            }
            for name, runs in linkers.items()
        }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    jobs = figures["jobs"]
    print(f"{args.recipe}, N={args.count}, shards run one at a time")
    print(f"  unsharded cold {cold['wall_seconds']:.1f} s, plain hot {hot['wall_seconds']:.1f} s (build steps)")
    print(f"  shards {', '.join(f'{s:.1f}' for s in figures['shard_seconds'])} s; link {link['wall_seconds']:.1f} s "
          f"({link['cache']['hits']} hits, {link['cache']['misses']} misses)")
    print(f"  critical path / unsharded cold = {figures['critical_path_over_cold']:.2f} (goal <= 0.35)")
    if planned:
        print(f"  with a cost-balanced map: shards {', '.join(f'{x:.1f}' for x in figures['balanced_shard_seconds'])}"
              f" s, link misses {figures['balanced_link_misses']}, critical path / unsharded cold = "
              f"{figures['balanced_critical_path_over_cold']:.2f}")
    print(f"  whole jobs: cold {jobs['unsharded_cold_seconds']:.1f} s, hot {jobs['hot_seconds']:.1f} s, shards "
          f"{', '.join(f'{x:.1f}' for x in jobs['shard_seconds'])} s, link {jobs['link_seconds']:.1f} s")
    print(f"  link job / hot build           = {jobs['link_job_over_hot_build']:.2f} (goal <= 1.05; "
          f"build steps alone {figures['link_over_hot']:.2f})")
    if args.pairs > 1:
        print(f"  the same, {args.pairs} pairs run alternately: median {jobs['median_link_job_over_hot_build']:.2f} "
              f"({', '.join(f'{x:.2f}' for x in jobs['pairs_link_job_over_hot_build'])})")
    print(f"  sum of shards / unsharded cold = {jobs['shard_sum_over_cold']:.2f} (goal <= 1.05); CPU time of "
          f"the build steps {figures['shard_cpu_sum_over_cold_cpu']:.2f}")
    if args.cold_rounds > 1:
        print(f"  the same, {args.cold_rounds} rounds: median {jobs['median_shard_sum_over_cold']:.2f} "
              f"({', '.join(f'{x:.2f}' for x in jobs['rounds_shard_sum_over_cold'])})")
    if ahead:
        print(f"  the same compiling ahead: median {jobs['median_shard_sum_over_cold_with_ahead']:.2f} "
              f"({', '.join(f'{x:.2f}' for x in jobs['rounds_shard_sum_over_cold_with_ahead'])})")
    for number, split in enumerate(jobs["rounds_breakdown"], 1):
        cold_part, shard_parts = split["cold"], split["shards"]
        idle = total([x["tail_idle_slot_seconds"] for x in shard_parts])
        beside = total([x["outside_compiles_seconds"] for x in shard_parts])
        if idle is None or beside is None or cold_part["tail_idle_slot_seconds"] is None:
            continue  # a build without a ninja log: no TU times to find a tail in
        ending = ", ".join(str(x["tail_tu"]).rsplit("/", 1)[-1] for x in shard_parts)
        print(f"  round {number}: slot-seconds idle in the tails: shards {idle:.1f} ({ending}), cold "
              f"{cold_part['tail_idle_slot_seconds']:.1f}; outside the compiles: shards {beside:.1f} s, "
              f"cold {cold_part['outside_compiles_seconds']:.1f} s")
        if ahead:
            other = jobs["rounds_breakdown_with_ahead"][number - 1]["shards"]
            waited = sum(x["ahead_waited_seconds"] or 0.0 for x in other)
            print(f"           compiling ahead: tails {total([x['tail_idle_slot_seconds'] for x in other])}"
                  f" slot-seconds ({', '.join(str(x['tail_tu']).rsplit('/', 1)[-1] for x in other)}), and "
                  f"{waited:.1f} s of ninja's calls waiting for their TU's compile ahead")
    spent = jobs["outside_build_seconds"]
    print(f"  outside the build step         = cold {spent['unsharded_cold']:.2f} s, hot {spent['hot']:.2f} s, "
          f"shards {', '.join(f'{x:.2f}' for x in spent['shards'])} s, link {spent['link']:.2f} s")
    if costs:
        print(f"  wrapper added to a ccache hit  = {figures['wrapper_added_ms']:+.1f} ms "
              f"(direct {figures['direct_ccache_hit_ms']:.1f} ms; goal <= +10 ms)")
        print(f"  stub                           = {figures['stub_ms']:.1f} ms per out-of-slice TU (goal <= 10 ms)")
    for name, linked in figures.get("linkers", {}).items():
        print(f"  link job with {name:<8} median {linked['median_link_job_seconds']:.2f} s (build step "
              f"{linked['median_link_build_seconds']:.2f} s; n={len(linked['link_job_seconds'])}; "
              f"misses {linked['misses']}; {linked['linker']})")


if __name__ == "__main__":
    main()
