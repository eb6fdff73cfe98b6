"""The link job: restore every shard's cache, re-run the full build, and prove that
the handoff happened.

The gate is a count, not a ratio: **zero misses and total > 0** (the pure
:func:`wheelkiln.shard.gate.link_gate`, beside the shard gate). A missing or mismatched
shard still lets the build run (missing entries recompile, slowly but correctly) and
still fails the gate, naming the shard; its wheel is kept.

Two failures are not gate verdicts. A full build that fails is a build failure
(:class:`BuildError`, naming the TU and the compiler's diagnostic): there is no wheel,
and the counters of a build that stopped half-way say nothing. A wheel that fails the
recipe's ``[verify]`` checks, which every shippable wheel gets, is not copied to the
output directory.
"""

from __future__ import annotations

import shlex
import shutil
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wheelkiln import run
from wheelkiln.builder.cell import (
    BuildOutcome,
    build_cell,
    configured_remote,
    job_directory,
    job_toolchain,
)
from wheelkiln.builder.record import build_record, publish
from wheelkiln.builder.wheel_checks import verify_wheel
from wheelkiln.cache.archive import (
    EXTRA_PREFIX,
    MANIFEST,
    ArchiveContents,
    ArchiveLimits,
    extract,
    inspect_archive,
    member_label,
    printable,
)
from wheelkiln.cells import (
    HANDOFF_SUFFIX,
    SHARD_ARCHIVE_FORM,
    Cell,
    parse_shard_archive,
    parse_shard_handoff,
    shard_archive,
    shard_handoff,
    shard_label,
)
from wheelkiln.compiler_args import PROBE_MARKERS, parse_compiler_args
from wheelkiln.errors import BuildError, GateError, UsageError
from wheelkiln.paths import resolve_workdir
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.recipe.model import MAX_SHARDS
from wheelkiln.settings import BuildOptions, link_job
from wheelkiln.shard import explain
from wheelkiln.shard.diagnostics import find_diagnostics
from wheelkiln.shard.gate import LinkGateResult, link_gate, shard_refusal
from wheelkiln.shard.handoff import DEFAULT_MAX_HANDOFF_BYTES, RemoteHandoff, read_handoff
from wheelkiln.shard.job import toolchain_fingerprint
from wheelkiln.shard.ledger import compile_ledger
from wheelkiln.shard.lto import lto_summary
from wheelkiln.shard.partition import tu_key
from wheelkiln.shard.trace import write_job_trace
from wheelkiln.shard.wrapper_log import WRAPPER_LOG, WrapperRecord, parse_wrapper_log


@dataclass
class LinkResult:
    outcome: BuildOutcome
    gate: LinkGateResult
    record: dict[str, Any]
    record_path: Path


def _shard_archives(
    shards_dir: Path, cell: Cell, expected_count: int | None
) -> tuple[int | None, dict[int, Path]]:
    """This cell's shard inputs by shard index (each a cache archive, or the handoff file
    of a shard that handed over through remote storage), and N from their names. Inputs
    of another N than ``--count``, of different Ns, naming a shard beyond N, or two for
    one shard are refused, named: merging a subset of another build's shards would pass
    or fail for the wrong reason."""
    found: list[tuple[int, int, Path]] = []
    candidates = [*shards_dir.rglob("*.tar.gz"), *shards_dir.rglob(f"*{HANDOFF_SUFFIX}")]
    for path in sorted(candidates):
        parsed = parse_shard_archive(path.name) or parse_shard_handoff(path.name)
        if parsed is not None and parsed[0] == cell.id:
            found.append((parsed[1], parsed[2], path))
    # Another job named these folders and files (a downloaded artifact's), and every
    # message names them: a newline there would start a line of the link job's log.
    unprintable = [path for _, _, path in found if not str(path).isprintable()]
    if unprintable:
        raise UsageError(
            f"{printable(str(unprintable[0]))}: a shard input whose path holds a control "
            "character (a newline, a terminal escape); nothing was read.",
            hint="Rename or remove it; kiln names shard inputs with printable names only.",
        )
    # N sizes the link job's loop over shards: a name saying 10**12 would never end.
    too_many = [path for _, count, path in found if count > MAX_SHARDS]
    if too_many:
        raise UsageError(
            f"{too_many[0]}: names more than {MAX_SHARDS} shards, the most kiln builds.",
            hint=f"Shard archives are named {SHARD_ARCHIVE_FORM} with 1 <= N <= {MAX_SHARDS}; "
            "remove the file, or re-run the shard job that should have written it.",
        )
    counts = sorted({count for _, count, _ in found})
    names = "; ".join(f"{path} ({index + 1}/{count})" for index, count, path in found)
    if expected_count is not None and counts and counts != [expected_count]:
        raise UsageError(
            f"--count {expected_count} does not match the shard archives of {cell.id} in "
            f"{shards_dir}, which are of N = {', '.join(map(str, counts))}: {names}.",
            hint="Pass the --count the shards were built with, or remove the archives of "
            "the other build.",
        )
    if len(counts) > 1:
        raise UsageError(
            f"The shard archives of {cell.id} in {shards_dir} disagree on N "
            f"({', '.join(map(str, counts))}): {names}.",
            hint="Keep only the archives of one sharded build in --shards.",
        )
    beyond = [path for index, count, path in found if index >= count]
    if beyond:
        raise UsageError(
            f"{', '.join(map(str, beyond))}: names a shard index beyond its N.",
            hint=f"Shard archives are named {SHARD_ARCHIVE_FORM} with 0 <= I < N.",
        )
    by_index: dict[int, list[Path]] = defaultdict(list)
    for index, _, path in found:
        by_index[index].append(path)
    twice = {index: paths for index, paths in sorted(by_index.items()) if len(paths) > 1}
    if twice:
        index, paths = next(iter(twice.items()))
        raise UsageError(
            f"{shards_dir} holds {len(paths)} inputs for {shard_label(index, counts[0])} of "
            f"{cell.id}: {', '.join(map(str, paths))}.",
            hint="Keep one archive or handoff file per shard.",
        )
    return (counts[0] if counts else None), {index: paths[0] for index, paths in by_index.items()}


def remote_refusal(
    handoff: RemoteHandoff, label: str, remote: str | None, namespace: str | None
) -> str | None:
    """Why a shard that handed over through remote storage cannot be read by this link
    job (*remote*, *namespace*: its own), or None."""
    store = handoff.manifest.remote
    assert store is not None  # read_handoff refuses a handoff without it
    if remote is None:
        return (
            f"{label} stored its entries on remote storage ({store.storage!r}), and this link "
            f"job has none; not merged ({handoff.where})"
        )
    if store.namespace != namespace:
        return (
            f"{label} stored its entries under namespace {store.namespace!r}, and this link "
            f"job reads namespace {namespace!r}; not merged ({handoff.where})"
        )
    return None


def _shard_log(archive: Path, extras_dir: Path) -> list[WrapperRecord]:
    """The wrapper log an archive carried, checked line by line, named as its member."""
    path = extras_dir / WRAPPER_LOG
    if not path.is_file():
        return []
    with path.open("rb") as handle:
        return parse_wrapper_log(handle, member_label(archive, f"{EXTRA_PREFIX}/{WRAPPER_LOG}"))


def _as_logged(argv: list[str]) -> list[str]:
    """An argv as it reads back from ccache's log, which joins arguments with spaces
    unquoted: torch's literal ``'-fPIC'`` comes back as ``-fPIC``."""
    try:
        return shlex.split(" ".join(argv))
    except ValueError:
        return argv


UNHASHED_VALUES = ("-fdebug-prefix-map=", "-ffile-prefix-map=", "-fmacro-prefix-map=")
"""Options whose value ccache does not hash (only that they are there): each job maps its
own directory (``KILN_DEBUG_PREFIX``), which is no difference between two jobs."""


def _as_hashed(arg: str) -> str:
    return next((prefix for prefix in UNHASHED_VALUES if arg.startswith(prefix)), arg)


def _difference(shard_argv: list[str], link_argv: list[str]) -> str:
    """How a shard's command line differs from the link job's, as printed: the shard's
    came from its wrapper log, so control characters in it are shown escaped."""
    shard_argv = [printable(arg) for arg in _as_logged(shard_argv)]
    shard_hashed = {_as_hashed(a) for a in shard_argv}
    link_hashed = {_as_hashed(a) for a in link_argv}
    only_shard = [a for a in shard_argv[1:] if _as_hashed(a) not in link_hashed]
    only_link = [a for a in link_argv[1:] if _as_hashed(a) not in shard_hashed]
    if not only_shard and not only_link:
        return "same arguments (the difference is in an input file or the environment)"
    return f"only in the shard: {shlex.join(only_shard) or '-'}; only in the link job: {shlex.join(only_link) or '-'}"


def run_link(
    loaded: LoadedRecipe,
    cell: Cell,
    shards_dir: Path,
    out_dir: Path,
    options: BuildOptions,
    *,
    expected_count: int | None = None,
    limits: ArchiveLimits | None = None,
    smoke: bool = False,
) -> LinkResult:
    workdir = resolve_workdir(options.workdir)
    # The link job builds in the cell's own directory (JobSetup.in_cell_directory); what
    # only it has (the merged cache, the shards' logs, ccache's log) is named for it.
    linked = job_directory(workdir, cell, "link")
    cache_dir = (options.cache_dir or linked.with_name(linked.name + ".cache")).resolve()
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache_dir.mkdir(parents=True)
    if not shards_dir.is_dir():
        raise UsageError(
            f"{shards_dir} is not a directory (the shard archives' folder).",
            hint="Point it at the shard archives.",
        )
    limits = limits or ArchiveLimits.resolve()
    found_count, archives = _shard_archives(shards_dir, cell, expected_count)
    count = expected_count or found_count or loaded.recipe.sharding.count
    # Every archive is checked whole before any is extracted.
    checked: dict[int, ArchiveContents | RemoteHandoff] = {
        index: read_handoff(path, min(limits.max_unpacked_size, DEFAULT_MAX_HANDOFF_BYTES))
        if path.name.endswith(HANDOFF_SUFFIX)
        else inspect_archive(path, limits)
        for index, path in sorted(archives.items())
    }
    remote = configured_remote(loaded, options)
    namespace = options.namespace or loaded.recipe.cache.namespace
    # A missing shard is named as the file its siblings handed over.
    expected_name = (
        shard_handoff
        if any(path.name.endswith(HANDOFF_SUFFIX) for path in archives.values())
        else shard_archive
    )
    problems: list[str] = []
    # Probed once for the job: the fingerprint shards must match, and the build's record.
    toolchain = job_toolchain(loaded, options)
    own = toolchain_fingerprint(loaded, cell, toolchain.versions)
    extras = linked.with_name(linked.name + ".shards")
    shutil.rmtree(extras, ignore_errors=True)
    merged: list[int] = []
    through_remote: list[int] = []
    shard_logs: dict[int, list[WrapperRecord]] = {}
    for index in range(count):
        label = shard_label(index, count)
        if index not in archives:
            problems.append(
                f"{label} is missing: no {expected_name(cell.id, index, count)} in {shards_dir}"
            )
            continue
        archive, contents = archives[index], checked[index]
        if isinstance(contents, RemoteHandoff):
            refusal = shard_refusal(
                contents.manifest, cell.id, index, count, own, contents.where
            ) or remote_refusal(contents, label, remote, namespace)
            if refusal is not None:
                problems.append(refusal)
                continue
            shard_logs[index] = contents.records
            merged.append(index)
            through_remote.append(index)
            continue
        where = member_label(archive, MANIFEST)
        refusal = shard_refusal(contents.manifest, cell.id, index, count, own, where)
        if refusal is not None:
            problems.append(refusal)
            continue
        try:
            extract(archive, cache_dir, extras / str(index), limits)
        except GateError as exc:
            # Refused before anything of it moved (a file where an earlier shard's archive
            # left a directory): the other shards' entries still count.
            problems.append(f"{label} was not merged: {exc.message.removesuffix('.')}")
            continue
        shard_logs[index] = _shard_log(archive, extras / str(index))
        merged.append(index)
    # ccache's log only for a second pass over missed TUs (wheelkiln.shard.explain).
    ccache_log = linked.with_name(linked.name + ".ccache.log")
    ccache_log.unlink(missing_ok=True)
    extra_env: dict[str, str] = {}
    if through_remote and through_remote == merged and options.cache == "ccache":
        # Every shard's entries are on the remote storage: ccache reads them there and
        # nowhere else, so every hit the gate counts is an entry a shard stored on the
        # server (the private local cache is empty anyway; this also keeps ccache from
        # writing a local copy of each entry it reads).
        extra_env["CCACHE_REMOTE_ONLY"] = "true"
    link_options = link_job(options, workdir=workdir, cache_dir=cache_dir, extra_env=extra_env)
    # build_cell zeroes the merged shards' stats first.
    outcome = build_cell(loaded, cell, link_options, toolchain)
    stats = outcome.stats
    hits, misses = (stats.hits, stats.misses) if stats is not None else (0, 0)
    if outcome.exit_code != 0:
        # A failed full build is a build failure, not a gate verdict: there is no wheel
        # to keep, and the counters of a build that stopped half-way say nothing.
        failure = link_build_failure(outcome, problems)
        record = build_record(
            outcome,
            kind="link",
            extra={
                "link": {
                    "shards_expected": count,
                    "shards_merged": merged,
                    "build_failure": failure.message,
                    "gate": {
                        "passed": False,
                        "problems": [
                            *problems,
                            f"the full build failed ({run.exit_description(outcome.exit_code)})",
                        ],
                        "missed": [],
                    },
                }
            },
        )
        publish(outcome, record, out_dir)
        raise failure
    # Entries the shards handed over through the remote and not read: the gate names why.
    remote_troubles = (
        [t for t in (status.trouble() for status in outcome.remote.statuses) if t]
        if outcome.remote is not None
        else []
    )
    cython_missed = [str(module) for module in outcome.cython.get("missed", [])]  # type: ignore[attr-defined]
    missed = _explain_misses(outcome, shard_logs, ccache_log)
    ledger = compile_ledger(list(outcome.wheel.extensions) if outcome.wheel else [], shard_logs)
    gate = link_gate(
        problems,
        hits,
        misses,
        ledger.problems,
        missed,
        remote_troubles,
        cython_misses=int(outcome.cython.get("misses", 0)),  # type: ignore[call-overload]
        cython_missed=cython_missed,
    )
    record = build_record(
        outcome,
        kind="link",
        extra={
            "link": {
                "shards_expected": count,
                "shards_merged": merged,
                "shards_through_remote": through_remote,
                # Hits served by the remote storage (ccache counts them apart): with every
                # shard handed over there, each hit of the gate.
                "remote_hits": stats.raw.get("remote_storage_hit")
                if stats is not None and through_remote
                else None,
                "gate": {"passed": gate.passed, "problems": gate.problems, "missed": missed},
                "ledger": ledger.as_dict(),
                "lto": lto_summary(shard_logs),
            }
        },
    )
    # The link job's wheel is the deliverable: it gets every check an unsharded build's
    # wheel gets. One that fails them stays in the job directory, out of --out.
    try:
        record["verify"] = verify_wheel(outcome, loaded, smoke=smoke)
    except BuildError as exc:
        record["verify"] = {"passed": False, "problem": exc.message}
        if outcome.wheel is not None:
            record["wheel"]["path"] = str(outcome.wheel.path)
            exc.hint = (
                f"The wheel stays at {outcome.wheel.path} and was not copied to {out_dir}. "
                + (exc.hint or "")
            ).strip()
        if not gate.passed:
            # The wheel's check stops the job first; the gate's verdict is in the record
            # and said here, so a broken handover is not hidden behind it.
            exc.hint = (
                (exc.hint or "") + "\nThe link gate failed too:\n- " + "\n- ".join(gate.problems)
            ).strip()
        publish(replace(outcome, wheel=None), record, out_dir)
        raise
    record_path = publish(outcome, record, out_dir)
    write_job_trace(record_path, outcome.job_dir, outcome.tu_outcomes, record)
    return LinkResult(outcome, gate, record, record_path)


def _compile_source(line: str) -> str | None:
    """The source file of *line* when it is one compile command (``cc ... -c a.c``)."""
    argv = explain.logged_compile(line)
    return parse_compiler_args(argv[0], argv[1:]).sources[0] if argv is not None else None


def stopping_compile(build_log: str) -> tuple[str | None, list[str]] | None:
    """The compile whose error stopped the build: (its TU, its diagnostic lines).

    setuptools and verbose ninja print each compile command, and ninja prints a failed
    one after ``FAILED:``, so a diagnostic belongs to the last command printed before it
    (the TU is None when none was). A failing compile that stops the build is the last
    command in the log. Diagnostics followed by another compile command were an answer,
    not the end (a build-system probe that failed on purpose, as pybind11's flag checks
    and CMake's try_compile do), so they are dropped. None when the log ends without a
    diagnostic after its last compile command.
    """
    tu: str | None = None
    diagnostics: list[str] = []
    for line in build_log.splitlines():
        source = _compile_source(line)
        if source is not None:
            tu, diagnostics = source, []
            continue
        found = find_diagnostics(line, limit=1)
        if found:
            diagnostics.append(found[0])
    if not diagnostics or (tu is not None and any(marker in tu for marker in PROBE_MARKERS)):
        return None
    return tu, diagnostics


def _display_path(path: str, tree: Path) -> str:
    try:
        return Path(path).relative_to(tree).as_posix()
    except ValueError:
        return path


def link_build_failure(outcome: BuildOutcome, problems: list[str]) -> BuildError:
    """The error for a link job whose full build failed, naming the TU and its diagnostic."""
    others = "".join(f"\nAlso: {problem}." for problem in problems)
    hint = (
        f"No wheel was made. Full log: {outcome.log_path}. Fix the error, then run the "
        f"shard jobs and the link job again from the same source.{others}"
    )
    stopped = stopping_compile(outcome.log_text)
    if stopped is None:
        tail = "\n".join(outcome.log_text.splitlines()[-25:])
        return BuildError(
            f"The link job's full build of {outcome.cell.id} failed "
            f"({run.exit_description(outcome.exit_code)}) with no compiler diagnostic. "
            f"Last lines:\n{tail}",
            hint=hint,
            log_path=str(outcome.log_path),
        )
    tu, lines = stopped
    where = f" compiling {_display_path(tu, outcome.tree)}" if tu else ""
    shown = "\n".join(f"  {line}" for line in lines[:3])
    return BuildError(
        f"The link job's full build of {outcome.cell.id} failed "
        f"({run.exit_description(outcome.exit_code)}){where}:\n{shown}",
        hint=hint,
        log_path=str(outcome.log_path),
    )


def _explain_misses(
    outcome: BuildOutcome, shard_logs: dict[int, list[WrapperRecord]], ccache_log: Path
) -> list[dict[str, Any]]:
    missed_sources = sorted({o.source for o in outcome.tu_outcomes if not o.hit})
    if not missed_sources:
        return []
    commands: dict[str, tuple[list[str], str]] = {}
    if outcome.cache_name == "ccache":
        compiles = explain.missed_compiles(
            missed_sources,
            outcome.log_text,
            outcome.tree,
            [outcome.job_dir / "build", outcome.tree / "build"],
            outcome.environ,
        )
        commands = explain.log_compiles(compiles, outcome.environ, ccache_log)
    shard_compiles: dict[str, tuple[int, list[str]]] = {}
    for index, records in sorted(shard_logs.items()):
        for record in records:
            tu = record.get("tu")
            if record["action"] == "compile" and tu:
                shard_compiles[tu] = (index, record.get("argv", []))
    explained: list[dict[str, Any]] = []
    for source in missed_sources:
        entry: dict[str, Any] = {"tu": source}
        link_cmd = commands.get(source)
        key = tu_key(
            source,
            outcome.tree,
            link_cmd[1] if link_cmd and link_cmd[1] else str(outcome.tree),
            outcome.job_dir / "build",  # generated TUs: keyed as the shards' wrapper keys them
        )
        entry["tu"] = key
        if key in shard_compiles:
            index, argv = shard_compiles[key]
            entry["shard"] = index
            entry["difference"] = (
                _difference(argv, link_cmd[0])
                if link_cmd
                else "the link job's command line was not logged"
            )
        else:
            entry["shard"] = None
            entry["difference"] = "no shard compiled this TU"
        explained.append(entry)
    return explained
