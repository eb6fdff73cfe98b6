"""The bench harness: one target under four nested cache conditions.

Each condition is the one below it with a further cache taken away:

* **hot**: same inputs as a build that filled the cache: every object comes from the
  cache (``all-hits``). With ``wheel_cache`` a second hot run is recorded in which the
  whole build is skipped because the wheel cache holds the wheel (``wheel-cache``).
* **warm**: the cache is populated, but ``SOURCE_DATE_EPOCH`` moved, as every new
  commit does. It must cost what hot costs: any miss means a per-commit value leaked
  into a cache key, so the run FAILS and names the TUs that missed; its extension
  modules must also be byte-identical to hot's.
* **cold**: a fresh cache namespace of its own (``bench-<run>-<repeat>``) *and* forced
  recache. A plain ``--no-cache`` is not cold while a shared cache still serves
  objects, and a private namespace alone is not cold if a remote already has it.
* **frozen**: cold, plus empty build environments (and their kept bytecode) and pip and
  uv caches, so the build requirements are fetched, installed and compiled again.
  Destructive and opt-in; labelled ``frozen*`` (and left out of every ratio) when a cache
  could not be emptied.

Namespaces: each repeat's cold run fills its own namespace, and that repeat's hot and
warm runs read it. Without cold, warm/hot read a namespace filled once per bench run
by an unrecorded priming build. The bench's compiler cache lives in a directory of its
own (``$KILN_HOME/bench-cache/<backend>``) so that benchmarks never evict the entries
of real builds.

Within a repeat the order is frozen, cold, hot, warm: warm is judged against hot (its
extension digests), so hot runs first and warm's verdict is known when it is recorded.

The whole run holds the builder lock. When another build holds it, nothing runs and
the result says who holds it: ``kiln bench`` then exits 0, so cron can drive it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import resource
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from wheelkiln import run, ui
from wheelkiln.bench import store
from wheelkiln.builder.cell import BuildOutcome
from wheelkiln.builder_lock import BuilderLock
from wheelkiln.cells import Cell
from wheelkiln.errors import GateError, KilnError, UsageError
from wheelkiln.paths import envs_dir, kiln_home, resolve_workdir
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.settings import (
    DEFAULT_SOURCE_DATE_EPOCH,
    BuildOptions,
    JobSetup,
    resolve_build_settings,
    with_job,
)

SCENARIO_SETS: dict[str, tuple[str, ...]] = {
    "frozen": ("frozen",),
    "cold": ("cold",),
    "warm": ("warm",),
    "hot": ("hot",),
    "all": ("cold", "warm", "hot"),
    "everything": ("frozen", "cold", "warm", "hot"),
}
ORDER = ("frozen", "cold", "hot", "warm")
"""Execution order within one repeat (hot before warm: warm is judged against hot)."""
WARM_EPOCH_STEP = 86_400
"""How far warm moves SOURCE_DATE_EPOCH: one day per repeat, like a new commit."""


def expand_scenarios(names: Iterable[str]) -> tuple[str, ...]:
    """``all``/``everything`` expanded, duplicates dropped, in execution order."""
    chosen: set[str] = set()
    for name in names:
        if name not in SCENARIO_SETS:
            raise UsageError(
                f"Unknown scenario {name!r}.",
                hint="Scenarios: " + ", ".join(SCENARIO_SETS) + ".",
            )
        chosen.update(SCENARIO_SETS[name])
    return tuple(name for name in ORDER if name in chosen)


@dataclass(frozen=True)
class BenchSettings:
    scenarios: tuple[str, ...]
    """Expanded scenario names (see :func:`expand_scenarios`)."""
    jobs: int | None = None
    repeat: int = 1
    shards: int = 1
    store_path: Path | None = None
    destructive: bool = False
    wheel_cache: bool = False
    """Also record a hot run served whole from the wheel cache (hot kind ``wheel-cache``)."""
    cache: str | None = None
    """Compiler cache backend (default: the recipe's)."""
    cache_dir: Path | None = None
    """The bench's compiler cache directory (default: ``$KILN_HOME/bench-cache/<backend>``)."""
    workdir: Path | None = None
    builder: str | None = None
    """Builder name for the records (default: the host name)."""
    quiet: bool = False


@dataclass
class BenchResult:
    status: Literal["done", "busy"]
    run_id: str
    store_path: Path
    lock_path: Path
    holder: dict[str, Any] | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    aborted: str | None = None
    """Why the run stopped early (a build failed), if it did."""

    @property
    def failures(self) -> list[str]:
        return [
            f"{r['scenario']} (repeat {r['repeat'] + 1}): {problem}"
            for r in self.records
            for problem in r.get("problems", [])
        ]


BuildFn = Callable[[LoadedRecipe, Cell, BuildOptions], BuildOutcome]
ShardedFn = Callable[..., dict[str, Any]]


def _default_build(loaded: LoadedRecipe, cell: Cell, options: BuildOptions) -> BuildOutcome:
    from wheelkiln.builder.cell import build_cell

    return build_cell(loaded, cell, options)


def _default_record(outcome: BuildOutcome) -> dict[str, Any]:
    from wheelkiln.builder.record import build_record

    return build_record(outcome, kind="bench")


def _default_sharded() -> ShardedFn:
    try:
        from wheelkiln.executors.sharded import run_sharded
    except ImportError:
        raise UsageError(
            "--shards needs the local executor (wheelkiln.executors.sharded.run_sharded), "
            "which this installation does not have.",
            hint="Bench the unsharded build (leave out --shards).",
        ) from None
    return run_sharded


def _default_plan_digest(loaded: LoadedRecipe, cell: Cell, options: BuildOptions) -> str | None:
    from wheelkiln.builder.wheel_cache import plan_input_digest

    return plan_input_digest(loaded, cell, options)


def _default_outcome_digest(
    loaded: LoadedRecipe, outcome: BuildOutcome, options: BuildOptions
) -> str:
    from wheelkiln.builder.wheel_cache import outcome_input_digest

    return outcome_input_digest(loaded, outcome, options)


def _pip_cache_dir(cell: Cell) -> tuple[Path | None, str | None]:
    """pip's cache directory as the build's interpreter sees it; (None, None) when pip
    caching is disabled, (None, problem) when it cannot be found out."""
    from wheelkiln.builder.environment import interpreter_for

    candidates = []
    with contextlib.suppress(KilnError):
        candidates.append(interpreter_for(cell.python))
    candidates.append(sys.executable)
    last = "no interpreter with pip"
    for python in candidates:
        done = run.run([python, "-m", "pip", "cache", "dir"], check=False)
        text = done.output.strip()
        if done.returncode == 0 and text:
            return Path(text.splitlines()[-1].strip()), None
        if "cache is disabled" in text:
            return None, None
        last = f"`{python} -m pip cache dir` failed: {text.splitlines()[-1] if text else '?'}"
    return None, last


def _uv_cache_dir() -> tuple[Path | None, str | None]:
    """uv's cache directory, where uv makes the build environments; (None, None) without uv."""
    from wheelkiln.builder.environment import choose_installer

    installer = choose_installer()
    if installer.uv is None:
        return None, None
    done = run.run([installer.uv, "cache", "dir"], check=False)
    text = done.output.strip()
    if done.returncode == 0 and text:
        return Path(text.splitlines()[-1].strip()), None
    return None, f"`{installer.uv} cache dir` failed: {text.splitlines()[-1] if text else '?'}"


def empty_package_caches(cell: Cell) -> list[str]:
    """Delete the build environments, their kept bytecode and pip's and uv's caches.
    Returns what could not be emptied."""
    from wheelkiln.builder.bytecode_store import store_for
    from wheelkiln.builder.environment import finish_bytecode

    finish_bytecode()  # a compile still writing into an environment would outlive its delete
    problems: list[str] = []
    targets: list[Path] = [envs_dir(), store_for(envs_dir())]
    for package_cache, problem in (_pip_cache_dir(cell), _uv_cache_dir()):
        if problem:
            problems.append(problem)
        if package_cache is not None:
            targets.append(package_cache)
    for target in targets:
        if not target.exists():
            continue
        errors: list[str] = []

        def collect(_func: Any, path: str, exc_info: Any, errors: list[str] = errors) -> None:
            errors.append(f"{path}: {exc_info[1]}")

        shutil.rmtree(target, onerror=collect)  # onexc is 3.12+
        if errors or target.exists():
            problems.append(f"could not empty {target}: {errors[0] if errors else 'still there'}")
    return problems


@dataclass
class BenchHooks:
    """The seams a unit test replaces; the defaults do real builds."""

    build: BuildFn = _default_build
    record: Callable[[BuildOutcome], dict[str, Any]] = _default_record
    sharded: Callable[[], ShardedFn] = _default_sharded
    plan_digest: Callable[[LoadedRecipe, Cell, BuildOptions], str | None] = _default_plan_digest
    outcome_digest: Callable[[LoadedRecipe, BuildOutcome, BuildOptions], str] = (
        _default_outcome_digest
    )
    empty_caches: Callable[[Cell], list[str]] = empty_package_caches
    lock: BuilderLock | None = None
    wheel_cache_root: Path | None = None


@dataclass
class _Timed:
    wall: float
    user: float
    sys: float


class _Stopwatch:
    """Wall time and user/sys CPU of this process and its children over one step."""

    def __enter__(self) -> _Stopwatch:
        self._self = resource.getrusage(resource.RUSAGE_SELF)
        self._children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        wall = time.perf_counter() - self._start
        me = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.timed = _Timed(
            wall,
            (me.ru_utime - self._self.ru_utime) + (children.ru_utime - self._children.ru_utime),
            (me.ru_stime - self._self.ru_stime) + (children.ru_stime - self._children.ru_stime),
        )


def _new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def _missed(record: dict[str, Any]) -> str:
    names: list[str] = record.get("cache", {}).get("missed_tus", [])
    if not names:
        return "the cache backend cannot name them; see the log"
    shown = ", ".join(names[:20])
    return shown + (f" and {len(names) - 20} more" if len(names) > 20 else "")


def _extension_problems(
    extensions: dict[str, str], reference: dict[str, str] | None, against: str
) -> list[str]:
    if reference is None:
        return []
    names = set(extensions) | set(reference)
    differing = sorted(name for name in names if extensions.get(name) != reference.get(name))
    if not differing:
        return []
    return [
        f"extension modules differ from {against}'s: {', '.join(differing)} (the compile "
        "output depends on a per-build value)"
    ]


def _cache_problems(record: dict[str, Any], scenario: str) -> list[str]:
    """Hot and warm must be all hits: zero misses (a count, not a ratio) and total > 0."""
    cache = record.get("cache", {})
    misses, total = int(cache.get("misses", 0)), int(cache.get("total", 0))
    if misses:
        why = (
            "a per-commit value (SOURCE_DATE_EPOCH moved) leaked into a cache key"
            if scenario == "warm" else "the same inputs did not hit the cache"
        )
        return [f"{misses} of {total} cacheable compiles missed the cache ({why}): "
                f"{_missed(record)}"]
    if total == 0:
        return ["the compiler cache was never consulted (0 cacheable compiles)"]
    return []


class _Bench:
    def __init__(
        self, loaded: LoadedRecipe, cell: Cell, settings: BenchSettings, hooks: BenchHooks,
        run_id: str, store_path: Path,
    ) -> None:
        self.loaded = loaded
        self.cell = cell
        self.settings = settings
        self.hooks = hooks
        self.run_id = run_id
        self.store_path = store_path
        self.backend = settings.cache or loaded.recipe.cache.backend
        self.cache_dir = settings.cache_dir or kiln_home() / "bench-cache" / self.backend
        self.jobs = settings.jobs or loaded.recipe.build.jobs or os.cpu_count() or 1
        self.logs = store_path.parent / "bench-logs" / run_id
        self.records: list[dict[str, Any]] = []
        self.primed_namespace: str | None = None
        self.primed_extensions: dict[str, str] | None = None
        self.stored_wheel = False

    # -- one step ----------------------------------------------------------------------

    def options(self, scenario: str, namespace: str, *, recache: bool, epoch: int) -> BuildOptions:
        options = resolve_build_settings(
            self.loaded, cache=self.backend, cache_dir=self.cache_dir, namespace=namespace,
            recache=recache, workdir=self.settings.workdir, jobs=self.jobs,
            source_date_epoch=epoch,
        )
        return with_job(options, JobSetup(suffix=f"bench-{scenario}", quiet=self.settings.quiet))

    def scratch(self, name: str) -> Path:
        """An emptied directory beside the job trees (wheels copied out, shard outputs)."""
        workdir = resolve_workdir(self.settings.workdir)
        path = workdir / f"{self.cell.id}-bench-{name}"
        shutil.rmtree(path, ignore_errors=True)
        return path

    def keep_log(self, record: dict[str, Any], label: str) -> None:
        log = record.get("log")
        if not log or not Path(log).is_file():
            return
        self.logs.mkdir(parents=True, exist_ok=True)
        kept = self.logs / f"{label}.log"
        shutil.copyfile(log, kept)
        record["log"] = str(kept)

    def finish(
        self, build: dict[str, Any], *, scenario: str, repeat: int, timed: _Timed,
        namespace: str | None, epoch: int, problems: list[str], hot_kind: str | None = None,
    ) -> dict[str, Any]:
        record = store.bench_record(
            build, run_id=self.run_id, repeat=repeat, scenario=scenario, hot_kind=hot_kind,
            jobs=self.jobs, shards=self.settings.shards, namespace=namespace,
            source_date_epoch=epoch, step_wall_seconds=timed.wall, user_seconds=timed.user,
            sys_seconds=timed.sys, problems=problems, builder=self.settings.builder,
        )
        store.append(record, self.store_path)
        self.records.append(record)
        verdict = "[green]ok[/green]" if not problems else "[red]FAILED[/red]"
        ui.info(f"bench {scenario}{' (' + hot_kind + ')' if hot_kind else ''} "
                f"{repeat + 1}/{self.settings.repeat}: {timed.wall:.1f} s, {verdict}")
        for problem in problems:
            ui.warn(problem)
        return record

    def build(
        self, options: BuildOptions, label: str
    ) -> tuple[dict[str, Any], BuildOutcome | None, _Timed]:
        """One build (sharded when asked) → its build record (log kept as ``label``),
        outcome, and step timing."""
        build, outcome, timed = self._build(options)
        self.keep_log(build, label)
        return build, outcome, timed

    def _build(self, options: BuildOptions) -> tuple[dict[str, Any], BuildOutcome | None, _Timed]:
        if self.settings.shards > 1:
            sharded = self.hooks.sharded()
            out_dir = self.scratch(f"{options.job.suffix}-dist")
            with _Stopwatch() as watch:
                try:
                    report = sharded(self.loaded, self.cell, options, self.settings.shards,
                                     out_dir=out_dir)
                except GateError as exc:
                    report = {"gate": {"passed": False, "problems": [exc.message]}}
            link = report.get("link")
            build = dict(link) if isinstance(link, dict) else self.bare_record(options)
            gate = report.get("gate", {})
            if not gate.get("passed", True):
                build["exit_code"] = build.get("exit_code") or 1
                build["shard_gate_problems"] = list(gate.get("problems", []))
            return build, None, watch.timed
        with _Stopwatch() as watch:
            outcome = self.hooks.build(self.loaded, self.cell, options)
        return self.hooks.record(outcome), outcome, watch.timed

    def bare_record(self, options: BuildOptions) -> dict[str, Any]:
        """The facts a record has when there is no build outcome to take them from."""
        import platform
        import socket

        return {
            "schema": 1, "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "target": self.cell.package, "cell": self.cell.id, "axes": self.cell.axes(),
            "arch_list": list(self.cell.arch_list), "builder": socket.gethostname(),
            "arch": platform.machine(), "exit_code": 1, "wall_seconds": 0.0,
            "cpu_seconds": 0.0, "peak_rss_bytes": 0,
            "cache": {"backend": options.cache, "missed_tus": []}, "wheel": None,
            "extensions": {}, "source_digest": None, "build_env": None, "tool_versions": {},
            "log": None,
        }

    @staticmethod
    def build_failure(build: dict[str, Any]) -> list[str]:
        if build.get("exit_code", 0) == 0:
            return []
        problems = [f"the build failed (exit {build.get('exit_code')}); log: {build.get('log')}"]
        problems += build.get("shard_gate_problems", [])
        return problems

    # -- scenarios ---------------------------------------------------------------------

    def run_cold(self, repeat: int, *, frozen: bool) -> dict[str, Any]:
        scenario = "frozen" if frozen else "cold"
        namespace = f"bench-{self.run_id}-{repeat + 1}" + ("-frozen" if frozen else "")
        emptied: list[str] = []
        if frozen:
            with ui.step("Emptying build environments and pip's and uv's caches (frozen)",
                         quiet=self.settings.quiet):
                emptied = self.hooks.empty_caches(self.cell)
            if emptied:
                scenario = "frozen*"
                for problem in emptied:
                    ui.warn(f"{problem}: this run is frozen* and stays out of every ratio")
        epoch = DEFAULT_SOURCE_DATE_EPOCH
        options = self.options(scenario.rstrip("*"), namespace, recache=True, epoch=epoch)
        build, outcome, timed = self.build(options, f"{scenario.rstrip('*')}-{repeat + 1}")
        if frozen:
            build["frozen_problems"] = emptied
        problems = self.build_failure(build)
        record = self.finish(build, scenario=scenario, repeat=repeat, timed=timed,
                             namespace=namespace, epoch=epoch, problems=problems)
        if outcome is not None and not problems:
            self.maybe_store_wheel(outcome, options)
        return record

    def prime(self) -> str:
        """Fill a namespace for warm/hot when no cold run of this repeat did (not recorded)."""
        if self.primed_namespace is not None:
            return self.primed_namespace
        namespace = f"bench-{self.run_id}"
        options = self.options("prime", namespace, recache=True, epoch=DEFAULT_SOURCE_DATE_EPOCH)
        ui.info(f"Priming the cache namespace {namespace} for warm/hot (not recorded)")
        build, outcome, _ = self.build(options, "prime")
        problems = self.build_failure(build)
        if problems:
            raise _Abort("priming build: " + "; ".join(problems))
        self.primed_namespace = namespace
        self.primed_extensions = dict(build.get("extensions") or {})
        if outcome is not None:
            self.maybe_store_wheel(outcome, options)
        return namespace

    def run_hot(self, repeat: int, namespace: str, reference: dict[str, str] | None,
                against: str) -> dict[str, Any]:
        epoch = DEFAULT_SOURCE_DATE_EPOCH
        options = self.options("hot", namespace, recache=False, epoch=epoch)
        build, outcome, timed = self.build(options, f"hot-{repeat + 1}")
        problems = self.build_failure(build)
        if not problems:
            problems += _cache_problems(build, "hot")
            problems += _extension_problems(build.get("extensions") or {}, reference, against)
        record = self.finish(build, scenario="hot", repeat=repeat, timed=timed,
                             namespace=namespace, epoch=epoch, problems=problems,
                             hot_kind="all-hits")
        if outcome is not None and not problems:
            self.maybe_store_wheel(outcome, options)
        return record

    def run_warm(self, repeat: int, namespace: str, reference: dict[str, str] | None,
                 against: str) -> dict[str, Any]:
        epoch = DEFAULT_SOURCE_DATE_EPOCH + WARM_EPOCH_STEP * (repeat + 1)
        options = self.options("warm", namespace, recache=False, epoch=epoch)
        build, _, timed = self.build(options, f"warm-{repeat + 1}")
        problems = self.build_failure(build)
        if not problems:
            problems += _cache_problems(build, "warm")
            problems += _extension_problems(build.get("extensions") or {}, reference, against)
        return self.finish(build, scenario="warm", repeat=repeat, timed=timed,
                           namespace=namespace, epoch=epoch, problems=problems)

    def maybe_store_wheel(self, outcome: BuildOutcome, options: BuildOptions) -> None:
        """Put a full build's wheel into the wheel cache (for the wheel-cache hot run)."""
        if not self.settings.wheel_cache or self.stored_wheel or outcome.wheel is None:
            return
        from wheelkiln.builder.wheel_cache import WheelCache

        cache = WheelCache(self.hooks.wheel_cache_root)
        digest = self.hooks.outcome_digest(self.loaded, outcome, options)
        if cache.lookup(digest) is None:
            cache.store(digest, outcome.wheel.path, self.hooks.record(outcome))
        self.stored_wheel = True

    def run_wheel_cache_hot(self, repeat: int) -> dict[str, Any]:
        """Hot, served whole from the wheel cache: plan the input digest, look it up, copy
        the wheel out. What ``kiln build`` costs when nothing changed."""
        from wheelkiln.builder.job import serve_cached_wheel
        from wheelkiln.builder.wheel_cache import WheelCache

        epoch = DEFAULT_SOURCE_DATE_EPOCH
        options = self.options("hot", "-", recache=False, epoch=epoch)
        cache = WheelCache(self.hooks.wheel_cache_root)
        out_dir = self.scratch("wheel-cache-dist")
        with _Stopwatch() as watch:
            digest = self.hooks.plan_digest(self.loaded, self.cell, options)
            hit = serve_cached_wheel(cache, digest, out_dir)
        if hit is None:
            build = self.bare_record(options)
            build["exit_code"] = 0
            problems = [f"the wheel cache has no wheel for input digest {digest} (the inputs "
                        "changed between the builds of this run?)" if digest else
                        "the input digest could not be planned (no build environment)"]
        else:
            # The same record `kiln build` prints when it serves the wheel: this run's
            # figures, the earlier build's record under served_from.
            from wheelkiln.builder.record import served_record

            build = served_record(
                hit.record, wheel_path=out_dir / hit.wheel.name, input_digest=hit.digest,
                wall_seconds=watch.timed.wall, cpu_seconds=watch.timed.user + watch.timed.sys,
                backend=self.backend,
            )
            problems = []
        return self.finish(build, scenario="hot", repeat=repeat, timed=watch.timed,
                           namespace=None, epoch=epoch, problems=problems,
                           hot_kind="wheel-cache")

    def run_repeat(self, repeat: int) -> None:
        wanted = self.settings.scenarios
        ui.info(f"[bold]bench {self.cell.id}[/bold]: repeat {repeat + 1}/{self.settings.repeat}, "
                f"{', '.join(wanted)}; {self.jobs} jobs"
                + (f", {self.settings.shards} shards" if self.settings.shards > 1 else ""))
        if "frozen" in wanted:
            self.check(self.run_cold(repeat, frozen=True))
        reference: dict[str, str] | None = None
        namespace: str | None = None
        if "cold" in wanted:
            cold = self.check(self.run_cold(repeat, frozen=False))
            namespace = cold["namespace"]
            reference = dict(cold.get("extensions") or {})
        against = "cold"
        if ("hot" in wanted or "warm" in wanted) and namespace is None:
            namespace = self.prime()
            reference = self.primed_extensions
            against = "the priming build"
        assert namespace is not None or not ({"hot", "warm"} & set(wanted))
        if "hot" in wanted:
            assert namespace is not None
            hot = self.check(self.run_hot(repeat, namespace, reference, against))
            if hot["status"] == "ok":
                reference, against = dict(hot.get("extensions") or {}), "hot"
            if self.settings.wheel_cache:
                self.run_wheel_cache_hot(repeat)
        if "warm" in wanted:
            assert namespace is not None
            self.check(self.run_warm(repeat, namespace, reference, against))

    @staticmethod
    def check(record: dict[str, Any]) -> dict[str, Any]:
        """A failed build stops the run (what follows would measure nothing)."""
        if record.get("exit_code", 0) != 0:
            raise _Abort(f"{record['scenario']}: " + "; ".join(record.get("problems", [])))
        return record


class _Abort(Exception):
    pass


def validate(loaded: LoadedRecipe, settings: BenchSettings) -> None:
    """Refuse settings that would measure nothing, before anything runs."""
    if not settings.scenarios:
        raise UsageError("No scenario chosen.", hint="Pass --scenario cold|warm|hot|frozen|all.")
    if "frozen" in settings.scenarios and not settings.destructive:
        raise UsageError(
            "The frozen scenario deletes every build environment under "
            f"{envs_dir()} and pip's and uv's caches.",
            hint="Pass --destructive to allow it, or choose --scenario all.",
        )
    backend = settings.cache or loaded.recipe.cache.backend
    if backend == "none":
        raise UsageError(
            f"{loaded.name} builds without a compiler cache; cache conditions measure nothing.",
            hint="Pass --cache ccache (or sccache).",
        )
    if settings.repeat < 1:
        raise UsageError("--repeat must be at least 1.")
    if settings.shards > 1:
        if {"warm", "hot"} & set(settings.scenarios):
            raise UsageError(
                "--shards benches cold (and frozen) only: shards compile into private caches "
                "that a later warm or hot build never reads.",
                hint="Use --scenario cold with --shards, or leave out --shards.",
            )
        if settings.wheel_cache:
            raise UsageError("--wheel-cache measures a hot run; it does not go with --shards.")


def run_bench(
    loaded: LoadedRecipe, cell: Cell, settings: BenchSettings, hooks: BenchHooks | None = None
) -> BenchResult:
    """Run the chosen scenarios ``settings.repeat`` times and append one record per build.

    Returns ``status="busy"`` (nothing run, nothing written) when another build holds the
    builder lock. A corrupt store is refused before any build, and left untouched.
    """
    hooks = hooks or BenchHooks()
    validate(loaded, settings)
    if settings.shards > 1:
        hooks.sharded()  # fail now, not after an hour of frozen and cold
    store_path = settings.store_path or store.default_store_path()
    _, warnings = store.read(store_path)  # raises on a corrupt store, before any build
    for warning in warnings:
        ui.warn(warning)
    run_id = _new_run_id()
    lock = hooks.lock or BuilderLock()
    if not lock.try_acquire():
        return BenchResult("busy", run_id, store_path, lock.path, holder=lock.holder())
    result = BenchResult("done", run_id, store_path, lock.path)
    bench = _Bench(loaded, cell, settings, hooks, run_id, store_path)
    try:
        for repeat in range(settings.repeat):
            bench.run_repeat(repeat)
    except _Abort as exc:
        result.aborted = str(exc)
    finally:
        lock.release()
        result.records = bench.records
    return result
