"""A sharded build of one cell through an executor, and what it means: the table of
shard jobs and the link job, the summary under it, the report (``--json``) and the
verdict. The same for every engine: an executor only runs the jobs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from wheelkiln import ui
from wheelkiln.builder.toolchain import Toolchain
from wheelkiln.builder.wheel_checks import describe_verify
from wheelkiln.cells import Cell, shard_label
from wheelkiln.errors import GateError, KilnError
from wheelkiln.executors.base import (
    ExecutorSettings,
    ShardedJob,
    ShardedRun,
    ShardRun,
    shard_failure,
)
from wheelkiln.executors.registry import DEFAULT_EXECUTOR, make_executor
from wheelkiln.paths import resolve_workdir
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.settings import BuildOptions
from wheelkiln.shard.ledger import describe_ledger
from wheelkiln.shard.lto import describe_lto


def shards_directory(workdir: Path, cell: Cell, count: int) -> Path:
    """Where a local sharded build's shard jobs leave their archives and records."""
    return workdir / f"{cell.id}-shards-{count}"


def run_sharded(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    count: int,
    *,
    out_dir: Path,
    parallel: int | None = None,
    partition: str | None = None,
    smoke: bool = False,
    on_report: Callable[[dict[str, Any]], None] | None = None,
    executor: str = DEFAULT_EXECUTOR,
    executor_settings: ExecutorSettings | None = None,
) -> dict[str, Any]:
    """Run *count* shard jobs, then the link job, on *executor*; return the report.

    *on_report* sees the report before a failed gate is raised, so that a caller's JSON
    describes a failed run too (which shard was killed, by which signal).
    """
    engine = make_executor(executor, executor_settings)
    workdir = resolve_workdir(options.workdir)
    job = ShardedJob(
        loaded=loaded,
        cell=cell,
        options=options,
        count=count,
        out_dir=out_dir,
        shards_dir=shards_directory(workdir, cell, count),
        partition=partition,
        smoke=smoke,
        parallel=parallel,
    )
    done = engine.run(job)
    records = [shard_report(shard) for shard in done.shards]
    if done.link is None:
        # The link job failed outright (its build, or its wheel's checks) or did not run
        # (no shard passed): the shard table and the report still say what the shards
        # did, and the error says the rest.
        ui.console.print(_shard_table(cell, count, records))
        assert done.link_error is not None
        if on_report is not None:
            on_report(unlinked_report(done, records, done.link_error))
        raise done.link_error
    report = sharded_report(done, records)
    _print_report(report, cell)
    if on_report is not None:
        on_report(report)
    if not report["gate"]["passed"]:
        raise GateError(
            "The sharded build of "
            + cell.id
            + " did not pass:\n- "
            + "\n- ".join(report["gate"]["problems"]),
            hint=f"The link job's wheel (if any) and record are in {out_dir}; logs under {workdir}.",
        )
    return report


def shard_report(shard: ShardRun) -> dict[str, Any]:
    """One shard job in the report: its build record, and how its job ended."""
    # A shard job that died left no record: its row still needs its own index, and the
    # JSON its fate.
    record: dict[str, Any] = (
        dict(shard.record)
        if shard.record is not None and shard.exit_code >= 0
        else {"shard": {"index": shard.index, "count": shard.count}}
    )
    record["process"] = {
        "exit_code": shard.exit_code,
        "signal": shard.signal,
        "status": shard.status,
        "jobs": shard.jobs,
        # The shard's seconds everywhere (progress, table, slowest shard): the whole
        # job, not only the build inside it.
        "wall_seconds": round(shard.wall_seconds, 3),
    }
    if shard.placement is not None:
        record["fleet"] = dict(shard.placement)
    return record


def sharded_report(done: ShardedRun, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The report of a sharded build whose link job ran (``kiln build --shards --json``)."""
    job, link = done.job, done.link
    assert link is not None
    failures = [failure for shard in done.shards if (failure := shard_failure(shard)) is not None]
    slowest = max((r["process"]["wall_seconds"] for r in records), default=0.0)
    fleet = {"workers": {k: dict(v) for k, v in done.workers.items()}} if done.workers else {}
    return {
        **fleet,
        "cell": job.cell.id,
        "count": job.count,
        "parallel": done.parallel,
        "shards": records,
        "link": link.record,
        "wall_seconds": round(done.wall_seconds, 3),
        "shards_wall_seconds": round(done.shards_wall_seconds, 3),
        "slowest_shard_plus_link_seconds": round(slowest + link.wall_seconds, 3),
        "measured": {
            "shards": job.count,
            "parallel": done.parallel,
            "jobs": [r["process"]["jobs"] for r in records],
            "cpus": done.cpus,
        },
        "unsharded_cold_seconds": _cold_reference(
            job.loaded, job.cell, job.options, _link_toolchain(link.record)
        ),
        "gate": {
            "passed": link.gate.passed and not failures,
            "problems": [*failures, *link.gate.problems],
        },
    }


def unlinked_report(
    done: ShardedRun, records: list[dict[str, Any]], error: KilnError
) -> dict[str, Any]:
    """The report of a sharded build whose link job made no wheel: *error* ended it, or
    stood in for it when no shard passed."""
    failures = [failure for shard in done.shards if (failure := shard_failure(shard)) is not None]
    return {
        "cell": done.job.cell.id,
        "count": done.job.count,
        "parallel": done.parallel,
        "shards": records,
        "link": None,
        "wall_seconds": round(done.wall_seconds, 3),
        "shards_wall_seconds": round(done.shards_wall_seconds, 3),
        "gate": {
            "passed": False,
            "problems": [*failures, "link job: " + error.message.splitlines()[0].rstrip(":")],
        },
    }


def _link_toolchain(record: dict[str, Any]) -> Toolchain | None:
    """The link job's tool versions from its record (None: probe them here)."""
    versions = record.get("tool_versions")
    return Toolchain(dict(versions)) if isinstance(versions, dict) and versions else None


def _cold_reference(
    loaded: LoadedRecipe, cell: Cell, options: BuildOptions, toolchain: Toolchain | None
) -> float | None:
    """The unsharded cold wall time of this cell's inputs, when a build remembered one.
    *toolchain*: the link job's, which built with the same tools."""
    from wheelkiln.builder.record import recall_cold
    from wheelkiln.builder.wheel_cache import plan_input_digest

    try:
        digest = plan_input_digest(loaded, cell, options, toolchain)
    except (KilnError, OSError):
        # The summary of a finished build never fails on its reference figure.
        return None
    cold = recall_cold(cell.id, digest) if digest else None
    return float(cold["wall_seconds"]) if cold else None


def measured_here(shards: int, parallel: int, jobs: list[int], cpus: int) -> str:
    """What the slowest-shard-plus-link figure measured, in words."""
    low, high = min(jobs, default=1), max(jobs, default=1)
    each = f"-j{low} each" if low == high else f"-j{low} to -j{high}"
    return (
        f"measured here: {shards} shard{'s' if shards != 1 else ''}, {parallel} at a time, "
        f"{each} on a {cpus}-core machine"
    )


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
    measured = (
        f"measured on the fleet: {report['count']} shards on {len(report['workers'])} "
        "worker(s), each task's whole time"
        if report.get("workers")
        else measured_here(**report["measured"])
        + "; not an estimate for shards on separate machines"
    )
    lines = [
        f"wall {report['wall_seconds']:.1f} s; slowest shard + link "
        f"{report['slowest_shard_plus_link_seconds']:.1f} s ({measured})",
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
    lto = describe_lto(link.get("link", {}).get("lto"), link.get("wall_seconds"))
    if lto is not None:
        lines.append(lto)
    verdict = (
        "[green]link gate passed[/green]" if report["gate"]["passed"] else "[red]gate failed[/red]"
    )
    lines.append(
        verdict + f": {link['cache'].get('misses', 0)} misses of {link['cache'].get('total', 0)}"
    )
    return lines
