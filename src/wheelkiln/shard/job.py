"""The shard job: build one cell with only this shard's slice of the TUs compiled, gate
the result, and pack the shard's compiler cache for the link job."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wheelkiln import run
from wheelkiln.builder.cell import (
    BuildOutcome,
    build_cell,
    configured_remote,
    job_directory,
    make_cache,
)
from wheelkiln.builder.record import build_record
from wheelkiln.builder.wheel_checks import PLACEHOLDER_MARK
from wheelkiln.cache.archive import pack
from wheelkiln.cache.backend import TUOutcome
from wheelkiln.cache.manifest import MANIFEST_SCHEMA
from wheelkiln.cache.remote import RemotePlan, shown, split_remote
from wheelkiln.cells import (
    Cell,
    shard_archive,
    shard_handoff,
    shard_job_suffix,
    shard_label,
    shard_record,
)
from wheelkiln.compiler_args import PROBE_MARKERS, parse_compiler_args
from wheelkiln.errors import UsageError
from wheelkiln.paths import resolve_workdir
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.settings import BuildOptions, seat_job
from wheelkiln.shard import ahead
from wheelkiln.shard.balance import recall_seconds
from wheelkiln.shard.gate import (
    ExpectedCompile,
    ShardGateResult,
    find_objects,
    read_compile_database,
    shard_gate,
)
from wheelkiln.shard.handoff import Handoff, write_handoff
from wheelkiln.shard.partition import is_mine, load_partition_map
from wheelkiln.shard.source_filter import apply_source_partition
from wheelkiln.shard.trace import write_job_trace
from wheelkiln.shard.wrapper import SeatConfig
from wheelkiln.shard.wrapper_log import WRAPPER_LOG, WrapperRecord, read_wrapper_log

PLACEHOLDER_SOURCE = (
    "/* What a shard links in place of a shared library's objects when it defers the link\n"
    "   (the link job makes the real library). The mark makes the placeholder known. */\n"
    f'const char wheelkiln_shard_placeholder[] = "{PLACEHOLDER_MARK.decode()}";\n'
)


def toolchain_fingerprint(
    loaded: LoadedRecipe, cell: Cell, versions: Mapping[str, str]
) -> dict[str, Any]:
    """What must be equal between shards and their link job for cache entries to match."""
    return {
        "compilers": {
            k: v for k, v in sorted(versions.items()) if k in ("gcc", "nvcc", "linker", "cc", "c++")
        },
        "cache": {k: v for k, v in versions.items() if k in ("ccache", "sccache")},
        "arch_list": list(cell.arch_list),
        "build_env": dict(sorted(loaded.recipe.build.env.items())),
    }


def store_counts(
    outcomes: Iterable[TUOutcome], records: Sequence[WrapperRecord]
) -> tuple[int, int]:
    """Cache entries a shard stored: ``(real TUs, build-system probes)``.

    Every miss stores an entry. A probe's entry (CMake try_compile in a random
    ``CMakeScratch`` directory, meson-private, conftest, a feature check in a temp
    directory) serves no later build, so it is counted apart: a probe is a miss whose
    source has a probe marker, or the source of a compile the wrapper logged as a probe
    (as written, and resolved against its directory).
    """
    probe_sources: set[str] = set()
    for record in records:
        argv = record.get("argv") or []
        if record["action"] != "probe" or not argv:
            continue
        for source in parse_compiler_args(argv[0], argv[1:]).sources:
            probe_sources.add(source)
            # The path as ccache's stats log names it when the build wrote it relative.
            probe_sources.add(os.path.normpath(Path(record.get("cwd", "")) / source))
    real = probes = 0
    for outcome in outcomes:
        if outcome.hit:
            continue
        if outcome.source in probe_sources or any(m in outcome.source for m in PROBE_MARKERS):
            probes += 1
        else:
            real += 1
    return real, probes


def describe_stores(cache: Mapping[str, Any]) -> str:
    """A shard's cache stores in words: real TUs first, probes apart."""
    return f"{cache.get('stores', 0)} TUs (and {cache.get('probe_stores', 0)} probes)"


def _read_partition_map(path: Path, count: int) -> dict[str, int]:
    try:
        mapping = load_partition_map(path)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"Partition map {path}: {exc}",
            hint="Write one with `kiln shard-plan`, or remove sharding.partition_map.",
        ) from None
    wrong = sorted(tu for tu, index in mapping.items() if index >= count)
    if wrong:
        raise UsageError(
            f"Partition map {path} places {len(wrong)} TU(s) on shards beyond {count}, "
            f"e.g. {wrong[0]!r}: it was planned for more shards.",
            hint=f"Plan it again for {count} shards: kiln shard-plan ... --count {count}.",
        )
    return mapping


@dataclass(frozen=True)
class ShardResult:
    index: int
    count: int
    partition: str
    outcome: BuildOutcome
    gate: ShardGateResult
    archive: Path | None
    """The cache archive (``--handoff archive``), or the handoff file (``remote``)."""
    record: dict[str, Any]


def remote_handoff_problems(remote: RemotePlan | None) -> list[str]:
    """Why a shard that hands over through remote storage did not put its entries there
    (*remote*: its build's stores, as they went): the storage was left out as
    unreachable, or failed during the build. Such a shard fails its gate: the link job
    would miss what never arrived."""
    statuses = remote.statuses if remote is not None else ()
    troubles = [trouble for status in statuses if (trouble := status.trouble())]
    if remote is None or remote.usable is None:
        return [f"{trouble}: this shard's entries are not on it" for trouble in troubles] or [
            "no remote cache storage was used, so this shard's entries are nowhere"
        ]
    return [f"{trouble}: some of this shard's entries may not be on it" for trouble in troubles]


def check_remote_handoff(remote: str | None) -> None:
    """A shard that hands over through remote storage needs one it can write to."""
    if not remote:
        raise UsageError(
            "--handoff remote needs remote cache storage, and none is set.",
            hint="Give --remote URL (or $KILN_REMOTE, or the recipe's cache.remote), or "
            "hand over an archive (--handoff archive).",
        )
    # ccache's attribute: such a store serves reads only, so nothing would be handed over.
    read_only = [url for url in split_remote(remote) if "read-only" in url.split("|")[1:]]
    if read_only:
        raise UsageError(
            f"--handoff remote: the remote cache storage {shown(read_only[0])} is read-only, "
            "so this shard could not store its entries there.",
            hint="Drop '|read-only' from the shard job's remote URL (the link job may keep it).",
        )


def run_shard(
    loaded: LoadedRecipe,
    cell: Cell,
    index: int,
    count: int,
    out_dir: Path,
    options: BuildOptions,
    *,
    partition: str | None = None,
    partition_map_path: Path | None = None,
    handoff: Handoff = "archive",
) -> ShardResult:
    """Build shard ``index`` of ``count`` (0-based) and, when it passes, hand its cache
    over: packed into an archive (*handoff* ``archive``), or stored on the remote cache
    storage as it compiled, with a handoff file for the link job (``remote``)."""
    recipe = loaded.recipe
    if handoff == "remote":
        check_remote_handoff(configured_remote(loaded, options))
    if not 0 <= index < count:
        raise UsageError(
            f"--index {index} is outside 0..{count - 1} for --count {count}.",
            hint="Shard indexes are 0-based: the first of 4 shards is --index 0.",
        )
    partition = partition or recipe.sharding.partition
    if partition == "source" and not recipe.sharding.source_globs:
        raise UsageError(
            f"{loaded.path}: the source partition needs sharding.source_globs.",
            hint="Add globs naming the generated sources, or use --partition seat.",
        )
    workdir = resolve_workdir(options.workdir)
    suffix = shard_job_suffix(index, count)
    job_dir = job_directory(workdir, cell, suffix)
    tree = job_dir / "src"
    wrapper_log = job_dir / WRAPPER_LOG
    stub = job_dir / "empty.o"
    placeholder = job_dir / "placeholder.o"
    cache_dir = (options.cache_dir or job_dir.with_name(job_dir.name + ".cache")).resolve()
    shutil.rmtree(cache_dir, ignore_errors=True)
    if partition_map_path is None and recipe.sharding.partition_map:
        partition_map_path = loaded.resolve(recipe.sharding.partition_map)
    partition_map = _read_partition_map(partition_map_path, count) if partition_map_path else None

    ahead_dir = (
        job_dir / "ahead"
        if partition == "seat" and os.environ.get(ahead.SWITCH, "").strip() == "1"
        else None
    )

    def prepare(tree_path: Path) -> bool:
        if ahead_dir is not None:  # the job directory is new: what this builder timed
            ahead.write_seconds(str(ahead_dir), recall_seconds(cell.id))
        run.run(
            ["cc", "-c", "-x", "c", "/dev/null", "-o", str(stub)], what="Making the stub object"
        )
        source = job_dir / "placeholder.c"
        source.write_text(PLACEHOLDER_SOURCE)
        run.run(
            ["cc", "-c", "-fPIC", str(source), "-o", str(placeholder)],
            what="Making the placeholder object",
        )
        if partition == "source":
            apply_source_partition(
                tree_path, recipe.sharding.source_globs, index, count, partition_map
            )
        return partition == "source"  # the seat partition leaves the tree as copied

    cache = make_cache(loaded, options, workdir, job_dir)
    # The seat partition acts only with 'seat'; with 'source' the wrapper is a logging
    # pass-through (no shard count), so the two partitions can never both act.
    seat = SeatConfig(
        shard_index=index,
        shard_count=count if partition == "seat" else None,
        package_root=str(tree),
        log_path=str(wrapper_log),
        cache=cache.executable() if cache is not None else None,
        stub_object=str(stub),
        partition_map_path=(
            str(partition_map_path) if partition == "seat" and partition_map_path else None
        ),
        build_dir=str(job_dir / "build"),
        placeholder_object=str(placeholder),
        ahead_dir=str(ahead_dir) if ahead_dir is not None else None,
    )
    shard_options = seat_job(
        options,
        suffix=suffix,
        workdir=workdir,
        cache_dir=cache_dir,
        extra_env=seat.to_environ(),
        prepare_tree=prepare,
    )
    outcome = build_cell(loaded, cell, shard_options)
    records = read_wrapper_log(wrapper_log)
    objects = find_objects([job_dir / "build", tree])
    expected = _slice_compiles(outcome, job_dir / "build", index, count, partition, partition_map)
    wheel = outcome.wheel
    pure = wheel.path.name if wheel is not None and not wheel.extensions else None
    gate = shard_gate(
        outcome.exit_code, outcome.log_text, objects, records, expected, pure_wheel=pure
    )
    if handoff == "remote" and (problems := remote_handoff_problems(outcome.remote)):
        gate = replace(gate, passed=False, reasons=(*gate.reasons, *problems))
    fingerprint = toolchain_fingerprint(loaded, cell, outcome.versions)
    stats = outcome.stats.as_dict() if outcome.stats is not None else {}
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "recipe": recipe.name,
        "cell": cell.id,
        "index": index,
        "count": count,
        "label": shard_label(index, count),
        "partition": partition,
        "toolchain": fingerprint,
        "stats": stats,
        "tus": sorted(
            {str(r["tu"]) for r in records if r.get("action") == "compile" and r.get("tu")}
        ),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gate": {"passed": gate.passed, "reasons": list(gate.reasons)},
    }
    archive = None
    if gate.passed and handoff == "remote":
        assert outcome.remote is not None and outcome.remote.usable is not None
        manifest["remote"] = {
            "storage": " ".join(shown(url) for url in split_remote(outcome.remote.usable)),
            "namespace": options.namespace or recipe.cache.namespace,
        }
        archive = write_handoff(
            out_dir / shard_handoff(cell.id, index, count), manifest, wrapper_log
        )
    elif gate.passed:
        archive = pack(
            cache_dir,
            manifest,
            out_dir / shard_archive(cell.id, index, count),
            extras={WRAPPER_LOG: wrapper_log},
        )
    record = build_record(
        outcome,
        kind="shard",
        extra={
            "shard": {
                "index": index,
                "count": count,
                "partition": partition,
                "gate": {
                    "passed": gate.passed,
                    "reasons": list(gate.reasons),
                    "links": list(gate.links),
                    "slice_compiles": gate.slice_compiles,
                    "build_failed": gate.build_failed,
                },
                "actions": gate.actions,
                # ninja's calls that waited for their TU's compile ahead, slots idle: the
                # tail compiling ahead can leave (shard/ahead.py)
                "ahead_waited_seconds": round(
                    sum(float(r.get("waited", 0.0)) for r in records), 3
                ),
                "archive": str(archive) if archive else None,
                "handoff": handoff,
            }
        },
    )
    # A shard's wheel (if its link happened to succeed) is never a deliverable.
    record["wheel"] = None
    record["extensions"] = {}
    record["cache"]["stores"], record["cache"]["probe_stores"] = store_counts(
        outcome.tu_outcomes, records
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    record_path = out_dir / shard_record(cell.id, index, count)
    write_job_trace(record_path, job_dir, outcome.tu_outcomes, record, records)
    record_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return ShardResult(index, count, partition, outcome, gate, archive, record)


def _slice_compiles(
    outcome: BuildOutcome,
    build_dir: Path,
    index: int,
    count: int,
    partition: str,
    partition_map: dict[str, int] | None,
) -> list[ExpectedCompile] | None:
    """The compiles of this shard's slice that the build had to run, from its compile
    database (meson, CMake), or None where there is none (setuptools).

    A database lists every target's compiles; ninja's ``-t commands`` lists those of the
    default targets, which is what the build runs, so compiles of targets outside
    them (``build_by_default: false``, ``EXCLUDE_FROM_ALL``) are not expected.
    """
    database = read_compile_database(build_dir / "compile_commands.json", outcome.tree, build_dir)
    if database is None:
        return None
    ninja = shutil.which("ninja", path=f"{outcome.environment.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    if ninja is not None and (build_dir / "build.ninja").is_file():
        listed = run.run([ninja, "-C", str(build_dir), "-t", "commands"], check=False)
        if listed.returncode == 0:
            database = [
                compile_
                for compile_ in database
                if compile_.output is None
                or os.path.relpath(compile_.output, os.path.realpath(build_dir)) in listed.output
            ]
    if partition == "source":
        return database  # the tree holds only this slice's sources: all of them compile
    return [c for c in database if is_mine(c.tu, index, count, partition_map)]
