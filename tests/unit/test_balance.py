"""Cost-balanced partition maps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.archives import valid_manifest
from wheelkiln.cache.archive import pack
from wheelkiln.errors import UsageError
from wheelkiln.shard.balance import BalancePlan, balance, read_costs, tu_costs
from wheelkiln.shard.partition import load_partition_map, shard_of


def test_longest_first_onto_the_least_loaded_shard() -> None:
    costs = {"a.cu": 10.0, "b.cu": 7.0, "c.cu": 6.0, "d.cu": 4.0, "e.cu": 3.0}
    plan = balance(costs, 2)
    # a→0 (10, 0); b→1 (10, 7); c→1 (10, 13); d→0 (14, 13); e→1 (14, 16)
    assert plan.mapping == {"a.cu": 0, "b.cu": 1, "c.cu": 1, "d.cu": 0, "e.cu": 1}
    assert plan.loads == [14.0, 16.0]
    assert sorted(plan.mapping) == sorted(costs)


def test_balanced_map_never_worse_than_the_hash_on_skewed_costs() -> None:
    costs = {f"csrc/k{i:02d}.cu": float(1 + (i % 7) ** 2) for i in range(40)}
    for count in (2, 3, 4, 7):
        plan = balance(costs, count)
        assert max(plan.loads) <= max(plan.hash_loads)
        assert BalancePlan.imbalance(plan.loads) < 1.2
        assert sum(plan.loads) == pytest.approx(sum(costs.values()))


def test_costs_take_the_slowest_compile_of_a_tu() -> None:
    records = [
        {"tu": "a.c", "action": "compile", "seconds": 1.0},
        {"tu": "a.c", "action": "compile", "seconds": 3.0},
        {"tu": "b.c", "action": "stub", "seconds": 0.01},
        {"tu": None, "action": "link", "seconds": 2.0},
    ]
    assert tu_costs(records) == {"a.c": 3.0}


def test_costs_from_shard_archives_feed_the_wrapper(tmp_path: Path) -> None:
    log = tmp_path / "wrapper.jsonl"
    lines = [{"tu": f"src/t{i}.cpp", "action": "compile", "seconds": float(i)} for i in range(1, 9)]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    cache = tmp_path / "cache"
    cache.mkdir()
    pack(
        cache,
        valid_manifest(),
        tmp_path / "shards" / "c-shard-0-of-1.tar.gz",
        extras={"wrapper.jsonl": log},
    )
    costs = read_costs([tmp_path / "shards"])
    assert costs == {f"src/t{i}.cpp": float(i) for i in range(1, 9)}
    plan = balance(costs, 3)
    path = tmp_path / "map.json"
    path.write_text(json.dumps(plan.mapping))
    loaded = load_partition_map(path)
    assert {tu: shard_of(tu, 3, loaded) for tu in costs} == plan.mapping


def test_nothing_timed_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "wrapper.jsonl").write_text("")
    with pytest.raises(UsageError, match="No timed compiles found"):
        read_costs([tmp_path])
