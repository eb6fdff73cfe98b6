"""Scenario logic of the bench harness, with a fake build that models a compiler cache
(namespaces, recache, keys) so every rule is checked without compiling anything."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from wheelkiln.bench import store
from wheelkiln.bench.scenarios import (
    BenchHooks,
    BenchSettings,
    expand_scenarios,
    run_bench,
)
from wheelkiln.builder.cell import BuildOutcome
from wheelkiln.builder.environment import BuildEnvironment
from wheelkiln.builder.record import build_record
from wheelkiln.builder_lock import BuilderLock
from wheelkiln.cache.backend import CacheStats, TUOutcome
from wheelkiln.cells import Cell
from wheelkiln.errors import KilnError, UsageError
from wheelkiln.recipe.load import LoadedRecipe, load_recipe
from wheelkiln.settings import DEFAULT_SOURCE_DATE_EPOCH, BuildOptions
from wheelkiln.wheels.facts import inspect_wheel

TUS = ("csrc/a.cpp", "csrc/b.cpp", "csrc/c.cpp")


@dataclass
class FakeFarm:
    """A compiler cache keyed by (namespace, TU, leaked value) and a build that uses it."""

    tmp: Path
    leak_epoch_into: tuple[str, ...] = ()
    """TUs whose cache key wrongly includes SOURCE_DATE_EPOCH."""
    epoch_in_extension: bool = False
    fail_scenario: str | None = None
    entries: set[tuple[str | None, str, int | None]] = field(default_factory=set)
    calls: list[BuildOptions] = field(default_factory=list)

    def build(self, loaded: LoadedRecipe, cell: Cell, options: BuildOptions) -> BuildOutcome:
        self.calls.append(options)
        outcomes = []
        for tu in TUS:
            leaked = options.source_date_epoch if tu in self.leak_epoch_into else None
            key = (options.namespace, tu, leaked)
            hit = key in self.entries and not options.recache
            self.entries.add(key)
            outcomes.append(TUOutcome(tu, hit))
        hits = sum(o.hit for o in outcomes)
        job = self.tmp / "work" / f"{cell.id}-{options.job.suffix}"
        job.mkdir(parents=True, exist_ok=True)
        (job / "build.log").write_text(f"log of {options.job.suffix}\n")
        failed = self.fail_scenario is not None and options.job.suffix.endswith(self.fail_scenario)
        wheel = job / "demo-0.1-cp311-cp311-linux_x86_64.whl"
        so = b"object code" + (str(options.source_date_epoch).encode() if self.epoch_in_extension else b"")
        with zipfile.ZipFile(wheel, "w") as zipped:
            zipped.writestr("demo/_core.so", so)
            zipped.writestr("demo/__init__.py", "")
        return BuildOutcome(
            cell=cell, job_dir=job, tree=job / "src", log_path=job / "build.log",
            exit_code=2 if failed else 0, wall_seconds=1.0, cpu_seconds=2.0,
            peak_rss_bytes=1 << 20, cache_name=options.cache,
            stats=CacheStats(hits=hits, misses=len(TUS) - hits), tu_outcomes=outcomes,
            wheel=None if failed else inspect_wheel(wheel), source_digest="s" * 64,
            environment=BuildEnvironment(self.tmp / "env", ("setuptools",)),
            versions={"gcc": "12", "wheelkiln": "0.1.0"}, log_text="",
        )


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedRecipe:
    (tmp_path / "pkg").mkdir()
    path = tmp_path / "demo.toml"
    path.write_text('name = "demo"\n[source]\npath = "pkg"\n')
    return load_recipe(path)


@pytest.fixture
def cell() -> Cell:
    return Cell("demo", "3.11", "none", "none", "linux-x86_64")


@pytest.fixture
def farm(tmp_path: Path) -> FakeFarm:
    return FakeFarm(tmp_path)


def hooks_for(farm: FakeFarm, tmp_path: Path, **extra: Any) -> BenchHooks:
    return BenchHooks(build=farm.build, record=lambda o: build_record(o, kind="bench"),
                      lock=BuilderLock(tmp_path / "builder.lock"),
                      empty_caches=lambda cell: [], **extra)


def bench(loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path, *names: str,
          hooks: BenchHooks | None = None, **settings: Any):  # type: ignore[no-untyped-def]
    settings.setdefault("store_path", tmp_path / "results.jsonl")
    settings.setdefault("cache_dir", tmp_path / "bench-cache")
    settings.setdefault("quiet", True)
    return run_bench(loaded, cell, BenchSettings(scenarios=expand_scenarios(names), **settings),
                     hooks or hooks_for(farm, tmp_path))


def test_expand_scenarios() -> None:
    assert expand_scenarios(["all"]) == ("cold", "hot", "warm")
    assert expand_scenarios(["everything"]) == ("frozen", "cold", "hot", "warm")
    assert expand_scenarios(["hot", "cold", "hot"]) == ("cold", "hot")
    with pytest.raises(UsageError, match="lukewarm"):
        expand_scenarios(["lukewarm"])


def test_all_runs_cold_then_hot_then_warm_in_one_namespace(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    result = bench(loaded, cell, farm, tmp_path, "all", jobs=3)
    assert result.status == "done" and result.failures == [] and result.aborted is None
    assert [r["scenario"] for r in result.records] == ["cold", "hot", "warm"]
    cold, hot, warm = farm.calls
    assert cold.recache and not hot.recache and not warm.recache
    assert cold.namespace == hot.namespace == warm.namespace == f"bench-{result.run_id}-1"
    assert cold.source_date_epoch == hot.source_date_epoch == DEFAULT_SOURCE_DATE_EPOCH
    assert warm.source_date_epoch != hot.source_date_epoch
    assert cold.cache_dir == tmp_path / "bench-cache" and cold.jobs == 3
    records = {r["scenario"]: r for r in result.records}
    assert records["cold"]["cache"]["misses"] == 3 and records["cold"]["cache"]["missed_tus"] == []
    assert records["cold"]["cache"]["missed_tus_omitted"] == 3
    assert records["hot"]["hot_kind"] == "all-hits" and records["hot"]["cache"]["hits"] == 3
    assert records["warm"]["hot_kind"] is None and records["warm"]["status"] == "ok"
    assert all(r["jobs"] == 3 and r["shards"] == 1 and r["run_id"] == result.run_id
               for r in result.records)
    stored, warnings = store.read(tmp_path / "results.jsonl")
    assert stored == result.records and warnings == []
    # Logs are kept per run and scenario (the job directories are reused).
    assert Path(records["warm"]["log"]).read_text() == "log of bench-warm\n"
    assert "bench-logs" in records["warm"]["log"]


def test_every_repeat_has_a_fresh_cold_namespace(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    result = bench(loaded, cell, farm, tmp_path, "cold", "hot", repeat=3)
    colds = [c for c in farm.calls if c.recache]
    assert len({c.namespace for c in colds}) == 3
    assert [r["repeat"] for r in result.records] == [0, 0, 1, 1, 2, 2]
    assert all(r["status"] == "ok" for r in result.records)


def test_a_leaked_epoch_fails_warm_and_names_the_tu(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    farm.leak_epoch_into = ("csrc/b.cpp",)
    result = bench(loaded, cell, farm, tmp_path, "all")
    records = {r["scenario"]: r for r in result.records}
    assert records["hot"]["status"] == "ok"
    assert records["warm"]["status"] == "failed"
    assert records["warm"]["cache"]["missed_tus"] == ["csrc/b.cpp"]
    (failure,) = result.failures
    assert failure.startswith("warm (repeat 1): 1 of 3 cacheable compiles missed")
    assert "csrc/b.cpp" in failure and "SOURCE_DATE_EPOCH" in failure


def test_warm_extensions_must_match_hot(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    farm.epoch_in_extension = True
    result = bench(loaded, cell, farm, tmp_path, "all")
    records = {r["scenario"]: r for r in result.records}
    assert records["hot"]["status"] == "ok"
    assert records["warm"]["status"] == "failed"
    assert "differ from hot's: demo/_core.so" in records["warm"]["problems"][0]


def test_warm_alone_primes_an_unrecorded_namespace_once(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    result = bench(loaded, cell, farm, tmp_path, "warm", repeat=2)
    assert [r["scenario"] for r in result.records] == ["warm", "warm"]
    prime, *warms = farm.calls
    assert prime.recache and prime.namespace == f"bench-{result.run_id}"
    assert all(w.namespace == prime.namespace and not w.recache for w in warms)
    assert warms[0].source_date_epoch != warms[1].source_date_epoch
    assert result.failures == []


def test_frozen_needs_destructive(loaded: LoadedRecipe, cell: Cell, farm: FakeFarm,
                                  tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        bench(loaded, cell, farm, tmp_path, "everything")
    assert "--destructive" in caught.value.render()
    assert farm.calls == [] and not (tmp_path / "results.jsonl").exists()


def test_frozen_empties_caches_first_in_its_own_namespace(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    emptied: list[Cell] = []
    hooks = hooks_for(farm, tmp_path)
    hooks.empty_caches = lambda c: emptied.append(c) or []  # type: ignore[func-returns-value]
    result = bench(loaded, cell, farm, tmp_path, "everything", destructive=True, hooks=hooks)
    assert emptied == [cell]
    assert [r["scenario"] for r in result.records] == ["frozen", "cold", "hot", "warm"]
    assert farm.calls[0].recache and farm.calls[0].namespace != farm.calls[1].namespace
    assert result.records[0]["frozen_problems"] == []


def test_frozen_with_a_cache_left_is_frozen_star(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    hooks = hooks_for(farm, tmp_path)
    hooks.empty_caches = lambda c: ["could not empty /x: Permission denied"]
    result = bench(loaded, cell, farm, tmp_path, "frozen", "cold", destructive=True, hooks=hooks)
    frozen = result.records[0]
    assert frozen["scenario"] == "frozen*" and frozen["status"] == "ok"
    assert frozen["frozen_problems"] == ["could not empty /x: Permission denied"]


def test_a_failed_build_stops_the_run(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    farm.fail_scenario = "hot"
    result = bench(loaded, cell, farm, tmp_path, "all")
    assert [(r["scenario"], r["status"]) for r in result.records] == [("cold", "ok"), ("hot", "failed")]
    assert result.aborted is not None and "exit 2" in result.aborted
    assert len(farm.calls) == 2  # warm never ran


def test_busy_builder_runs_nothing_and_writes_nothing(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    with BuilderLock(tmp_path / "builder.lock", command="kiln build other"):
        result = bench(loaded, cell, farm, tmp_path, "all")
    assert result.status == "busy"
    assert result.holder is not None and result.holder["command"] == "kiln build other"
    assert farm.calls == [] and not (tmp_path / "results.jsonl").exists()


def test_the_lock_is_held_during_the_run_and_released_after(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    seen: list[bool] = []
    original = farm.build

    def build(loaded: LoadedRecipe, cell: Cell, options: BuildOptions) -> BuildOutcome:
        seen.append(BuilderLock(tmp_path / "builder.lock").holder() is not None)
        return original(loaded, cell, options)

    farm.build = build  # type: ignore[method-assign]
    bench(loaded, cell, farm, tmp_path, "cold")
    assert seen == [True]
    assert BuilderLock(tmp_path / "builder.lock").holder() is None


def test_a_corrupt_store_is_refused_before_any_build(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"\x00\xff not a store\n")
    with pytest.raises(KilnError, match="corrupt store"):
        bench(loaded, cell, farm, tmp_path, "all")
    assert farm.calls == [] and path.read_bytes() == b"\x00\xff not a store\n"


def test_shards_are_cold_only_and_use_the_link_record(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="--shards"):
        bench(loaded, cell, farm, tmp_path, "all", shards=4)
    seen: list[tuple[int, str | None]] = []

    def run_sharded(loaded: LoadedRecipe, cell: Cell, options: BuildOptions, count: int, *,
                    out_dir: Path) -> dict[str, Any]:
        seen.append((count, options.namespace))
        link = build_record(farm.build(loaded, cell, options), kind="link")
        return {"link": link, "gate": {"passed": True, "problems": []}}

    hooks = hooks_for(farm, tmp_path, sharded=lambda: run_sharded)
    result = bench(loaded, cell, farm, tmp_path, "cold", shards=4, hooks=hooks)
    (record,) = result.records
    assert seen == [(4, f"bench-{result.run_id}-1")]
    assert record["shards"] == 4 and record["scenario"] == "cold" and record["status"] == "ok"
    assert record["extensions"]


def test_shards_without_the_executor_is_a_usage_error(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    def missing() -> Any:
        raise UsageError("no local executor")

    with pytest.raises(UsageError, match="no local executor"):
        bench(loaded, cell, farm, tmp_path, "cold", shards=2,
              hooks=hooks_for(farm, tmp_path, sharded=missing))
    assert farm.calls == []


def test_wheel_cache_hot_is_recorded_as_its_own_kind(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    def digest_of(epoch: int) -> str:
        return hashlib.sha256(str(epoch).encode()).hexdigest()

    hooks = hooks_for(
        farm, tmp_path, wheel_cache_root=tmp_path / "wheels",
        plan_digest=lambda loaded, cell, options: digest_of(options.source_date_epoch),
        outcome_digest=lambda loaded, outcome, options: digest_of(options.source_date_epoch),
    )
    result = bench(loaded, cell, farm, tmp_path, "all", wheel_cache=True, hooks=hooks)
    assert [(r["scenario"], r["hot_kind"]) for r in result.records] == [
        ("cold", None), ("hot", "all-hits"), ("hot", "wheel-cache"), ("warm", None)]
    served = result.records[2]
    assert served["status"] == "ok" and served["cache"]["total"] == 0
    assert served["extensions"] == result.records[1]["extensions"]
    assert Path(served["wheel"]["path"]).is_file()
    assert served["input_digest"] == digest_of(DEFAULT_SOURCE_DATE_EPOCH)
    assert served["kind"] == "bench"  # the store's kind; hot_kind says how it was served
    # The build that stored the wheel (cold) is nested, not passed off as this run.
    assert served["served_from"]["wall_seconds"] == result.records[0]["wall_seconds"]
    assert served["served_from"]["cache"]["misses"] == result.records[0]["cache"]["misses"] > 0
    assert len(farm.calls) == 3  # the wheel-cache hot run built nothing


def test_wheel_cache_miss_fails_that_run_only(
    loaded: LoadedRecipe, cell: Cell, farm: FakeFarm, tmp_path: Path
) -> None:
    hooks = hooks_for(farm, tmp_path, wheel_cache_root=tmp_path / "wheels",
                      plan_digest=lambda *a: "ab" * 32, outcome_digest=lambda *a: "cd" * 32)
    result = bench(loaded, cell, farm, tmp_path, "hot", wheel_cache=True, hooks=hooks)
    assert [(r["hot_kind"], r["status"]) for r in result.records] == [
        ("all-hits", "ok"), ("wheel-cache", "failed")]
    assert "no wheel for input digest" in result.failures[0]


def test_cache_none_is_refused(loaded: LoadedRecipe, cell: Cell, farm: FakeFarm,
                               tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="measure nothing"):
        bench(loaded, cell, farm, tmp_path, "all", cache="none")
