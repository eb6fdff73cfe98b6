"""kiln plan: the family table, the ceiling, the critical path, the cap, the census plan."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, RECIPES, Kiln
from wheelkiln.plan.census import (
    Census,
    CensusPass,
    CensusTU,
    CostModel,
    History,
    census_from_history,
    census_from_pass,
    census_from_scan,
    sample_tus,
)
from wheelkiln.plan.planner import (
    Ceiling,
    census_plan,
    family_table,
    hash_plan,
    imbalance,
    make_plan,
    shard_loads,
)
from wheelkiln.recipe.load import load_recipe

DEMO = load_recipe(RECIPES / "demo-kernels.toml").recipe


def demo_census(fixed: float | None = None) -> Census:
    """demo-kernels' TUs from its source tree alone: no build, no compile."""
    census = census_from_scan(EXAMPLES / "demo-kernels", DEMO.families, archs=1)
    return replace(census, fixed_seconds=fixed)


def table(plan_families: object) -> dict[str, tuple[int, int]]:
    return {cell.family: (cell.zero_shards, cell.most_files) for cell in plan_families}  # type: ignore[attr-defined]


def test_demo_kernels_family_table_and_ceiling_are_exact() -> None:
    census = demo_census()
    assert len(census.tus) == 26
    assert sorted({tu.family or "-" for tu in census.tus}) == ["-", "sm80", "sm89", "sm90"]
    plan = make_plan(census, [1, 2, 3, 4, 5, 8], jobs=2, sharded_cells=1, whole_cells=0)
    # (shards holding none of the family, the most files of it in one shard)
    assert {c.count: table(c.families) for c in plan.candidates} == {
        1: {"sm80": (0, 12), "sm89": (0, 8), "sm90": (0, 4)},
        2: {"sm80": (0, 6), "sm89": (0, 4), "sm90": (0, 2)},
        3: {"sm80": (0, 4), "sm89": (0, 3), "sm90": (0, 2)},
        4: {"sm80": (0, 3), "sm89": (0, 2), "sm90": (0, 1)},
        5: {"sm80": (0, 3), "sm89": (0, 2), "sm90": (1, 1)},
        8: {"sm80": (0, 2), "sm89": (0, 1), "sm90": (4, 1)},
    }
    # The table implies it: N=4 is the last N at which every shard holds an sm90 file.
    assert plan.ceiling == Ceiling("sm90", 4)
    # The hash, for contrast, puts all four sm90 kernels into one of four shards.
    families = {tu.key: tu.family for tu in census.tus}
    hashed = family_table(families, hash_plan(list(families), 4), 4)
    assert table(hashed)["sm90"] == (3, 4)


def test_the_recommendation_respects_the_matrix_cap() -> None:
    # 40 sharded cells: N=7 would need 280 compile-shard jobs in one matrix.
    plan = make_plan(demo_census(fixed=5.0), range(1, 9), jobs=2, sharded_cells=40, whole_cells=3)
    assert [c.count for c in plan.candidates if not c.fits_cap] == [7, 8]
    assert plan.candidate(6).shard_jobs == 240 and plan.candidate(6).total_jobs == 283
    assert plan.recommended <= 6
    assert f"{plan.recommended * 40} shard jobs of the 256-job cap" in plan.reason
    free = make_plan(demo_census(fixed=5.0), range(1, 9), jobs=2, sharded_cells=1, whole_cells=0)
    assert free.recommended > plan.recommended  # the cap, not the costs, held it back


def test_critical_path_is_two_fixed_costs_plus_the_slowest_shard() -> None:
    tus = tuple(
        CensusTU(key, None, seconds, measured=True)
        for key, seconds in (("a.cu", 8.0), ("b.cu", 4.0), ("c.cu", 4.0), ("d.cu", 4.0))
    )
    census = Census(tus, "measured", 10.0, "test")
    plan = make_plan(census, [1, 2], jobs=2, sharded_cells=1, whole_cells=0)
    assert plan.candidate(1).critical_path == 10.0 + 20.0 / 2  # one job, no link job
    assert plan.candidate(2).critical_path == 2 * 10.0 + 12.0 / 2  # shard {a, d} + link
    assert plan.recommended == 1
    assert plan.reason.startswith("the shortest predicted critical path, 20.0 s")
    assert "sharding would not pay for its fixed cost" in plan.reason


def skewed_package(root: Path) -> dict[str, float]:
    """24 kernels, 4 of them heavy (larger sources, as generated heavy kernels are), and
    the seconds each 'really' takes: the model's estimates are correlated, not equal."""
    truth: dict[str, float] = {}
    for index in range(24):
        heavy = index % 6 == 5
        path = root / "csrc/kernels" / f"k{index:02d}.cu"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("// kernel\n" + "x" * (24_000 if heavy else 1_500))
        truth[f"csrc/kernels/k{index:02d}.cu"] = 61.0 if heavy else 2.9 + (index % 3) * 0.2
    return truth


def test_the_census_plan_beats_the_hash_on_a_skewed_package(tmp_path: Path) -> None:
    truth = skewed_package(tmp_path)
    census = census_from_scan(tmp_path, (), archs=1)  # no history: model estimates only
    assert {tu.key for tu in census.tus} == set(truth)
    estimates = census.costs()
    planned = census_plan(estimates, dict.fromkeys(estimates), 4)
    by_census = imbalance(shard_loads(truth, planned, 4))
    by_hash = imbalance(shard_loads(truth, hash_plan(list(truth), 4), 4))
    assert by_census <= 1.15 < by_hash
    with_history = census_plan(truth, dict.fromkeys(truth), 4)
    assert imbalance(shard_loads(truth, with_history, 4)) <= 1.05


def test_history_timings_win_and_untimed_tus_are_scaled_to_them(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.cu").write_text("y" * 2048)
    history = History(seconds={"a.cu": 12.0, "b.cu": 12.0}, seen={"a.cu", "b.cu", "c.cu"})
    history.link_seconds.append(7.5)
    census = census_from_history(history, (), tmp_path, default_archs=1)
    by_key = {tu.key: tu for tu in census.tus}
    assert (by_key["a.cu"].measured, by_key["c.cu"].measured) == (True, False)
    assert by_key["c.cu"].seconds == 12.0  # same language and size as the timed ones
    assert (census.fixed_seconds, census.notes) == (
        7.5,
        ("1 TU(s) never timed: estimated by the cost model",),
    )


def test_kiln_plan_static_json_on_demo_kernels(kiln: Kiln) -> None:
    result = kiln(
        "plan",
        RECIPES / "demo-kernels.toml",
        "--static",
        "--count",
        "2",
        "--count",
        "4",
        "--count",
        "6",
        "--json",
    )
    data = json.loads(result.stdout)
    assert [c["count"] for c in data["candidates"]] == [2, 4, 6]
    assert data["ceiling"] == {"family": "sm90", "count": 4}
    assert data["recommended"] == 4  # no fixed cost known: kept at the ceiling
    assert data["census"]["how"] == "static scan" and len(data["census"]["tus"]) == 26
    assert data["lint"]["findings"] == []
    assert "recommended: N=4" in " ".join(result.stderr.split())


def test_a_census_pass_lists_stubbed_tus_and_one_real_compile_sets_the_unit(
    tmp_path: Path,
) -> None:
    sizes = {"k/a.cu": 1000, "k/b.cu": 2000, "k/c.cu": 3000, "m.cpp": 500}
    for key, size in sizes.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_text("z" * size)
    gencode = [
        "--generate-code=arch=compute_80,code=sm_80",
        "--generate-code=arch=compute_90,code=sm_90",
    ]
    records = [
        {"tu": key, "action": "stub", "argv": ["nvcc", *gencode, "-c", key], "cwd": "/b"}
        for key in sizes
    ] + [{"tu": "CMakeScratch/x.cu", "action": "probe", "argv": ["nvcc"], "cwd": "/b"}]
    assert [r["tu"] for r in sample_tus(records, tmp_path)] == ["k/b.cu", "m.cpp"]
    census = census_from_pass(
        CensusPass(records, 20.0, 0, {"k/b.cu": 30.0}), DEMO.families, tmp_path
    )
    by_key = {tu.key: tu for tu in census.tus}
    assert sorted(by_key) == sorted(sizes)  # probes are not TUs of the build
    assert by_key["k/a.cu"].archs == 2 and by_key["m.cpp"].archs == 1
    assert by_key["k/b.cu"].measured and by_key["k/b.cu"].seconds == 30.0
    model = CostModel()
    scale = 30.0 / model.estimate("cuda", 2000, 2)
    assert by_key["k/c.cu"].seconds == pytest.approx(model.estimate("cuda", 3000, 2) * scale)
    assert census.fixed_seconds == 20.0
    assert census.notes == ("the cost model's unit set by compiling for real: k/b.cu 30.0 s",)


def test_without_a_fixed_cost_or_a_family_the_recipes_n_is_kept() -> None:
    tus = tuple(CensusTU(f"t{i}.c", None, 1.0, measured=False) for i in range(8))
    census = Census(tus, "static scan", None, "not measured")
    plan = make_plan(census, range(1, 9), jobs=2, sharded_cells=1, whole_cells=0, recipe_count=3)
    assert plan.recommended == 3
    assert plan.reason.startswith("the recipe's own N: the fixed cost of a job is unknown")


@pytest.mark.parametrize(
    "recipe",
    [
        pytest.param(path.stem, marks=[pytest.mark.network] if "[source]\npypi" in path.read_text()
                     or "sdist" in path.read_text() else [])
        for path in sorted(RECIPES.glob("*.toml"))
    ],
)
def test_kiln_plan_static_json_completes_on_every_bundled_recipe(kiln: Kiln, recipe: str) -> None:
    data = json.loads(kiln("plan", RECIPES / f"{recipe}.toml", "--static", "--json").stdout)
    assert data["candidates"] and all(c["count"] >= 1 for c in data["candidates"])
    assert isinstance(data["recommended"], int) and data["recommended"] >= 1
    assert data["census"]["how"] == "static scan"
    # demo-cython's C TUs exist only once Cython has run: a static scan of its tree finds
    # none (the census pass, which builds, does).
    assert (len(data["census"]["tus"]) > 0) == (recipe != "demo-cython")


def _job(job_dir: Path, edges: dict[str, tuple[int, int]], records: list[dict[str, object]]) -> None:
    """A job directory: its tree's sources, a compile database, ninja's log of *edges*
    (source name -> start and end ms) and, for a shard, its wrapper log."""
    build, tree = job_dir / "build", job_dir / "src"
    build.mkdir(parents=True)
    (tree / "src").mkdir(parents=True)
    entries = []
    lines = ["# ninja log v6"]
    for name, (start, end) in edges.items():
        (tree / "src" / name).write_text("int x;\n")
        output = f"obj/{name}.o"
        entries.append({"directory": str(build), "file": str(tree / "src" / name),
                        "command": f"g++ -c {tree / 'src' / name} -o {output}", "output": output})
        lines.append(f"{start}\t{end}\t0\t{output}\t0")
    (build / "compile_commands.json").write_text(json.dumps(entries))
    (build / ".ninja_log").write_text("\n".join(lines) + "\n")
    if records:
        (job_dir / "wrapper.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_shards_ninja_log_times_no_tu_its_stub_slots_compiled_others_in(tmp_path: Path) -> None:
    """A stub's edge in a shard's ninja log can hold another TU compiled ahead in its slot
    (shard/ahead.py): the wrapper log times that shard's TUs; an unsharded build's ninja
    log times its own."""
    from wheelkiln.plan.census import read_history

    _job(tmp_path / "pkg-shard-0-of-2", {"a.cpp": (0, 3000), "b.cpp": (0, 9000)}, [
        {"tu": "src/a.cpp", "action": "compile", "seconds": 0.02},  # a cache hit...
        {"tu": "src/a.cpp", "action": "ahead", "seconds": 8.5},  # ...of this compile
        {"tu": "src/b.cpp", "action": "stub", "seconds": 0.01},  # its slot held a.cpp's
    ])  # fmt: skip
    _job(tmp_path / "pkg", {"c.cpp": (10, 4010)}, [])
    history = read_history([tmp_path])
    assert history.seconds == {"src/a.cpp": 8.5, "src/c.cpp": 4.0}
    assert history.seen == {"src/a.cpp", "src/b.cpp", "src/c.cpp"}


def test_link_records_that_say_no_usable_time_are_passed_over(tmp_path: Path) -> None:
    from wheelkiln.plan.census import read_history

    (tmp_path / "a.link.json").write_text('{"wall_seconds": 12.5}')
    (tmp_path / "b.link.json").write_text('{"wall_seconds": NaN}')
    (tmp_path / "c.link.json").write_text('{"wall_seconds": -3}')
    (tmp_path / "d.link.json").write_text("[" * 100_000)
    (tmp_path / "e.link.json").write_text('{"wall_seconds": 1' + "0" * 5000 + "}")
    assert read_history([tmp_path]).link_seconds == [12.5]


def test_a_family_pattern_that_backtracks_without_end_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wheelkiln.errors import RecipeError
    from wheelkiln.plan import census
    from wheelkiln.recipe.model import Family

    monkeypatch.setattr(census, "FAMILY_SEARCH_SECONDS", 0.2)
    sane, nested = Family(name="sm90", pattern="sm90"), Family(name="slow", pattern="(a+)+b")
    key = "src/" + "a" * 40 + ".cu"
    assert census.family_of("kernels/sm90/k.cu", [sane, nested]) == "sm90"
    with pytest.raises(RecipeError) as refused:
        census.family_of(key, [sane, nested])
    assert refused.value.message == (
        f"[[families]] 'slow': its pattern '(a+)+b' took more than 0.2 s to search the TU "
        f"path {key!r}; a pattern with a nested repeat (such as (a+)+) backtracks without end."
    )
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0), "no timer left running"
