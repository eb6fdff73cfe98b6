"""The build job: one cell, whole, into a wheel (``kiln build`` without ``--shards``).

Served from the wheel cache when a build of the same inputs made a wheel before;
otherwise built through the compiler cache, its wheel checked (the recipe's
``[verify]``, and the smoke test when asked), published to the output directory with
its record, remembered by input digest (the cold reference ``kiln build --shards``
compares with) and kept in the wheel cache. The CLI only prints the result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln import ui
from wheelkiln.builder.cell import BuildOutcome, build_cell, job_toolchain
from wheelkiln.builder.record import build_record, publish, remember, served_record
from wheelkiln.builder.wheel_cache import (
    CachedWheel,
    WheelCache,
    fetched_source_digest,
    outcome_input_digest,
    plan_input_digest,
)
from wheelkiln.builder.wheel_checks import smoke_test, verify_wheel
from wheelkiln.cells import Cell
from wheelkiln.errors import BuildError
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.settings import BuildOptions


@dataclass(frozen=True)
class BuildResult:
    """A build job's result: its record, and either the build or the wheel-cache hit."""

    record: dict[str, Any]
    """The build record (``kind: build``, or ``wheel-cache`` when served)."""
    wheel: Path
    """The wheel in the output directory."""
    outcome: BuildOutcome | None
    """The build; None when the wheel was served from the wheel cache."""
    record_path: Path | None
    """Where the record was written beside the wheel; None when served."""
    served: CachedWheel | None
    """The wheel-cache entry that served the wheel; None when it was built."""


def serve_cached_wheel(cache: WheelCache, digest: str | None, out_dir: Path) -> CachedWheel | None:
    """Copy the wheel *cache* holds for *digest* into *out_dir*; None when it holds none."""
    return cache.serve(digest, out_dir) if digest else None


def run_build(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    out_dir: Path,
    *,
    smoke: bool = False,
    use_wheel_cache: bool = True,
    wheel_cache: WheelCache | None = None,
) -> BuildResult:
    """Build *cell* into a wheel in *out_dir*, or serve it from the wheel cache.

    Raises :class:`BuildError` when the build fails, or its wheel fails its checks.
    """
    cache = wheel_cache or WheelCache()
    started, cpu_started = time.perf_counter(), time.process_time()
    toolchain = job_toolchain(loaded, options)  # once, for the digest and the build
    known_digest = None
    if use_wheel_cache:
        known_digest = fetched_source_digest(loaded)  # also once, where kiln fetched the source
        planned = plan_input_digest(loaded, cell, options, toolchain, known_digest=known_digest)
        hit = serve_cached_wheel(cache, planned, out_dir)
        if hit is not None:
            return _served(loaded, cell, options, hit, out_dir, started, cpu_started, smoke=smoke)
    outcome = build_cell(loaded, cell, options, toolchain, known_digest=known_digest)
    record = build_record(outcome, kind="build", extra={"recache": options.recache})
    if outcome.exit_code != 0:
        tail = "\n".join(outcome.log_text.splitlines()[-25:])
        raise BuildError(
            f"Building {cell.id} failed (exit {outcome.exit_code}). Last lines:\n{tail}",
            hint=f"Full log: {outcome.log_path}",
        )
    record["verify"] = verify_wheel(outcome, loaded, smoke=smoke)
    record_path = publish(outcome, record, out_dir)
    digest = outcome_input_digest(loaded, outcome, options)
    # Also in the state home, where `kiln build --shards` finds it whatever --out was.
    try:
        remember(record, digest)
    except OSError as exc:  # the wheel and its record are in place: say so, go on
        ui.warn(f"the state home kept no copy of this build's record: {exc}")
    if use_wheel_cache and outcome.wheel is not None:
        try:
            cache.store(digest, outcome.wheel.path, record)
        except OSError as exc:
            # The wheel and its record are in place; a full disk, or a prune that took
            # the entry's staging directory, costs only the next build's shortcut.
            ui.warn(f"the wheel cache kept no copy of {outcome.wheel.path.name}: {exc}")
    return BuildResult(record, Path(record["wheel"]["path"]), outcome, record_path, None)


def _served(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    hit: CachedWheel,
    out_dir: Path,
    started: float,
    cpu_started: float,
    *,
    smoke: bool,
) -> BuildResult:
    """The result of a run that served the wheel of an earlier build of the same inputs."""
    target = out_dir / hit.wheel.name
    record = served_record(
        hit.record,
        wheel_path=target,
        input_digest=hit.digest,
        wall_seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
        backend=options.cache,
    )
    if smoke:
        # The smoke test belongs to this run: a wheel served from the cache is as
        # deliverable as a built one, and its runtime may have changed since.
        try:
            ran = smoke_test(target, loaded, cell)
        except BuildError as exc:
            exc.hint = (
                f"The wheel was served from the wheel cache (input digest {hit.digest[:16]}…); "
                f"--no-wheel-cache rebuilds it. {exc.hint or ''}"
            ).strip()
            raise
        record["verify"] = {**record.get("verify", {}), "smoke": ran}
    return BuildResult(record, target, None, None, hit)
