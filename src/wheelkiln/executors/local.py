"""The local executor: N shard jobs as parallel processes, each in a private copy of the
tree with a private cache directory, then the link job."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

from rich.table import Table

from wheelkiln import run, ui
from wheelkiln.builder.cell import BuildOptions
from wheelkiln.builder.wheel_checks import describe_verify
from wheelkiln.cells import Cell, shard_label, shard_record
from wheelkiln.errors import GateError, KilnError
from wheelkiln.paths import resolve_workdir
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.shard.ledger import describe_ledger
from wheelkiln.shard.link import run_link

T = TypeVar("T")


def _shard_command(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    index: int,
    count: int,
    shards_dir: Path,
    workdir: Path,
    jobs: int,
    mechanism: str | None,
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "wheelkiln",
        "shard",
        str(loaded.path),
        "--cell",
        cell.id,
        "--index",
        str(index),
        "--count",
        str(count),
        "--out",
        str(shards_dir),
        "--workdir",
        str(workdir),
        "--jobs",
        str(jobs),
        "--cache",
        options.cache,
    ]
    if options.namespace:
        argv += ["--namespace", options.namespace]
    if mechanism:
        argv += ["--filter", mechanism]
    return argv


def _cold_reference(loaded: LoadedRecipe, cell: Cell, options: BuildOptions) -> float | None:
    """The unsharded cold wall time of this cell's inputs, when a build remembered one."""
    from wheelkiln.builder.record import recall_cold
    from wheelkiln.builder.wheel_cache import plan_input_digest

    try:
        digest = plan_input_digest(loaded, cell, options)
    except (KilnError, OSError):
        # The summary of a finished build never fails on its reference figure.
        return None
    cold = recall_cold(cell.id, digest) if digest else None
    return float(cold["wall_seconds"]) if cold else None


def shard_jobs(cpus: int, free: int, starting: int, waiting_after: int) -> int:
    """Compile jobs for each of *starting* shards that start together now.

    *free* is the cores the running shards leave (their job counts subtracted). While
    shards still wait behind these, they share the free cores, so the total stays within
    the machine. The last shards to start take every core between them: a running
    build's job count cannot grow later, and the shards still running started earlier
    and leave first, so a smaller share would leave cores idle at the end.
    """
    if waiting_after > 0:
        return max(1, free // starting)
    return max(1, cpus // starting)


def schedule_shards(
    count: int,
    parallel: int,
    cpus: int,
    fixed_jobs: int | None,
    start: Callable[[int, int], Future[T]],
) -> Iterator[tuple[int, int, T]]:
    """Start shards 0..count-1, at most *parallel* at a time; yield ``(index, jobs,
    result)`` as each finishes. ``start(index, jobs)`` submits one shard; its compile
    job count is *fixed_jobs* (``--jobs``) or :func:`shard_jobs` at its start."""
    waiting = list(range(count))
    running: dict[Future[T], tuple[int, int]] = {}
    while waiting or running:
        starting = min(parallel - len(running), len(waiting))
        if starting:
            free = cpus - sum(jobs for _, jobs in running.values())
            jobs = fixed_jobs or shard_jobs(cpus, free, starting, len(waiting) - starting)
            for index in waiting[:starting]:
                running[start(index, jobs)] = (index, jobs)
            del waiting[:starting]
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in sorted(finished, key=lambda f: running[f][0]):
            index, jobs = running.pop(future)
            yield index, jobs, future.result()


def measured_here(shards: int, parallel: int, jobs: list[int], cpus: int) -> str:
    """What the slowest-shard-plus-link figure measured, in words."""
    low, high = min(jobs, default=1), max(jobs, default=1)
    each = f"-j{low} each" if low == high else f"-j{low} to -j{high}"
    return (
        f"measured here: {shards} shard{'s' if shards != 1 else ''}, {parallel} at a time, "
        f"{each} on a {cpus}-core machine"
    )


def run_sharded(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    count: int,
    *,
    out_dir: Path,
    parallel: int | None = None,
    mechanism: str | None = None,
    smoke: bool = False,
    on_report: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run *count* shard jobs, then the link job; return the report.

    *on_report* sees the report before a failed gate is raised, so that a caller's JSON
    describes a failed run too (which shard was killed, by which signal).
    """
    workdir = resolve_workdir(options.workdir)
    shards_dir = workdir / f"{cell.id}-shards-{count}"
    for old in [*shards_dir.glob("*.tar.gz"), *shards_dir.glob("*.shard.json")]:
        old.unlink()
    cpus = os.cpu_count() or 1
    parallel = max(1, min(count, parallel or cpus))
    ui.info(
        f"Sharding {cell.id} {count} ways: {parallel} shard job(s) at a time, "
        + (f"{options.jobs} compile job(s) each" if options.jobs else f"sharing {cpus} cores")
    )
    started = time.perf_counter()
    shard_records: dict[int, dict[str, Any]] = {}
    failures: list[str] = []
    with ui.step(f"Compiling {count} shards"), ThreadPoolExecutor(parallel) as pool:

        def start(index: int, jobs: int) -> Future[run.Completed]:
            command = _shard_command(
                loaded, cell, options, index, count, shards_dir, workdir, jobs, mechanism
            )
            return pool.submit(run.run, command, check=False)

        for index, jobs, done in schedule_shards(count, parallel, cpus, options.jobs, start):
            label = shard_label(index, count)
            record_path = shards_dir / shard_record(cell.id, index, count)
            status = process_status(done.returncode)
            # A shard process that died wrote no record (or an old one was removed
            # above): its row still needs its own index, and the JSON its fate.
            record: dict[str, Any] = (
                json.loads(record_path.read_text())
                if record_path.exists() and done.returncode >= 0
                else {"shard": {"index": index, "count": count}}
            )
            record["process"] = {
                "exit_code": done.returncode,
                "signal": run.signal_name(done.returncode),
                "status": status,
                "jobs": jobs,
                # The shard's seconds everywhere (progress, table, slowest shard): the
                # whole job, not only the build inside it.
                "wall_seconds": round(done.wall_seconds, 3),
            }
            shard_records[index] = record
            seconds = f"{record['process']['wall_seconds']:.1f} s"
            if done.returncode < 0:
                failures.append(f"{label}: {status} after {seconds}")
                ui.warn(f"{label} was {status}")
            elif done.returncode != 0:
                failures.append(f"{label}: " + "\n".join(done.output.strip().splitlines()[-6:]))
                ui.warn(f"{label} failed its gate")
            else:
                actions = shard_records[index].get("shard", {}).get("actions", {})
                ui.info(
                    f"  {label}: {actions.get('compile', 0)} compiled, {actions.get('stub', 0)} stubbed "
                    f"in {seconds} at -j{jobs}"
                )
    shards_wall = time.perf_counter() - started
    try:
        link = run_link(
            loaded,
            cell,
            shards_dir,
            out_dir,
            BuildOptions(
                cache=options.cache,
                workdir=workdir,
                jobs=options.jobs,
                namespace=options.namespace,
                source_date_epoch=options.source_date_epoch,
            ),
            expected_count=count,
            smoke=smoke,
        )
    except KilnError:
        # The link job failed outright (its build, or its wheel's checks): the shard
        # table still says what the shards did, and the error says the rest.
        ui.console.print(
            _shard_table(cell, count, [shard_records[i] for i in sorted(shard_records)])
        )
        raise
    wall = time.perf_counter() - started
    slowest = max((r["process"]["wall_seconds"] for r in shard_records.values()), default=0.0)
    report: dict[str, Any] = {
        "cell": cell.id,
        "count": count,
        "parallel": parallel,
        "shards": [shard_records[i] for i in sorted(shard_records)],
        "link": link.record,
        "wall_seconds": round(wall, 3),
        "shards_wall_seconds": round(shards_wall, 3),
        "slowest_shard_plus_link_seconds": round(slowest + link.outcome.wall_seconds, 3),
        "measured": {
            "shards": count,
            "parallel": parallel,
            "jobs": [shard_records[i]["process"]["jobs"] for i in sorted(shard_records)],
            "cpus": cpus,
        },
        "unsharded_cold_seconds": _cold_reference(loaded, cell, options),
        "gate": {
            "passed": link.gate.passed and not failures,
            "problems": [*failures, *link.gate.problems],
        },
    }
    _print_report(report, cell)
    if on_report is not None:
        on_report(report)
    if failures or not link.gate.passed:
        raise GateError(
            "The sharded build of "
            + cell.id
            + " did not pass:\n- "
            + "\n- ".join(report["gate"]["problems"]),
            hint=f"The link job's wheel (if any) and record are in {out_dir}; logs under {workdir}.",
        )
    return report


def process_status(returncode: int) -> str:
    """How a shard process ended, in words: ``passed``, ``killed by SIGKILL``, ``exit 5``."""
    return "passed" if returncode == 0 else run.exit_description(returncode)


def _shard_table(cell: Cell, count: int, shards: list[dict[str, Any]]) -> Table:
    table = Table(title=f"kiln build --shards {count}: {cell.id}", title_justify="left")
    for column in (
        "job",
        "result",
        "compiled",
        "stubbed",
        "probed",
        "cache stores",
        "hits",
        "misses",
        "seconds",
    ):
        table.add_column(column, justify="left" if column in ("job", "result") else "right")
    for record in shards:
        shard = record.get("shard", {})
        process = record.get("process", {})
        label = shard_label(shard.get("index", 0), shard.get("count", count))
        if process.get("signal"):
            # Killed: it recorded nothing, and zeros would read as "compiled nothing".
            table.add_row(label, process["status"], "-", "-", "-", "-", "", "", "-")
            continue
        actions = shard.get("actions", {})
        cache = record.get("cache", {})
        table.add_row(
            label,
            process.get("status", ""),
            str(actions.get("compile", 0)),
            str(actions.get("stub", 0)),
            str(actions.get("probe", 0) + actions.get("link-probe-rebuild", 0)),
            # Entries for real TUs only: a probe's entry serves no later build.
            str(cache.get("stores", "-")),
            "",
            "",
            f"{process.get('wall_seconds', 0):.1f}",
        )
    return table


def _print_report(report: dict[str, Any], cell: Cell) -> None:
    table = _shard_table(cell, report["count"], report["shards"])
    link = report["link"]
    table.add_row(
        "link",
        "passed" if link["link"]["gate"]["passed"] else "gate failed",
        "",
        "",
        "",
        "",
        str(link["cache"].get("hits", 0)),
        str(link["cache"].get("misses", 0)),
        f"{link['wall_seconds']:.1f}",
    )
    ui.console.print(table)
    for line in summary_lines(report):
        ui.info(line)


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The lines under the table of ``kiln build --shards``."""
    link = report["link"]
    cold = report["unsharded_cold_seconds"]
    lines = [
        f"wall {report['wall_seconds']:.1f} s; slowest shard + link "
        f"{report['slowest_shard_plus_link_seconds']:.1f} s ("
        + measured_here(**report["measured"])
        + "; not an estimate for shards on separate machines)",
        f"unsharded cold: {cold:.1f} s"
        if cold
        else "unsharded cold: unknown for these inputs "
        "(run `kiln build RECIPE --recache` once to record it)",
    ]
    wheel = link.get("wheel")
    if wheel:
        lines.append(f"wheel: {wheel.get('path', wheel['name'])}")
    lines.append(f"verify: {describe_verify(link.get('verify'))}")
    ledger = link.get("link", {}).get("ledger")
    if ledger is not None:
        lines.append(f"ledger: {describe_ledger(ledger)}")
    verdict = (
        "[green]link gate passed[/green]" if report["gate"]["passed"] else "[red]gate failed[/red]"
    )
    lines.append(
        verdict + f": {link['cache'].get('misses', 0)} misses of {link['cache'].get('total', 0)}"
    )
    return lines
