"""Choosing N from a census: the family table, the ceiling, the critical path per N, the
job count against the matrix cap, and a recommendation. Pure: the census is the input.

**The census plan.** Without a map, shards take TUs by a hash of their path, which
balances counts, not costs, and can put a whole small family into one shard
(demo-kernels' four sm90 kernels all hash to shard 4/4 at N = 4). The census plan
places TUs family by family (the costliest family first): each TU, longest first, goes
to the least-loaded shard among those holding the fewest files of its family. Every
family is then spread as evenly as its size allows (no shard lacks a family while
N ≤ its size), and within that, load is balanced longest-first.

**The ceiling.** Past N = the smallest family's size, some shard must hold none of it
whatever the partition, and the shards that hold it hold one file each: more shards buy
that family nothing, and every guard on it becomes a real branch (``kiln lint``).

**The critical path** of a sharded build is its slowest shard plus the link job. A
shard costs the fixed cost of one job (environment, configure, link: what the census
pass measures) plus its compiles divided by its parallel jobs; the link job compiles
nothing (every TU a cache hit) and costs the fixed cost again. N = 1 is one job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wheelkiln.plan.census import Census
from wheelkiln.shard.partition import shard_of

MATRIX_CAP = 256
"""GitHub's limit on the jobs of one matrix (the compile-shard matrix is N per cell)."""
GOOD_ENOUGH = 1.05
"""The recommendation is the smallest N within this factor of the fastest N: more
shards cost runners, cache archives and a larger matrix for under 5%."""


def census_plan(
    costs: Mapping[str, float], families: Mapping[str, str | None], count: int
) -> dict[str, int]:
    """TU key → shard index for ``count`` shards (see the module docstring)."""
    loads = [0.0] * count
    members: dict[str | None, list[str]] = {}
    for key in costs:
        members.setdefault(families.get(key), []).append(key)
    order = sorted(
        members.items(),
        key=lambda item: (-sum(costs[k] for k in item[1]), item[0] or ""),
    )
    mapping: dict[str, int] = {}
    for _family, keys in order:
        held = [0] * count
        for key in sorted(keys, key=lambda k: (-costs[k], k)):
            index = min(range(count), key=lambda i: (held[i], loads[i], i))
            mapping[key] = index
            held[index] += 1
            loads[index] += costs[key]
    return dict(sorted(mapping.items()))


def hash_plan(keys: Sequence[str], count: int) -> dict[str, int]:
    return {key: shard_of(key, count) for key in keys}


def shard_loads(costs: Mapping[str, float], mapping: Mapping[str, int], count: int) -> list[float]:
    loads = [0.0] * count
    for key, seconds in costs.items():
        loads[mapping[key]] += seconds
    return loads


def imbalance(loads: Sequence[float]) -> float:
    """The slowest shard over the mean shard: 1.0 is perfect balance."""
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean else 1.0


@dataclass(frozen=True)
class FamilyCell:
    family: str
    files: int
    zero_shards: int
    """Shards holding none of the family's files."""
    most_files: int
    """The most files of the family any one shard holds."""


def family_table(
    families: Mapping[str, str | None], mapping: Mapping[str, int], count: int
) -> list[FamilyCell]:
    by_family: dict[str, list[int]] = {}
    for key, family in families.items():
        if family is not None:
            held = by_family.setdefault(family, [0] * count)
            held[mapping[key]] += 1
    return [
        FamilyCell(name, sum(held), sum(1 for n in held if n == 0), max(held))
        for name, held in by_family.items()
    ]


@dataclass(frozen=True)
class Candidate:
    count: int
    families: tuple[FamilyCell, ...]
    most_files: int
    """The most TUs any shard holds under the census plan."""
    slowest_compile: float
    """The slowest shard's compile seconds under the census plan, divided by jobs."""
    slowest_compile_hash: float
    critical_path: float | None
    """Predicted wall seconds: slowest shard + link job (None: fixed cost unknown)."""
    critical_path_hash: float | None
    compile_only: float
    """The critical path's compile part alone: what is left when the fixed cost is unknown."""
    shard_jobs: int
    """Jobs in the compile-shard matrix over every sharded cell of the recipe."""
    total_jobs: int
    fits_cap: bool
    imbalance: float
    imbalance_hash: float

    def as_dict(self) -> dict[str, object]:
        return {
            "count": self.count,
            "families": [cell.__dict__ for cell in self.families],
            "most_files": self.most_files,
            "critical_path_seconds": _round(self.critical_path),
            "critical_path_hash_seconds": _round(self.critical_path_hash),
            "slowest_compile_seconds": round(self.slowest_compile, 3),
            "slowest_compile_hash_seconds": round(self.slowest_compile_hash, 3),
            "shard_jobs": self.shard_jobs,
            "total_jobs": self.total_jobs,
            "fits_cap": self.fits_cap,
            "imbalance": round(self.imbalance, 3),
            "imbalance_hash": round(self.imbalance_hash, 3),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class Ceiling:
    family: str
    files: int

    @property
    def count(self) -> int:
        return self.files


@dataclass(frozen=True)
class Plan:
    census: Census
    jobs: int
    sharded_cells: int
    whole_cells: int
    candidates: tuple[Candidate, ...]
    ceiling: Ceiling | None
    recommended: int
    reason: str

    def candidate(self, count: int) -> Candidate:
        return next(c for c in self.candidates if c.count == count)


def candidate_counts(tus: int, requested: Sequence[int], recipe_count: int) -> list[int]:
    """The Ns to show: the ones asked for, else 1 to 16 (no more than TUs) and the
    recipe's own N."""
    if requested:
        return sorted(set(requested))
    return sorted({*range(1, max(min(16, tus), 1) + 1), recipe_count})


def make_plan(
    census: Census,
    counts: Sequence[int],
    *,
    jobs: int,
    sharded_cells: int,
    whole_cells: int,
    cap: int = MATRIX_CAP,
    recipe_count: int | None = None,
) -> Plan:
    """The plan for each N of ``counts``; ``jobs`` is the parallel compiles of one job."""
    costs = census.costs()
    families = {tu.key: tu.family for tu in census.tus}
    fixed = census.fixed_seconds
    candidates = []
    for count in counts:
        mapping = census_plan(costs, families, count)
        loads = shard_loads(costs, mapping, count)
        hash_loads = shard_loads(costs, hash_plan(list(costs), count), count)
        held = [0] * count
        for index in mapping.values():
            held[index] += 1
        slowest = max(loads) / jobs
        slowest_hash = max(hash_loads) / jobs
        if count == 1:
            critical = None if fixed is None else fixed + slowest
            critical_hash = critical
            shard_jobs, total = 0, sharded_cells + whole_cells
        else:
            critical = None if fixed is None else 2 * fixed + slowest
            critical_hash = None if fixed is None else 2 * fixed + slowest_hash
            shard_jobs = count * sharded_cells
            total = shard_jobs + sharded_cells + whole_cells
        candidates.append(
            Candidate(
                count=count,
                families=tuple(family_table(families, mapping, count)),
                most_files=max(held),
                slowest_compile=slowest,
                slowest_compile_hash=slowest_hash,
                critical_path=critical,
                critical_path_hash=critical_hash,
                compile_only=slowest,
                shard_jobs=shard_jobs,
                total_jobs=total,
                fits_cap=shard_jobs <= cap and whole_cells <= cap and sharded_cells <= cap,
                imbalance=imbalance(loads),
                imbalance_hash=imbalance(hash_loads),
            )
        )
    sizes: dict[str, int] = {}
    for tu in census.tus:
        if tu.family is not None:
            sizes[tu.family] = sizes.get(tu.family, 0) + 1
    ceiling = None
    if sizes:
        family = min(sizes, key=lambda name: (sizes[name], name))
        ceiling = Ceiling(family, sizes[family])
    recommended, reason = recommend(candidates, ceiling, fixed is not None, cap, recipe_count)
    return Plan(
        census,
        jobs,
        sharded_cells,
        whole_cells,
        tuple(candidates),
        ceiling,
        recommended,
        reason,
    )


def recommend(
    candidates: Sequence[Candidate],
    ceiling: Ceiling | None,
    fixed_known: bool,
    cap: int,
    recipe_count: int | None = None,
) -> tuple[int, str]:
    """The smallest N whose predicted critical path is within :data:`GOOD_ENOUGH` of the
    fastest N that fits the matrix cap, and why."""
    fitting = [c for c in candidates if c.fits_cap]
    if not fixed_known and ceiling is None and recipe_count is not None:
        # Compiles alone always favour the most shards: nothing to choose by.
        kept = [c for c in fitting if c.count == recipe_count]
        if kept:
            return recipe_count, (
                "the recipe's own N: the fixed cost of a job is unknown and no family sets "
                "a ceiling, so the compiles alone would always favour more shards; plan "
                "without --static to measure it"
            )
    bounded = ""
    if not fixed_known and ceiling is not None:
        # Compiles alone always favour more shards; without the fixed cost that pays for
        # each, stay where every family still shards.
        within = [c for c in fitting if c.count <= ceiling.count]
        if within:
            fitting = within
            bounded = f" at or below the ceiling of {ceiling.count}"
    if not fitting:
        smallest = min(candidates, key=lambda c: c.count)
        return smallest.count, (
            f"no N shown fits the {cap}-job matrix cap; dispatch one lane or package at a time"
        )

    def path(candidate: Candidate) -> float:
        if fixed_known and candidate.critical_path is not None:
            return candidate.critical_path
        return candidate.compile_only

    best = min(fitting, key=lambda c: (path(c), c.count))
    chosen = min((c for c in fitting if path(c) <= path(best) * GOOD_ENOUGH), key=lambda c: c.count)
    what = "critical path" if fixed_known else "slowest shard's compiles"
    if chosen.count == best.count:
        reason = f"the shortest predicted {what}{bounded}, {path(chosen):.1f} s"
    else:
        reason = (
            f"within {round((GOOD_ENOUGH - 1) * 100)}% of the shortest predicted {what}"
            f"{bounded} (N={best.count}, {path(best):.1f} s) with fewer jobs"
        )
    if not fixed_known:
        reason += " (the fixed cost of a job is unknown: plan without --static to measure it)"
    if chosen.count == 1 and len(fitting) > 1:
        reason += "; sharding would not pay for its fixed cost"
    reason += f"; {chosen.shard_jobs} shard jobs of the {cap}-job cap"
    if ceiling is not None:
        if chosen.count > ceiling.count:
            reason += (
                f"; above the {ceiling.family} family's ceiling of {ceiling.count}, "
                f"some shards hold none of it: run kiln lint"
            )
        else:
            reason += f"; at or below the {ceiling.family} family's ceiling of {ceiling.count}"
    return chosen.count, reason
