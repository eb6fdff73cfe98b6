"""Both gates of a sharded build: the shard gate (did a shard's build fail only the way
a shard is expected to fail?) and the link gate (did the handoff happen: every shard
merged, zero misses, total > 0?).

The shard gate:

A shard compiles only its slice of the TUs and stubs the rest, so its final link is
expected to fail: the dispatcher TU survives in every shard and calls kernels that this
shard never built. The gate tells that expected failure apart from a real one, from the
build's exit code and log, the objects on disk and the seat wrapper's records.

Pure functions on data (plus one small reader at the end). The wrapper's records come
typed from the log's one reader, :mod:`wheelkiln.shard.wrapper_log`; what counts as a
compiler diagnostic or an unresolved symbol is :mod:`wheelkiln.shard.diagnostics`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheelkiln.cells import shard_label
from wheelkiln.compiler_args import PROBE_MARKERS, parse_compiler_args
from wheelkiln.shard.diagnostics import diagnostic_lines, has_unresolved_symbols
from wheelkiln.shard.wrapper_log import WrapperRecord, action_counts

if TYPE_CHECKING:  # its pydantic models cost a plain build 25 ms to import, for the trace
    from wheelkiln.cache.manifest import ShardManifest


@dataclass(frozen=True)
class ShardGateResult:
    """The verdict on one shard's build."""

    passed: bool
    reasons: tuple[str, ...]
    """Why it failed (empty when it passed), or notes on why a failure was accepted."""
    compiled: int
    """TUs compiled for real in this shard (``compile`` and ``link-probe-rebuild``)."""
    stubbed: int
    """Out-of-slice TUs answered with the empty object."""
    probed: int
    """Build-system probes run for real."""
    actions: dict[str, int] = field(default_factory=dict)
    """Wrapper records per action (``{"compile": 12, "stub": 30, "host-pass": 24}``)."""
    links: tuple[str, ...] = ()
    """Links that failed, each with why it was tolerated (or that it was not recognised)."""
    slice_compiles: int | None = None
    """Compiles of the slice checked against the compile database (None: no database)."""
    build_failed: bool = False
    """The package's own build broke (before its first TU, or a TU did not compile), as
    it would unsharded: a build failure, not a refusal of the shard's work."""


def _latest_stub_outputs(records: Iterable[WrapperRecord]) -> set[str]:
    latest: dict[str, object] = {}
    for record in records:
        output = record.get("output")
        if isinstance(output, str):
            latest[os.path.normpath(output)] = record.get("action")
    return {path for path, action in latest.items() if action == "stub"}


_REAL_WORK_ACTIONS = frozenset({"compile", "host-pass", "link-probe-rebuild"})


def _failed(record: WrapperRecord) -> bool:
    return record.get("exit") not in (0, None)


def _is_tu_compile(record: WrapperRecord) -> bool:
    """A record of a TU compiled for real (in the seat or the source partition)."""
    action = record.get("action")
    return action in ("compile", "link-probe-rebuild") or (
        action == "passthrough" and bool(record.get("tu"))
    )


def _reached_a_tu(record: WrapperRecord) -> bool:
    """A record of one of the package's TUs: compiled, stubbed or passed through."""
    return _is_tu_compile(record) or record.get("action") in ("stub", "host-pass")


def _last_lines(build_log: str) -> str:
    """The log's last three lines that say anything, as a reason quotes them."""
    last = [line.strip() for line in build_log.splitlines() if line.strip()][-3:]
    return "its last lines: " + (" | ".join(last) or "(none)")


def scratch_probe_failures(records: Sequence[WrapperRecord]) -> list[int]:
    """Indexes of failed TU compiles that the build went past: probes under a fixed name.

    Some setup.py scripts probe the toolchain by writing a test program to one fixed
    path inside the tree and compiling it again and again (pycryptodome's
    ``compiler_opt.test_compilation`` writes ``build/test1.c`` some thirty times, one
    feature each, and expects the probes for ``intrin.h`` or ARMv8 intrinsics to fail on
    x86-64 Linux). No name list knows such a path, and its TU key is stable, so the seat
    treats it as a TU. What gives it away is the order: a real TU that fails stops the
    build, so nothing compiles that path again after the failure; a probe's failure is
    an answer, and the build goes on to compile the same path successfully. A failed
    compile followed later in the log by a successful compile of the same TU key is such
    a probe; one that is never followed by a success is a real failure.
    """
    last_success: dict[str, int] = {}
    for index, record in enumerate(records):
        tu = record.get("tu")
        if isinstance(tu, str) and _is_tu_compile(record) and not _failed(record):
            last_success[tu] = index
    return [
        index
        for index, record in enumerate(records)
        if _is_tu_compile(record)
        and _failed(record)
        and isinstance(record.get("tu"), str)
        and last_success.get(str(record["tu"]), -1) > index
    ]


def _probe_sources(records: Sequence[WrapperRecord]) -> set[str]:
    """Source paths (as written and as file names) of the probes that failed."""
    sources: set[str] = set()
    scratch = set(scratch_probe_failures(records))
    for index, record in enumerate(records):
        argv = record.get("argv")
        is_probe = record.get("action") == "probe" or index in scratch
        if not is_probe or not _failed(record) or not isinstance(argv, list):
            continue
        arguments = [str(item) for item in argv]
        for source in parse_compiler_args(arguments[0], arguments[1:]).sources:
            sources.update((source, Path(source).name))
    return sources


def _real_diagnostics(build_log: str, records: Sequence[WrapperRecord]) -> list[str]:
    """Diagnostic lines not explained by a build-system probe that failed on purpose.

    Probes are meant to fail sometimes (pybind11's ``has_flag`` tries a flag, CMake's
    try_compile tests a feature), and setuptools shows their errors in the build log.
    A located diagnostic is a probe's when it names a probe marker or the source of a
    failed probe; an unlocated driver error (``g++: error: unrecognized command-line
    option``) is a probe's when probes failed and no real compile did.
    """
    probe_sources = _probe_sources(records)
    scratch = set(scratch_probe_failures(records))
    probes_failed = bool(probe_sources)
    real_failed = any(
        _failed(record)
        and index not in scratch
        and (
            record.get("action") in _REAL_WORK_ACTIONS
            or (record.get("action") == "passthrough" and record.get("tu"))
        )
        for index, record in enumerate(records)
    )
    real: list[str] = []
    for line, located in diagnostic_lines(build_log):
        if any(marker in line for marker in PROBE_MARKERS):
            continue
        if located and any(source in line for source in probe_sources):
            continue
        if not located and probes_failed and not real_failed:
            continue
        real.append(line)
    return real


@dataclass(frozen=True)
class ExpectedCompile:
    """A compile the build system will run, from its compile database."""

    tu: str
    """The partition key of its source."""
    output: str | None
    """The object's real absolute path, where the database names it."""


def missing_compiles(
    expected: Iterable[ExpectedCompile], records: Sequence[WrapperRecord]
) -> list[ExpectedCompile]:
    """The *expected* compiles that no successful wrapper record shows.

    A compile is matched by its object path where the database gives one (one source
    compiled twice with different flags makes two objects under one key), else by key.
    """
    outputs: set[str] = set()
    keys: set[str] = set()
    for record in records:
        if not _is_tu_compile(record) or _failed(record):
            continue
        output, tu = record.get("output"), record.get("tu")
        if isinstance(output, str):
            outputs.add(os.path.realpath(output))
        if isinstance(tu, str):
            keys.add(tu)
    return [
        compile_
        for compile_ in expected
        if (compile_.output not in outputs if compile_.output else compile_.tu not in keys)
    ]


def _is_library_link(record: WrapperRecord) -> bool:
    """A shared-library or device link: a target of the package. A failed executable
    link is most often a build system asking whether something links (a feature test
    in a temporary directory), and its answer is not a shard failure."""
    argv = record.get("argv")
    if not isinstance(argv, list) or not argv:
        return True  # nothing says otherwise: count it
    arguments = [str(item) for item in argv]
    parsed = parse_compiler_args(arguments[0], arguments[1:])
    return parsed.shared or parsed.stage == "device-link"


def _link_notes(records: Sequence[WrapperRecord]) -> tuple[list[str], list[str]]:
    """(tolerated links, failed links the wrapper did not recognise), one line each."""
    tolerated: list[str] = []
    unrecognised: list[str] = []
    for record in records:
        action, output = record.get("action"), record.get("output")
        name = Path(str(output)).name if output else "a link"
        symbols = record.get("unresolved")
        shown = ", ".join(str(s) for s in symbols[:3]) if isinstance(symbols, list) else ""
        count = record.get("unresolved_count")
        more = f" and {count - 3} more" if isinstance(count, int) and count > 3 else ""
        if action == "link-unresolved" or (action == "link" and _failed(record) and symbols):
            what = "tolerated"
            if action == "link":
                what = f"failed (exit {record.get('exit')})"
            tolerated.append(f"{name}: {what}, unresolved symbols only ({shown}{more})")
        elif action == "link" and _failed(record) and _is_library_link(record):
            unrecognised.append(
                f"{name}: failed (exit {record.get('exit')}) with something other than "
                "unresolved symbols"
            )
    return tolerated, unrecognised


def shard_gate(
    exit_code: int,
    build_log: str,
    objects: Sequence[tuple[str, int]],
    wrapper_records: Sequence[WrapperRecord],
    expected: Sequence[ExpectedCompile] | None = None,
    *,
    pure_wheel: str | None = None,
) -> ShardGateResult:
    """Decide whether a shard's build is acceptable.

    * The wrapper must have run (no records: the build never reached the compiler
      through the wrapper, so the shard filled no cache). A build that exited non-zero
      before its first TU (at most the build system's compiler checks went through the
      wrapper) is said to have failed, with its last lines. *pure_wheel*: the file name
      of the build's wheel where it holds no extension module; a build that compiled
      nothing and made one is a package with nothing to shard, and is told so.
    * No compiler diagnostic may appear in the log (except those of build-system probes
      that failed on purpose, see :func:`_real_diagnostics`), and no TU compile may have
      failed in the wrapper's records: a broken TU is broken in the link job too.
      Probes compiled under a fixed in-tree name that the build went past are not TU
      failures (:func:`scratch_probe_failures`).
    * *expected*, the compiles of this shard's slice from the build's compile database
      (None where the build system writes none, as setuptools), must all have run:
      each one missing is named. This is the proof that a build which stopped (ninja
      at step 418 of 488, after a link it could not get past) filled the whole slice.
    * Exit 0 passes on those alone.
    * A non-zero exit passes only if real objects (larger than one byte and not a stub
      the wrapper wrote) exist and the failure was the expected one. With the slice
      proven complete, any failed links are only reported. Without that proof, every
      link that failed must have failed on unresolved symbols alone (a link that failed
      otherwise stopped the build, and the TUs after it never compiled), and the log
      must show an unresolved-symbol error or the wrapper must have tolerated one.
    """
    counts = action_counts(wrapper_records)
    result_counts = {
        "compiled": counts.get("compile", 0) + counts.get("link-probe-rebuild", 0),
        "stubbed": counts.get("stub", 0),
        "probed": counts.get("probe", 0),
    }
    reasons: list[str] = []
    broke_early = False
    if not wrapper_records and pure_wheel is not None:
        reasons.append(
            f"nothing to shard: the build called no compiler and its wheel, {pure_wheel}, "
            "holds no extension module. Build it unsharded: kiln build without --shards, "
            "and no [sharding] count above 1 in its recipe"
        )
    elif exit_code != 0 and not any(_reached_a_tu(record) for record in wrapper_records):
        # Not a launcher to check: the build broke before its first TU (its setup.py, its
        # configure after the compiler checks it made through the wrapper), as it would
        # unsharded.
        broke_early = True
        reasons.append(
            f"the build failed (exit {exit_code}) before it compiled any of its TUs; "
            + _last_lines(build_log)
        )
    elif not wrapper_records:
        reasons.append(
            "wrapper never invoked: the build did not call the compiler through the "
            "seat wrapper (check CC/CXX, CMAKE_<LANG>_COMPILER_LAUNCHER, PYTORCH_NVCC)"
        )
    diagnostics = _real_diagnostics(build_log, wrapper_records)
    if diagnostics:
        reasons.append("compiler diagnostics in the build log: " + " | ".join(diagnostics[:5]))
    scratch = set(scratch_probe_failures(wrapper_records))
    failed = [
        record
        for index, record in enumerate(wrapper_records)
        if _failed(record) and _is_tu_compile(record) and index not in scratch
    ]
    if failed:
        names = ", ".join(str(record.get("tu")) for record in failed[:5])
        reasons.append(f"{len(failed)} TU compile(s) failed in the wrapper: {names}")
    missing = missing_compiles(expected, wrapper_records) if expected is not None else []
    if missing and wrapper_records and not failed and not broke_early:
        names = ", ".join(sorted({compile_.tu for compile_ in missing})[:10])
        reasons.append(
            f"{len(missing)} of the {len(expected or ())} compile(s) of this shard's slice "
            f"never ran (the build stopped before them): {names}"
        )
    tolerated, unrecognised = _link_notes(wrapper_records)

    if exit_code != 0 and not reasons:
        stubs = _latest_stub_outputs(wrapper_records)
        real_objects = [
            path for path, size in objects if size > 1 and os.path.normpath(path) not in stubs
        ]
        if not real_objects:
            reasons.append(
                f"build exited {exit_code} and left no compiled objects (only stubs or "
                "empty files): the shard compiled nothing"
            )
        elif expected is None:
            if unrecognised:
                reasons.append(
                    f"build exited {exit_code} after a link that failed with something "
                    f"other than unresolved symbols ({'; '.join(unrecognised[:3])}): the "
                    "build stopped there, and without a compile database nothing shows "
                    "that the rest of the slice compiled"
                )
            elif not (has_unresolved_symbols(build_log) or tolerated):
                reasons.append(
                    f"build exited {exit_code} without an unresolved-symbol link error, "
                    "the only failure a shard is allowed"
                )
    return ShardGateResult(
        passed=not reasons,
        reasons=tuple(reasons),
        actions=counts,
        links=(*tolerated, *unrecognised),
        slice_compiles=None if expected is None else len(expected),
        build_failed=broke_early or (exit_code != 0 and bool(failed)),
        **result_counts,
    )


# --------------------------------------------------------------------------- link gate


@dataclass
class LinkGateResult:
    """The verdict on a link job: whether the shards handed over the whole build."""

    passed: bool
    hits: int
    misses: int
    total: int
    problems: list[str] = field(default_factory=list)
    """Every reason it failed: shards not merged, misses, total 0, the compile ledger."""
    missed: list[dict[str, Any]] = field(default_factory=list)
    """Each missed TU, the shard that compiled it and how its command line differed."""


def shard_refusal(
    manifest: ShardManifest,
    cell_id: str,
    index: int,
    count: int,
    own_toolchain: Mapping[str, Any],
    where: str,
) -> str | None:
    """Why the archive named as shard *index* of *count* of *cell_id* is not merged, or
    None when it is merged. *where* names the manifest for the message.

    An archive is merged only when its manifest says it is this shard of this cell and
    it was built with the link job's toolchain: entries of another architecture list or
    compiler would each be a miss, and merging them would only hide which shard it was.
    """
    label = shard_label(index, count)
    if manifest.cell != cell_id:
        return f"{label} belongs to cell {manifest.cell!r}, not {cell_id!r}; not merged ({where})"
    if (manifest.index, manifest.count) != (index, count):
        # by its numbers, not its label: the label is free text from another job
        theirs_label = shard_label(manifest.index, manifest.count)
        return f"{label} is {theirs_label} by its manifest, not by its name; not merged ({where})"
    theirs = manifest.toolchain.model_dump()
    differing = sorted(k for k in own_toolchain if theirs.get(k) != own_toolchain[k])
    if differing:
        details = "; ".join(
            f"{k}: shard has {theirs.get(k)!r}, link job has {own_toolchain[k]!r}"
            for k in differing
        )
        return f"{label} was built with a different toolchain ({details}); not merged ({where})"
    return None


def link_gate(
    merge_problems: Sequence[str],
    hits: int,
    misses: int,
    ledger_problems: Sequence[str] = (),
    missed: Sequence[dict[str, Any]] = (),
    remote_troubles: Sequence[str] = (),
    *,
    cython_misses: int = 0,
    cython_missed: Sequence[str] = (),
) -> LinkGateResult:
    """The link gate, a count and not a ratio: **zero misses and total > 0**, with every
    shard merged and the compile ledger clean.

    One miss can be a 470-second TU; a 94% hit rate once hid four shards built for the
    wrong architecture. Total 0 means the cache was never consulted: nothing was handed
    over. *merge_problems* name the shards that are missing or were not merged (their
    TUs recompiled, so the build still made a wheel); *ledger_problems* are extension
    modules whose compiles no shard accounts for. *remote_troubles* say why the remote
    storage could not be read; with misses, they are why the shards' entries were not.
    *cython_misses* are Cython transpiles the shards did not hand over (*cython_missed*
    their modules), counted like compiler misses.
    """
    total = hits + misses
    problems = list(merge_problems)
    if misses:
        problems.append(_misses_problem(misses, missed))
    if total == 0:
        problems.append("total 0: the cache was never consulted, so no handoff happened")
    if misses:
        problems.extend(
            f"{trouble}: what the shards stored there was not read" for trouble in remote_troubles
        )
    if cython_misses:
        problems.append(
            f"{cython_misses} Cython cache miss(es): the shards did not hand over "
            + ", ".join(cython_missed)
        )
    problems.extend(ledger_problems)
    return LinkGateResult(not problems, hits, misses, total, problems, list(missed))


def _misses_problem(misses: int, missed: Sequence[dict[str, Any]]) -> str:
    """The gate's line for *misses*, by what the link job's explanation of each missed
    TU found (``_explain_misses`` in :mod:`wheelkiln.shard.link`): a TU a shard compiled was
    handed over under another key (its compile differs from the link job's, and running
    that shard again makes the same key), one no shard compiled was not handed over."""
    by_shard = sum(1 for entry in missed if entry.get("shard") is not None)
    if not missed or by_shard == 0:
        return f"{misses} cache miss(es): the shards did not hand over every TU"
    differing = "compiled by a shard with a compile that differs from the link job's"
    if by_shard == len(missed):
        return f"{misses} cache miss(es): each {differing} (what differs is said with each TU)"
    return (
        f"{misses} cache miss(es): {by_shard} {differing} (what differs is said with each "
        f"TU), {len(missed) - by_shard} compiled by no shard"
    )


def find_objects(build_dirs: Iterable[str | os.PathLike[str]]) -> list[tuple[str, int]]:
    """Every ``*.o`` and ``*.obj`` file under *build_dirs*, as (path, size), sorted."""
    found: dict[str, int] = {}
    for build_dir in build_dirs:
        for directory, _, files in os.walk(build_dir):
            for name in files:
                if name.endswith((".o", ".obj")):
                    path = Path(directory, name)
                    try:
                        found[str(path)] = path.stat().st_size
                    except OSError:
                        continue  # a dangling link or a file removed meanwhile
    return sorted(found.items())


def read_compile_database(
    path: str | os.PathLike[str],
    package_root: str | os.PathLike[str],
    build_dir: str | os.PathLike[str] | None = None,
) -> list[ExpectedCompile] | None:
    """The TU compiles listed in a ``compile_commands.json``, or None without one.

    meson always writes the file into its build directory, CMake when
    ``CMAKE_EXPORT_COMPILE_COMMANDS`` is on. Entries that are not one-source compiles
    (meson lists Cython's transpile steps too) and build-system probes are left out.
    An unreadable file is None: the gate then falls back to the log rules.
    """
    import json

    from wheelkiln.shard.partition import tu_key
    from wheelkiln.shell_words import split_words

    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(entries, list):
        return None
    compiles: list[ExpectedCompile] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        directory = str(entry.get("directory", ""))
        arguments = entry.get("arguments")
        if not isinstance(arguments, list):
            try:
                arguments = split_words(str(entry.get("command", "")))
            except ValueError:
                continue
        arguments = [str(argument) for argument in arguments]
        if not arguments or not directory:
            continue
        parsed = parse_compiler_args(arguments[0], arguments[1:])
        source = str(entry.get("file") or (parsed.sources[0] if parsed.sources else ""))
        if not parsed.is_tu or not source:
            continue
        if any(marker in value for value in (source, directory) for marker in PROBE_MARKERS):
            continue
        output = entry.get("output") or parsed.object_path()
        compiles.append(
            ExpectedCompile(
                tu_key(source, package_root, directory, build_dir),
                str(Path(directory, str(output)).resolve()) if output else None,
            )
        )
    return compiles
