"""Bench statistics: medians with n per key, ratios only within one key, frozen* and
failed runs never in a ratio."""

from __future__ import annotations

from typing import Any

import pytest

from wheelkiln.bench.stats import WHEEL_CACHE_HOT, group_key, select, summarize


def rec(scenario: str, wall: float, *, builder: str = "b1", jobs: int = 8, shards: int = 1,
        cell: str = "demo-py3.11-linux-x86_64", status: str = "ok", hot_kind: str | None = None,
        hits: int = 0, misses: int = 0, **extra: Any) -> dict[str, Any]:
    return {"target": "demo", "cell": cell, "builder": builder, "arch": "x86_64", "jobs": jobs,
            "shards": shards, "scenario": scenario, "hot_kind": hot_kind, "status": status,
            "step_wall_seconds": wall, "wall_seconds": wall / 2, "cpu_seconds": wall * 3,
            "cache": {"hits": hits, "misses": misses}, **extra}


def by_scenario(summary):  # type: ignore[no-untyped-def]
    return {g.key.scenario: g for g in summary.groups}


def test_median_n_min_max_per_scenario() -> None:
    summary = summarize([rec("cold", w, misses=24) for w in (100, 300, 200, 120)]
                        + [rec("hot", w, hits=24) for w in (10, 12, 11)])
    groups = by_scenario(summary)
    assert groups["cold"].n == 4 and groups["cold"].median_wall == 160
    assert (groups["cold"].min_wall, groups["cold"].max_wall) == (100, 300)
    assert groups["hot"].median_wall == 11 and groups["hot"].median_hits == 24
    assert summary.records == 7
    ratio = {r.name: r for r in summary.ratios}["cold/hot"]
    assert ratio.value == pytest.approx(160 / 11)
    assert (ratio.numerator_n, ratio.denominator_n) == (4, 3)


def test_ratios_never_cross_builders_jobs_shards_or_cells() -> None:
    records = [
        rec("cold", 100, builder="b1"), rec("hot", 10, builder="b2"),
        rec("cold", 100, jobs=4), rec("hot", 10, jobs=32),
        rec("cold", 100, shards=4, jobs=2), rec("hot", 10, shards=1, jobs=2),
        rec("cold", 100, cell="demo-py3.12-linux-x86_64", jobs=16),
        rec("hot", 10, cell="demo-py3.11-linux-x86_64", jobs=16),
    ]
    summary = summarize(records)
    assert len(summary.groups) == 8
    assert summary.ratios == []


def test_all_ratio_pairs_within_one_key() -> None:
    summary = summarize([rec("frozen", 400), rec("cold", 200), rec("warm", 20), rec("hot", 10),
                         rec("hot", 1, hot_kind="wheel-cache")])
    values = {r.name: r.value for r in summary.ratios}
    assert values == {"frozen/cold": 2.0, "cold/warm": 10.0, "cold/hot": 20.0, "warm/hot": 2.0,
                      f"cold/{WHEEL_CACHE_HOT}": 200.0}


def test_frozen_star_is_shown_but_never_in_a_ratio() -> None:
    summary = summarize([rec("frozen*", 400), rec("cold", 200)])
    assert [g.key.scenario for g in summary.groups] == ["frozen*", "cold"]
    assert not summary.groups[0].in_ratios
    assert summary.ratios == []


def test_failed_runs_are_counted_but_not_in_the_median() -> None:
    summary = summarize([rec("warm", 20), rec("warm", 500, status="failed"), rec("hot", 10)])
    warm = by_scenario(summary)["warm"]
    assert (warm.n, warm.failed, warm.median_wall) == (1, 1, 20)
    only_failed = by_scenario(summarize([rec("warm", 20, status="failed"), rec("hot", 10)]))
    assert only_failed["warm"].n == 0 and only_failed["warm"].median_wall is None
    assert summarize([rec("warm", 20, status="failed"), rec("hot", 10)]).ratios == []


def test_wheel_cache_hot_is_its_own_row() -> None:
    summary = summarize([rec("hot", 10, hot_kind="all-hits"), rec("hot", 0.5, hot_kind="wheel-cache")])
    groups = by_scenario(summary)
    assert groups["hot"].median_wall == 10 and groups[WHEEL_CACHE_HOT].median_wall == 0.5


def test_records_without_step_wall_fall_back_to_the_build_wall() -> None:
    old = rec("cold", 0)
    del old["step_wall_seconds"]
    old["wall_seconds"] = 42.0
    assert by_scenario(summarize([old]))["cold"].median_wall == 42.0


def test_sparse_records_still_group() -> None:
    key = group_key({"target": "x", "scenario": "cold"})
    assert (key.condition.target, key.condition.jobs, key.condition.shards) == ("x", 0, 1)
    assert summarize([{"target": "x", "scenario": "cold", "wall_seconds": 1}]).groups[0].n == 1


def test_groups_are_sorted_by_key_then_scenario_order() -> None:
    summary = summarize([rec("hot", 1), rec("cold", 5), rec("warm", 2), rec("frozen", 9),
                         rec("cold", 5, builder="a0")])
    assert [(g.key.condition.builder, g.key.scenario) for g in summary.groups] == [
        ("a0", "cold"), ("b1", "frozen"), ("b1", "cold"), ("b1", "warm"), ("b1", "hot")]


def test_select_by_package_or_cell() -> None:
    records = [rec("cold", 1), rec("cold", 1, cell="other-py3.11-linux-x86_64", target="other")]
    records[1]["target"] = "other"
    assert len(select(records, [])) == 2
    assert len(select(records, ["demo"])) == 1
    assert len(select(records, ["other-py3.11-linux-x86_64"])) == 1


def test_100k_records_group_completely() -> None:
    """Every record lands in exactly one group (speed is benchmarks/bench_report.py's job)."""
    records = [rec(("cold", "warm", "hot")[i % 3], float(i % 97), builder=f"b{i % 5}",
                   jobs=(2, 8)[i % 2]) for i in range(100_000)]
    summary = summarize(records)
    assert sum(g.n for g in summary.groups) == 100_000
    assert len(summary.groups) == 3 * 5 * 2


def test_select_passes_over_a_target_or_cell_that_is_no_text() -> None:
    records = [rec("cold", 1, cell=["a"]), rec("cold", 2, cell={"b": 1}),  # type: ignore[arg-type]
               rec("cold", 3, cell="b")]
    assert [r["step_wall_seconds"] for r in select(records, ["b"])] == [3]
    records[0]["target"] = ["demo"]
    assert len(select(records, ["demo"])) == 2


@pytest.mark.parametrize("wall", [float("-inf"), float("inf"), float("nan"), -1.0, 0.0])
def test_no_ratio_with_a_median_that_is_no_positive_finite_time(wall: float) -> None:
    summary = summarize([rec("warm", wall), rec("hot", 2.0), rec("cold", 8.0)])
    assert [r.name for r in summary.ratios] == ["cold/hot"]
