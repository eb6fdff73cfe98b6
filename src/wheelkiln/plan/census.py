"""The TU census: every TU a build compiles, its family, and its cost.

Three ways to take it, best first:

1. **Measured**: the wrapper logs of an earlier sharded build (every TU is a compile in
   exactly one shard) or the ninja log of an earlier unsharded build (each output's
   start and end, joined to its source through the compile database). The fixed cost of
   one job comes from that build's link job, which compiles nothing (every TU a hit).
2. **A census pass**: one build in which the seat wrapper stubs every TU
   (:func:`census_pass`). It lists the TUs exactly as the build runs them, proves the
   build tolerates stubs, and its wall time is the fixed cost of one job (configure,
   stubs, link). Costs come from the :class:`CostModel`.
3. **A static scan** of the package tree for compilable sources: no build, so no fixed
   cost, and TUs the build generates are missing. Costs from the model.

TUs no log timed get a model estimate, scaled by the measured TUs where there are any.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from wheelkiln.cells import Cell
from wheelkiln.errors import RecipeError
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.recipe.model import Family

LANGUAGES = {".c": "c", ".cc": "c++", ".cpp": "c++", ".cxx": "c++", ".c++": "c++", ".cu": "cuda"}
"""Source suffixes a static scan counts as TUs, and their language."""
SKIPPED_DIRECTORIES = frozenset({".git", "build", "dist", "_skbuild", ".eggs", "__pycache__"})


@dataclass(frozen=True)
class CostModel:
    """A first guess at a TU's seconds with no history: ``(base + per_kib × KiB) ×
    archs`` for nvcc, the same without archs for C and C++.

    The source size stands for the work in the TU and the arch count for nvcc's
    device passes, one per architecture. Headers are not counted, so a small TU that
    includes a heavy template library is underestimated; only relative sizes matter
    for balance, and a measured TU rescales every estimate (:func:`calibrate`)."""

    base: Mapping[str, float] = field(default_factory=lambda: {"cuda": 4.0, "c++": 1.5, "c": 0.5})
    per_kib: Mapping[str, float] = field(
        default_factory=lambda: {"cuda": 1.0, "c++": 0.5, "c": 0.1}
    )

    def estimate(self, language: str, size_bytes: int, archs: int) -> float:
        kib = size_bytes / 1024
        seconds = self.base.get(language, 1.0) + self.per_kib.get(language, 0.5) * kib
        return seconds * (max(archs, 1) if language == "cuda" else 1)


@dataclass(frozen=True)
class CensusTU:
    key: str
    """The partition key: the source path relative to the package root."""
    family: str | None
    seconds: float
    measured: bool
    """Timed by an earlier build (else estimated by the cost model)."""
    language: str = "c++"
    size_bytes: int = 0
    archs: int = 1


@dataclass(frozen=True)
class Census:
    tus: tuple[CensusTU, ...]
    how: str
    """``measured``, ``census pass`` or ``static scan``."""
    fixed_seconds: float | None
    """Wall seconds of one job that compiles nothing (None: not measured)."""
    fixed_how: str
    notes: tuple[str, ...] = ()

    def costs(self) -> dict[str, float]:
        return {tu.key: tu.seconds for tu in self.tus}

    def as_dict(self) -> dict[str, object]:
        return {
            "how": self.how,
            "fixed_seconds": self.fixed_seconds,
            "fixed_how": self.fixed_how,
            "notes": list(self.notes),
            "tus": [
                {
                    "key": tu.key,
                    "family": tu.family,
                    "seconds": round(tu.seconds, 3),
                    "measured": tu.measured,
                    "language": tu.language,
                    "archs": tu.archs,
                }
                for tu in self.tus
            ],
        }


FAMILY_SEARCH_SECONDS = 2.0
"""The longest one family's pattern may take on one TU path. A path is at most a few
hundred characters, so a sane pattern takes microseconds; a nested repeat such as
``(a+)+b`` backtracks exponentially with the path's length and would hang ``kiln plan``
(Python's ``re`` has no timeout, but its matcher checks for signals)."""


class _TooSlow(Exception):
    pass


def family_of(key: str, families: Sequence[Family]) -> str | None:
    """The first family whose pattern is found in the key (recipe order)."""
    for family in families:
        if _found(family, key):
            return family.name
    return None


def _found(family: Family, key: str) -> bool:
    """``re.search`` of the family's pattern in *key*, within
    :data:`FAMILY_SEARCH_SECONDS` where this process can time it: the main thread, no
    other timer running."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getitimer(signal.ITIMER_REAL)[0] > 0
    ):
        return re.search(family.pattern, key) is not None

    def late(_signal: int, _frame: object) -> None:
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, FAMILY_SEARCH_SECONDS)
    try:
        return re.search(family.pattern, key) is not None
    except _TooSlow:
        raise RecipeError(
            f"[[families]] {family.name!r}: its pattern {family.pattern!r} took more than "
            f"{FAMILY_SEARCH_SECONDS:g} s to search the TU path {key!r}; a pattern with a "
            "nested repeat (such as (a+)+) backtracks without end.",
            hint="Write the pattern without a repeat inside a repeat: it is searched in "
            "every TU path of the package.",
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def language_of(key: str) -> str:
    return LANGUAGES.get(PurePosixPath(key).suffix.lower(), "c++")


def arch_count(argv: Sequence[str]) -> int:
    """Device passes an nvcc command line asks for: one per ``-gencode``, else one."""
    gencodes = sum(1 for word in argv if re.match(r"^(?:-gencode|--generate-code)", word))
    if gencodes:
        return gencodes
    for word in argv:
        if word.startswith(("--gpu-architecture=", "-arch=")) and "," in word:
            return len(word.split("=", 1)[1].split(","))
    return 1


def cell_arch_count(env: Mapping[str, str], arch_list: Sequence[str]) -> int:
    """The arch count a static scan assumes: CMake's ``CMAKE_CUDA_ARCHITECTURES`` from
    the recipe's environment, else the cell's arch list."""
    cmake = env.get("CMAKE_CUDA_ARCHITECTURES", "")
    if cmake.strip():
        return len([a for a in re.split(r"[ ;,]+", cmake.strip()) if a])
    return max(len(arch_list), 1)


def scan_tree(package: Path) -> list[str]:
    """Compilable sources under the package, as TU keys (no directory links followed)."""
    keys: list[str] = []
    for directory, subdirectories, files in os.walk(package):
        subdirectories[:] = sorted(
            name
            for name in subdirectories
            if name not in SKIPPED_DIRECTORIES
            and not name.startswith(".")
            and not Path(directory, name).is_symlink()
        )
        for name in sorted(files):
            if PurePosixPath(name).suffix.lower() in LANGUAGES:
                keys.append(Path(directory, name).relative_to(package).as_posix())
    return keys


def _size(package: Path | None, key: str) -> int:
    if package is None or key.startswith("<"):
        return 0
    try:
        return (package / key).stat().st_size
    except OSError:
        return 0


def estimated(
    keys: Iterable[str],
    families: Sequence[Family],
    package: Path | None,
    archs: Mapping[str, int] | int,
    model: CostModel | None = None,
) -> list[CensusTU]:
    model = model or CostModel()
    tus = []
    for key in sorted(set(keys)):
        language = language_of(key)
        size = _size(package, key)
        count = archs if isinstance(archs, int) else archs.get(key, 1)
        tus.append(
            CensusTU(
                key,
                family_of(key, families),
                model.estimate(language, size, count),
                measured=False,
                language=language,
                size_bytes=size,
                archs=count,
            )
        )
    return tus


def calibrate(tus: Sequence[CensusTU]) -> list[CensusTU]:
    """Rescale the estimates by the measured TUs of the same language (the median of
    measured/estimated), so a partly timed census speaks one unit of seconds."""
    model = CostModel()
    ratios: dict[str, list[float]] = {}
    for tu in tus:
        if tu.measured:
            guess = model.estimate(tu.language, tu.size_bytes, tu.archs)
            ratios.setdefault(tu.language, []).append(tu.seconds / guess)
    if not ratios:
        return list(tus)
    every = sorted(r for values in ratios.values() for r in values)
    fallback = every[len(every) // 2]
    out = []
    for tu in tus:
        if tu.measured:
            out.append(tu)
            continue
        values = sorted(ratios.get(tu.language, []))
        scale = values[len(values) // 2] if values else fallback
        out.append(replace(tu, seconds=tu.seconds * scale))
    return out


# ----------------------------------------------------------------------------- history


@dataclass
class History:
    """What earlier builds left: TU seconds, the TUs they saw, and a link job's wall."""

    seconds: dict[str, float] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    archs: dict[str, int] = field(default_factory=dict)
    link_seconds: list[float] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def read_ninja_log(build_dir: Path, package_root: Path) -> dict[str, float]:
    """Seconds per TU key from ``.ninja_log`` and ``compile_commands.json`` in a build
    directory (the last run of each output: ninja appends)."""
    from wheelkiln.shard.gate import read_compile_database

    log = build_dir / ".ninja_log"
    database = read_compile_database(build_dir / "compile_commands.json", package_root, build_dir)
    if database is None or not log.is_file():
        return {}
    by_output = {
        os.path.realpath(compile_.output): compile_.tu for compile_ in database if compile_.output
    }
    spans: dict[str, float] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#"):
            spans.clear()  # a new log version or a restarted log: only the last run counts
            continue
        parts = line.split("\t")
        if len(parts) < 4 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        output = os.path.realpath(build_dir / parts[3])
        if output in by_output:
            spans[by_output[output]] = (int(parts[1]) - int(parts[0])) / 1000
    return spans


def read_history(paths: Iterable[Path]) -> History:
    """Costs from shard archives, shard job directories, wrapper logs, or unsharded
    build job directories (``build/.ninja_log``); link records for the fixed cost."""
    from wheelkiln.shard.balance import read_costs
    from wheelkiln.shard.wrapper_log import WRAPPER_LOG, read_wrapper_log

    history = History()
    for path in paths:
        history.sources.append(str(path))
        wrapper_logs = (
            sorted(path.rglob(WRAPPER_LOG))
            if path.is_dir()
            else ([path] if path.name.endswith(".jsonl") else [])
        )
        archives = (
            sorted(path.rglob("*.tar.gz"))
            if path.is_dir()
            else ([path] if path.name.endswith(".tar.gz") else [])
        )
        if wrapper_logs or archives:
            try:
                for key, seconds in read_costs([path]).items():
                    history.seconds[key] = max(history.seconds.get(key, 0.0), seconds)
            except Exception:
                pass
            for log in wrapper_logs:
                for record in read_wrapper_log(log):
                    tu = record.get("tu")
                    if tu and record["action"] in ("compile", "stub"):
                        history.seen.add(tu)
                        history.archs[tu] = arch_count(record.get("argv") or [])
        if path.is_dir():
            for build_dir in sorted({log.parent for log in path.rglob(".ninja_log")}):
                job_dir = build_dir.parent
                if (job_dir / WRAPPER_LOG).is_file():
                    # A shard's: its wrapper log timed its compiles, and ninja's edge of a
                    # stub can hold another TU compiled ahead in its slot (shard/ahead.py).
                    continue
                tree = job_dir / "src"
                for key, seconds in read_ninja_log(build_dir, tree).items():
                    history.seconds.setdefault(key, seconds)
            for record_path in sorted(path.rglob("*.link.json")):
                try:
                    record = json.loads(record_path.read_text(encoding="utf-8"))
                    seconds = float(record["wall_seconds"])
                except (OSError, ValueError, KeyError, TypeError, RecursionError):
                    continue
                if math.isfinite(seconds) and seconds >= 0:  # a damaged record says nothing
                    history.link_seconds.append(seconds)
    history.seen |= set(history.seconds)
    return history


def census_from_history(
    history: History, families: Sequence[Family], package: Path | None, default_archs: int
) -> Census:
    archs = {
        key: history.archs.get(key, default_archs if language_of(key) == "cuda" else 1)
        for key in history.seen
    }
    tus = estimated(history.seen, families, package, archs)
    tus = [
        replace(tu, seconds=history.seconds[tu.key], measured=True)
        if tu.key in history.seconds
        else tu
        for tu in tus
    ]
    tus = calibrate(tus)
    fixed = min(history.link_seconds) if history.link_seconds else None
    unmeasured = sum(1 for tu in tus if not tu.measured)
    notes = [f"{unmeasured} TU(s) never timed: estimated by the cost model"] if unmeasured else []
    return Census(
        tuple(tus),
        "measured",
        fixed,
        "the earlier link job's wall time" if fixed is not None else "not measured",
        tuple(notes),
    )


# ----------------------------------------------------------------------------- census pass

CENSUS_SEAT = (2**32, 2**32 + 1)
"""(index, count) of the census pass's seat: the partition hash is 32 bits, so no TU's
shard ``hash % (2**32 + 1)`` can ever be ``2**32``: the wrapper stubs every TU, with
no change to the per-TU wrapper."""


@dataclass(frozen=True)
class CensusPass:
    records: list[dict[str, object]]
    """The wrapper's records: a ``stub`` for every TU the build compiles."""
    wall_seconds: float
    exit_code: int
    timed: dict[str, float]
    """TUs compiled once for real after the pass, to set the cost model's unit."""


def sample_tus(
    records: Sequence[Mapping[str, object]], package: Path | None
) -> list[Mapping[str, object]]:
    """One stub record per language to compile for real: the TU of median size, so the
    unit is set by a typical TU, not the largest or smallest."""
    by_language: dict[str, list[tuple[int, str, Mapping[str, object]]]] = {}
    for record in records:
        tu = record.get("tu")
        if record.get("action") == "stub" and isinstance(tu, str):
            by_language.setdefault(language_of(tu), []).append((_size(package, tu), tu, record))
    samples = []
    for entries in by_language.values():
        entries.sort(key=lambda entry: (entry[0], entry[1]))
        samples.append(entries[len(entries) // 2][2])
    return samples


def census_pass(
    loaded: LoadedRecipe, cell: Cell, workdir: Path | None, jobs: int | None
) -> CensusPass:
    """Build the cell once with every TU stubbed (probes and links run for real, nothing
    is cached), then compile one typical TU per language for real, as the build ran it."""
    from wheelkiln import run
    from wheelkiln.builder.cell import build_cell, job_directory
    from wheelkiln.paths import resolve_workdir
    from wheelkiln.settings import resolve_build_settings, seat_job
    from wheelkiln.shard.wrapper import SeatConfig
    from wheelkiln.shard.wrapper_log import WRAPPER_LOG, read_wrapper_log

    root = resolve_workdir(workdir)
    job_dir = job_directory(root, cell, "census")
    wrapper_log = job_dir / WRAPPER_LOG
    stub = job_dir / "empty.o"

    def prepare(_tree: Path) -> bool:
        run.run(
            ["cc", "-c", "-x", "c", "/dev/null", "-o", str(stub)], what="Making the stub object"
        )
        return False  # the stub goes beside the tree

    index, count = CENSUS_SEAT
    seat = SeatConfig(
        shard_index=index,
        shard_count=count,
        package_root=str(job_dir / "src"),
        log_path=str(wrapper_log),
        cache=None,
        stub_object=str(stub),
        partition_map_path=None,
        build_dir=str(job_dir / "build"),
    )
    options = seat_job(
        resolve_build_settings(loaded, cache="none", workdir=root, jobs=jobs),
        suffix="census",
        workdir=root,
        cache_dir=None,
        extra_env=seat.to_environ(),
        prepare_tree=prepare,
    )
    outcome = build_cell(loaded, cell, options)
    records = [dict(record) for record in read_wrapper_log(wrapper_log)]
    timed: dict[str, float] = {}
    # The job directory is scratch now: a real compile may overwrite the stub it wrote.
    for record in sample_tus(records, job_dir / "src"):
        argv, cwd = record.get("argv"), record.get("cwd")
        if not isinstance(argv, list) or not argv or not isinstance(cwd, str):
            continue
        done = run.run([str(word) for word in argv], cwd=cwd, check=False, what="Timing one TU")
        if done.returncode == 0:
            timed[str(record["tu"])] = done.wall_seconds
    return CensusPass(records, outcome.wall_seconds, outcome.exit_code, timed)


def census_from_pass(
    census_pass: CensusPass, families: Sequence[Family], package: Path | None
) -> Census:
    archs: dict[str, int] = {}
    for record in census_pass.records:
        tu, argv = record.get("tu"), record.get("argv")
        if record.get("action") == "stub" and isinstance(tu, str) and isinstance(argv, list):
            cuda = language_of(tu) == "cuda"
            archs[tu] = arch_count([str(word) for word in argv]) if cuda else 1
    tus = [
        replace(tu, seconds=census_pass.timed[tu.key], measured=True)
        if tu.key in census_pass.timed
        else tu
        for tu in estimated(archs, families, package, archs)
    ]
    notes = []
    if census_pass.timed:
        timed = ", ".join(
            f"{key} {seconds:.1f} s" for key, seconds in sorted(census_pass.timed.items())
        )
        notes.append(f"the cost model's unit set by compiling for real: {timed}")
    else:
        notes.append("no TU could be compiled alone: costs are the model's guesses in seconds")
    return Census(
        tuple(calibrate(tus)),
        "census pass",
        census_pass.wall_seconds,
        "the census pass's wall time",
        tuple(notes),
    )


def census_from_scan(package: Path, families: Sequence[Family], archs: int) -> Census:
    keys = scan_tree(package)
    return Census(
        tuple(estimated(keys, families, package, archs)),
        "static scan",
        None,
        "not measured (no build ran)",
        ("TUs from a scan of the source tree: generated sources are missing",),
    )
