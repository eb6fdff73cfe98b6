"""Matrix expansion: exact job lists for axes, links_torch, sharding platforms, filters,
skip-existing, and the 44-recipe synthetic farm."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.farm import FARM, FarmRecipe, expected_totals, write_farm, write_recipe
from wheelkiln.cells import Cell
from wheelkiln.cli.matrix import matrix_command
from wheelkiln.matrix import naming
from wheelkiln.matrix.inputs import scan_existing
from wheelkiln.matrix.jobs import (
    ExistingWheels,
    Job,
    MatrixPlan,
    expand_jobs,
    expand_matrix,
    wheel_matches_cell,
)
from wheelkiln.matrix.render import matrix_document
from wheelkiln.recipe.load import LoadedRecipe, load_recipe

DEMO = FarmRecipe(
    "demo", python=("3.11", "3.12"), cuda=("12.8", "13.0"), torch=("2.9",), links_torch=True,
    platforms=("linux-x86_64", "windows-amd64"), shard_count=3,
    shard_platforms=("linux-x86_64",),
)


def load(root: Path, *specs: FarmRecipe) -> list[LoadedRecipe]:
    return [load_recipe(write_recipe(root, spec)) for spec in specs]


def ids(jobs: list[Job] | tuple[Job, ...]) -> list[str]:
    return [job.id for job in jobs]


def sharded(cell: str, count: int) -> list[str]:
    """A sharded cell's jobs: shards 0..N-1, then its link."""
    return [f"shard-{cell}-{i}-of-{count}" for i in range(count)] + [f"link-{cell}"]


# --- axes, links_torch, sharding platforms ------------------------------------------


def test_demo_expands_to_exact_jobs(tmp_path: Path) -> None:
    jobs = expand_jobs(load(tmp_path, DEMO), root=tmp_path)
    assert ids(jobs) == [
        "shard-demo-py3_11-cu12_8-torch2_9-linux-x86_64-0-of-3",
        "shard-demo-py3_11-cu12_8-torch2_9-linux-x86_64-1-of-3",
        "shard-demo-py3_11-cu12_8-torch2_9-linux-x86_64-2-of-3",
        "link-demo-py3_11-cu12_8-torch2_9-linux-x86_64",
        "build-demo-py3_11-cu12_8-torch2_9-windows-amd64",
        "shard-demo-py3_11-cu13_0-torch2_9-linux-x86_64-0-of-3",
        "shard-demo-py3_11-cu13_0-torch2_9-linux-x86_64-1-of-3",
        "shard-demo-py3_11-cu13_0-torch2_9-linux-x86_64-2-of-3",
        "link-demo-py3_11-cu13_0-torch2_9-linux-x86_64",
        "build-demo-py3_11-cu13_0-torch2_9-windows-amd64",
        "shard-demo-py3_12-cu12_8-torch2_9-linux-x86_64-0-of-3",
        "shard-demo-py3_12-cu12_8-torch2_9-linux-x86_64-1-of-3",
        "shard-demo-py3_12-cu12_8-torch2_9-linux-x86_64-2-of-3",
        "link-demo-py3_12-cu12_8-torch2_9-linux-x86_64",
        "build-demo-py3_12-cu12_8-torch2_9-windows-amd64",
        "shard-demo-py3_12-cu13_0-torch2_9-linux-x86_64-0-of-3",
        "shard-demo-py3_12-cu13_0-torch2_9-linux-x86_64-1-of-3",
        "shard-demo-py3_12-cu13_0-torch2_9-linux-x86_64-2-of-3",
        "link-demo-py3_12-cu13_0-torch2_9-linux-x86_64",
        "build-demo-py3_12-cu13_0-torch2_9-windows-amd64",
    ]


def test_demo_job_fields(tmp_path: Path) -> None:
    jobs = {job.id: job for job in expand_jobs(load(tmp_path, DEMO), root=tmp_path)}
    shard = jobs["shard-demo-py3_11-cu12_8-torch2_9-linux-x86_64-1-of-3"]
    assert shard == Job(
        id="shard-demo-py3_11-cu12_8-torch2_9-linux-x86_64-1-of-3",
        kind="shard",
        package="demo",
        recipe_path="recipes/demo.toml",
        cell_id="demo-py3.11-cu12.8-torch2.9-linux-x86_64",
        axes=(("python", "3.11"), ("cuda", "12.8"), ("torch", "2.9"),
              ("platform", "linux-x86_64")),
        cache="ccache",
        name="shard demo linux-x86_64 py3.11 cu12.8 torch2.9 2/3",
        needs=(),
        shard_index=1,
        shard_count=3,
        shard_partition="seat",
    )
    link = jobs["link-demo-py3_11-cu12_8-torch2_9-linux-x86_64"]
    assert link.needs == tuple(f"shard-demo-py3_11-cu12_8-torch2_9-linux-x86_64-{i}-of-3"
                               for i in range(3))
    assert (link.shard_index, link.shard_count, link.shard_partition) == (None, 3, "seat")
    assert link.name == "link demo linux-x86_64 py3.11 cu12.8 torch2.9"
    build = jobs["build-demo-py3_12-cu13_0-torch2_9-windows-amd64"]
    assert (build.cache, build.shard_index, build.shard_count, build.shard_partition) == (
        "sccache", None, None, None)
    assert build.needs == ()
    assert build.name == "build demo windows-amd64 py3.12 cu13.0 torch2.9"


def test_links_torch_false_collapses_the_torch_axis(tmp_path: Path) -> None:
    collapsed = FarmRecipe("cpuonly", cuda=("13.0",), torch=("2.8", "2.9"), links_torch=False)
    assert ids(expand_jobs(load(tmp_path, collapsed))) == [
        "build-cpuonly-py3_11-cu13_0-linux-x86_64",
    ]
    linked = FarmRecipe("linked", cuda=("13.0",), torch=("2.8", "2.9"), links_torch=True)
    assert ids(expand_jobs(load(tmp_path, linked))) == [
        "build-linked-py3_11-cu13_0-torch2_8-linux-x86_64",
        "build-linked-py3_11-cu13_0-torch2_9-linux-x86_64",
    ]


def test_no_cuda_lanes_give_cuda_none(tmp_path: Path) -> None:
    plain = FarmRecipe("plain", python=("3.10", "3.11"), platforms=("macos-arm64",))
    jobs = expand_jobs(load(tmp_path, plain))
    assert ids(jobs) == ["build-plain-py3_10-macos-arm64", "build-plain-py3_11-macos-arm64"]
    assert jobs[0].axis == {"python": "3.10", "cuda": "none", "torch": "none",
                            "platform": "macos-arm64"}


def test_empty_sharding_platforms_shard_every_platform(tmp_path: Path) -> None:
    spec = FarmRecipe("every", platforms=("linux-x86_64", "windows-amd64"), shard_count=2)
    assert ids(expand_jobs(load(tmp_path, spec))) == [
        *sharded("every-py3_11-linux-x86_64", 2),
        *sharded("every-py3_11-windows-amd64", 2),
    ]


def test_sharding_platforms_restrict_which_lanes_shard(tmp_path: Path) -> None:
    spec = FarmRecipe("some", platforms=("linux-x86_64", "linux-aarch64", "windows-amd64"),
                      shard_count=2, shard_platforms=("linux-aarch64", "windows-amd64"))
    assert ids(expand_jobs(load(tmp_path, spec))) == [
        *sharded("some-py3_11-linux-aarch64", 2),
        "build-some-py3_11-linux-x86_64",
        *sharded("some-py3_11-windows-amd64", 2),
    ]


def test_count_one_never_shards(tmp_path: Path) -> None:
    spec = FarmRecipe("one", platforms=("linux-x86_64", "windows-amd64"), shard_count=1,
                      shard_platforms=("linux-x86_64",))
    assert ids(expand_jobs(load(tmp_path, spec))) == [
        "build-one-py3_11-linux-x86_64", "build-one-py3_11-windows-amd64",
    ]


def test_source_filter_is_carried_to_shard_and_link_jobs(tmp_path: Path) -> None:
    spec = FarmRecipe("src", shard_count=2, shard_partition="source")
    jobs = expand_jobs(load(tmp_path, spec))
    assert [(job.kind, job.shard_partition) for job in jobs] == [
        ("shard", "source"), ("shard", "source"), ("link", "source"),
    ]


def test_recipe_path_is_relative_to_root(tmp_path: Path) -> None:
    recipes = load(tmp_path, DEMO)
    assert expand_jobs(recipes, root=tmp_path)[0].recipe_path == "recipes/demo.toml"
    assert expand_jobs(recipes, root=tmp_path / "recipes")[0].recipe_path == "demo.toml"
    assert expand_jobs(recipes, root=tmp_path / "elsewhere")[0].recipe_path == (
        "../recipes/demo.toml")


# --- filters and lanes --------------------------------------------------------------


def test_filter_on_one_axis(tmp_path: Path) -> None:
    jobs = expand_jobs(load(tmp_path, DEMO), ["python=3.12"])
    assert ids(jobs) == [
        *sharded("demo-py3_12-cu12_8-torch2_9-linux-x86_64", 3),
        "build-demo-py3_12-cu12_8-torch2_9-windows-amd64",
        *sharded("demo-py3_12-cu13_0-torch2_9-linux-x86_64", 3),
        "build-demo-py3_12-cu13_0-torch2_9-windows-amd64",
    ]


def test_filters_on_one_axis_are_alternatives(tmp_path: Path) -> None:
    recipes = load(tmp_path, DEMO)
    assert expand_jobs(recipes, ["python=3.11", "python=3.12"]) == expand_jobs(recipes)


def test_filters_on_different_axes_all_hold(tmp_path: Path) -> None:
    jobs = expand_jobs(load(tmp_path, DEMO), ["platform=windows-amd64", "cuda=13.0"])
    assert ids(jobs) == [
        "build-demo-py3_11-cu13_0-torch2_9-windows-amd64",
        "build-demo-py3_12-cu13_0-torch2_9-windows-amd64",
    ]


def test_lane_selects_one_cuda_lane_and_accepts_cu_prefix(tmp_path: Path) -> None:
    recipes = load(tmp_path, DEMO)
    by_lane = expand_jobs(recipes, lane="13.0")
    assert by_lane == expand_jobs(recipes, ["cuda=13.0"])
    assert by_lane == expand_jobs(recipes, lane="cu13.0")
    assert {job.axis["cuda"] for job in by_lane} == {"13.0"}
    assert len(by_lane) == 10


def test_values_may_carry_their_cell_id_prefix(tmp_path: Path) -> None:
    recipes = load(tmp_path, DEMO)
    assert expand_jobs(recipes, ["python=py3.12", "cuda=cu13.0", "torch=torch2.9"]) == (
        expand_jobs(recipes, ["python=3.12", "cuda=13.0", "torch=2.9"]))


def test_lane_none_selects_cells_without_cuda(tmp_path: Path) -> None:
    plain = FarmRecipe("plain")
    recipes = load(tmp_path, DEMO, plain)
    assert ids(expand_jobs(recipes, lane="none")) == ["build-plain-py3_11-linux-x86_64"]


def test_package_filter_and_excluded_packages(tmp_path: Path) -> None:
    plain = FarmRecipe("plain")
    plan = expand_matrix(load(tmp_path, DEMO, plain), ["package=plain"])
    assert ids(plan.jobs) == ["build-plain-py3_11-linux-x86_64"]
    assert plan.excluded == ("demo",)


def test_torch_filter_leaves_out_torchless_packages_when_others_match(tmp_path: Path) -> None:
    named = {spec.name: spec for spec in FARM}
    plan = expand_matrix(load(tmp_path, named["cumm"], named["flash-attn"]), ["torch=2.9"])
    assert {job.package for job in plan.jobs} == {"flash-attn"}
    assert plan.excluded == ("cumm",)
    assert plan.counts()["shard"] == 8 * 8  # 2 py x 2 cuda x 2 platforms, N = 8


# --- skip-existing --------------------------------------------------------------------


def write_record(directory: Path, cell: str, wheel: str | None, exit_code: int = 0,
                 kind: str = "build") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        (directory / wheel).write_bytes(b"PK")
    record = {"cell": cell, "kind": kind, "exit_code": exit_code,
              "wheel": {"name": wheel} if wheel else None}
    (directory / f"{cell}.{kind}.json").write_text(json.dumps(record))


def test_skip_existing_by_build_record(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    write_record(dist, "demo-py3.11-cu12.8-torch2.9-windows-amd64",
                 "demo-1.0-cp311-cp311-win_amd64.whl")
    write_record(dist, "demo-py3.12-cu13.0-torch2.9-linux-x86_64",
                 "demo-1.0-cp312-cp312-linux_x86_64.whl", kind="link")
    plan = expand_matrix(load(tmp_path, DEMO), skip_existing=scan_existing(dist))
    assert [(s.cell.id, s.reason) for s in plan.skipped] == [
        ("demo-py3.11-cu12.8-torch2.9-windows-amd64",
         "already built: demo-1.0-cp311-cp311-win_amd64.whl and its build record "
         f"demo-py3.11-cu12.8-torch2.9-windows-amd64.build.json are in {dist}"),
        ("demo-py3.12-cu13.0-torch2.9-linux-x86_64",
         "already built: demo-1.0-cp312-cp312-linux_x86_64.whl and its build record "
         f"demo-py3.12-cu13.0-torch2.9-linux-x86_64.link.json are in {dist}"),
    ]
    assert "build-demo-py3_11-cu12_8-torch2_9-windows-amd64" not in ids(plan.jobs)
    assert not any("py3_12-cu13_0-torch2_9-linux" in job.id for job in plan.jobs)
    assert plan.counts() == {"cells": 8, "skipped": 2, "sharded_cells": 3, "whole_cells": 3,
                             "shard": 9, "link": 3, "build": 3, "total": 15}


def test_failed_or_wheelless_records_do_not_skip(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    write_record(dist, "demo-py3.11-cu12.8-torch2.9-windows-amd64",
                 "demo-1.0-cp311-cp311-win_amd64.whl", exit_code=1)
    write_record(dist, "demo-py3.11-cu13.0-torch2.9-windows-amd64", None)
    record = dist / "demo-py3.12-cu13.0-torch2.9-windows-amd64.build.json"
    record.write_text(json.dumps({"cell": record.name[:-11], "exit_code": 0,
                                  "wheel": {"name": "gone-1.0-cp312-cp312-win_amd64.whl"}}))
    (dist / "demo-py3.12-cu12.8-torch2.9-windows-amd64.build.json").write_text("{torn")
    plan = expand_matrix(load(tmp_path, DEMO), skip_existing=scan_existing(dist))
    assert plan.skipped == ()
    assert len(plan.jobs) == 20


def test_skip_existing_by_wheel_file_name(tmp_path: Path) -> None:
    names = {
        # a local label naming the lane and torch: skips that one cell
        "demo-1.0+cu128torch2.9-cp311-cp311-win_amd64.whl",
        # manylinux tag, label with separators: skips the sharded cell (3 shards + link)
        "demo-1.0+cu130.torch2.9-cp312-cp312-manylinux_2_28_x86_64.whl",
        # no label: cannot tell the lanes apart, skips nothing
        "demo-1.0-cp311-cp311-linux_x86_64.whl",
        # another package's wheel
        "other-1.0+cu128torch2.9-cp312-cp312-win_amd64.whl",
    }
    plan = expand_matrix(load(tmp_path, DEMO), skip_existing=names)
    assert [(s.cell.id, s.reason) for s in plan.skipped] == [
        ("demo-py3.11-cu12.8-torch2.9-windows-amd64",
         "already built: demo-1.0+cu128torch2.9-cp311-cp311-win_amd64.whl is in . "
         "(matched by file name)"),
        ("demo-py3.12-cu13.0-torch2.9-linux-x86_64",
         "already built: demo-1.0+cu130.torch2.9-cp312-cp312-manylinux_2_28_x86_64.whl "
         "is in . (matched by file name)"),
    ]
    assert len(plan.jobs) == 20 - 1 - 4


@pytest.mark.parametrize(
    ("filename", "cell", "expected"),
    [
        ("pkg-1.0-cp311-cp311-linux_x86_64.whl", Cell("pkg", "3.11", "none", "none",
                                                      "linux-x86_64"), True),
        ("Pkg_Name-1.0-cp311-cp311-linux_x86_64.whl", Cell("pkg.name", "3.11", "none", "none",
                                                           "linux-x86_64"), True),
        ("pkg-1.0-cp312-cp312-linux_x86_64.whl", Cell("pkg", "3.11", "none", "none",
                                                      "linux-x86_64"), False),
        ("pkg-1.0-cp311-cp311-linux_aarch64.whl", Cell("pkg", "3.11", "none", "none",
                                                       "linux-x86_64"), False),
        ("pkg-1.0-cp311-cp311-manylinux2014_aarch64.whl", Cell("pkg", "3.11", "none", "none",
                                                               "linux-aarch64"), True),
        ("pkg-1.0-cp311-cp311-macosx_11_0_arm64.whl", Cell("pkg", "3.11", "none", "none",
                                                           "macos-arm64"), True),
        ("pkg-1.0-cp311-cp311-macosx_11_0_arm64.whl", Cell("pkg", "3.11", "none", "none",
                                                           "macos-x86_64"), False),
        ("pkg-1.0-cp39-abi3-linux_x86_64.whl", Cell("pkg", "3.11", "none", "none",
                                                    "linux-x86_64"), False),
        ("pkg-1.0+cu130-cp311-cp311-linux_x86_64.whl", Cell("pkg", "3.11", "13.0", "none",
                                                            "linux-x86_64"), True),
        ("pkg-1.0+cu1300-cp311-cp311-linux_x86_64.whl", Cell("pkg", "3.11", "13.0", "none",
                                                             "linux-x86_64"), False),
        ("pkg-1.0+cu128-cp311-cp311-linux_x86_64.whl", Cell("pkg", "3.11", "13.0", "none",
                                                            "linux-x86_64"), False),
        ("pkg-1.0+cu130-cp311-cp311-linux_x86_64.whl", Cell("pkg", "3.11", "none", "none",
                                                            "linux-x86_64"), False),
        ("pkg-1.0+cu130torch2.10-cp311-cp311-linux_x86_64.whl",
         Cell("pkg", "3.11", "13.0", "2.1", "linux-x86_64"), False),
        ("pkg-1.0+cu130torch2.10-cp311-cp311-linux_x86_64.whl",
         Cell("pkg", "3.11", "13.0", "2.10", "linux-x86_64"), True),
        ("pkg-1.0+cu130-cp311-cp311-linux_x86_64.whl",
         Cell("pkg", "3.11", "13.0", "2.10", "linux-x86_64"), False),
        ("not-a-wheel.whl", Cell("pkg", "3.11", "none", "none", "linux-x86_64"), False),
    ],
)
def test_wheel_file_name_matching(filename: str, cell: Cell, expected: bool) -> None:
    assert wheel_matches_cell(filename, cell) is expected


def test_skip_existing_accepts_a_callable(tmp_path: Path) -> None:
    plan = expand_matrix(load(tmp_path, DEMO),
                         skip_existing=lambda cell: "told so" if cell.python == "3.11" else None)
    assert [s.reason for s in plan.skipped] == ["told so"] * 4
    assert {job.axis["python"] for job in plan.jobs} == {"3.12"}


def test_everything_skipped_is_an_empty_plan_not_an_error(tmp_path: Path) -> None:
    plan = expand_matrix(load(tmp_path, DEMO), skip_existing=lambda cell: "built")
    assert plan.jobs == ()
    assert plan.counts()["skipped"] == 8
    document = matrix_document(plan)
    assert document["shard"] == {"include": []}
    assert document["counts"]["total"] == 0


def test_scan_existing_of_a_missing_directory_skips_nothing(tmp_path: Path) -> None:
    existing = scan_existing(tmp_path / "nope")
    assert existing == ExistingWheels(str(tmp_path / "nope"), frozenset())


# --- the farm -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[LoadedRecipe]]:
    root = tmp_path_factory.mktemp("farm")
    return root, [load_recipe(path) for path in write_farm(root)]


@pytest.fixture(scope="module")
def farm_plan(farm: tuple[Path, list[LoadedRecipe]]) -> MatrixPlan:
    root, recipes = farm
    return expand_matrix(recipes, root=root, cap=None)


def test_farm_is_varied(farm: tuple[Path, list[LoadedRecipe]]) -> None:
    _root, recipes = farm
    assert len(recipes) == 44
    models = [loaded.recipe for loaded in recipes]
    assert any(m.matrix.links_torch for m in models)
    assert any(m.matrix.torch and not m.matrix.links_torch for m in models)
    assert any(not m.matrix.cuda for m in models)
    assert any(len(m.matrix.cuda) == 2 for m in models)
    assert any(m.sharding.platforms for m in models)
    assert any(m.sharding.count > 1 and not m.sharding.platforms for m in models)
    assert any(m.sharding.partition == "source" and m.sharding.count > 1 for m in models)
    assert any(m.source.pypi for m in models) and any(m.source.path for m in models)
    platforms = {p for m in models for p in m.matrix.platforms}
    assert platforms == {"linux-x86_64", "linux-aarch64", "windows-amd64", "macos-arm64",
                         "macos-x86_64"}


def test_farm_counts_match_the_spec(farm_plan: MatrixPlan) -> None:
    expected = expected_totals()
    counts = farm_plan.counts()
    assert {key: counts[key] for key in expected} == expected
    # pinned, so a change in the farm or the expansion shows up here
    assert counts == {"cells": 268, "skipped": 0, "sharded_cells": 120, "whole_cells": 148,
                      "shard": 554, "link": 120, "build": 148, "total": 822}


def test_farm_counts_per_recipe(farm_plan: MatrixPlan) -> None:
    for spec in FARM:
        jobs = [job for job in farm_plan.jobs if job.package == spec.name]
        got = {kind: sum(1 for job in jobs if job.kind == kind)
               for kind in ("shard", "link", "build")}
        assert got == spec.expected(), spec.name


def test_farm_jobs_are_sorted_unique_and_well_named(farm_plan: MatrixPlan) -> None:
    jobs = farm_plan.jobs
    assert len({job.id for job in jobs}) == len(jobs)
    for job in jobs:
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", job.id), job.id
        assert len(job.id) <= 100 and len(job.name) <= 100
    cells = [job.cell_id for job in jobs]
    planned = [p.cell.id for p in farm_plan.cells]
    assert list(dict.fromkeys(cells)) == planned
    assert [p.cell for p in farm_plan.cells] == sorted(p.cell for p in farm_plan.cells)


def test_farm_links_need_exactly_their_shards(farm_plan: MatrixPlan) -> None:
    shards: dict[str, list[str]] = {}
    for job in farm_plan.jobs_of("shard"):
        shards.setdefault(job.cell_id, []).append(job.id)
    links = farm_plan.jobs_of("link")
    assert len(links) == 120
    for link in links:
        assert list(link.needs) == shards[link.cell_id]
        assert len(link.needs) == link.shard_count


def test_farm_expansion_is_deterministic(farm: tuple[Path, list[LoadedRecipe]]) -> None:
    root, recipes = farm
    first = expand_matrix(recipes, root=root, cap=None)
    second = expand_matrix(list(reversed(recipes)), root=root, cap=None)
    assert first.jobs == second.jobs


def test_farm_windows_cells_use_sccache(farm_plan: MatrixPlan) -> None:
    for job in farm_plan.jobs:
        assert job.cache == ("sccache" if job.platform == "windows-amd64" else "ccache")


def test_farm_lane_split_fits_the_cap(farm: tuple[Path, list[LoadedRecipe]]) -> None:
    root, recipes = farm
    for lane, largest in (("12.8", 239), ("13.0", 239), ("none", 76)):
        plan = expand_matrix(recipes, lane=lane, root=root)  # checks the cap
        assert plan.sizes.largest == largest


# --- JSON -------------------------------------------------------------------------------


def test_json_document_shape(tmp_path: Path) -> None:
    document = matrix_document(expand_matrix(load(tmp_path, DEMO), ["python=3.11"],
                                             root=tmp_path))
    assert set(document) == {"schema", "cap", "lane", "filters", "shard", "link", "build",
                             "counts", "skipped", "excluded"}
    assert document["filters"] == ["python=3.11"]
    assert document["counts"] == {"cells": 4, "skipped": 0, "sharded_cells": 2,
                                  "whole_cells": 2, "shard": 6, "link": 2, "build": 2,
                                  "total": 10}
    assert [len(document[k]["include"]) for k in ("shard", "link", "build")] == [6, 2, 2]
    cell = "demo-py3.11-cu13.0-torch2.9-linux-x86_64"
    assert document["shard"]["include"][5] == {
        "id": "shard-demo-py3_11-cu13_0-torch2_9-linux-x86_64-2-of-3",
        "name": "shard demo linux-x86_64 py3.11 cu13.0 torch2.9 3/3",
        "kind": "shard", "package": "demo", "recipe": "recipes/demo.toml", "cell": cell,
        "python": "3.11", "cuda": "13.0", "torch": "2.9", "platform": "linux-x86_64",
        "runs_on": "ubuntu-24.04", "cache": "ccache",
        "container": "nvidia/cuda:13.0.1-devel-ubuntu24.04@sha256:"
                     "7d2f6a8c2071d911524f95061a0db363e24d27aa51ec831fcccf9e76eb72bc92",
        "shard_index": 2, "shard_count": 3, "shard_partition": "seat",
        "archive": f"{cell}-shard-2-of-3.tar.gz", "artifact": f"shard-{cell}-2-of-3",
    }
    assert document["link"]["include"][1] == {
        "id": "link-demo-py3_11-cu13_0-torch2_9-linux-x86_64",
        "name": "link demo linux-x86_64 py3.11 cu13.0 torch2.9",
        "kind": "link", "package": "demo", "recipe": "recipes/demo.toml", "cell": cell,
        "python": "3.11", "cuda": "13.0", "torch": "2.9", "platform": "linux-x86_64",
        "runs_on": "ubuntu-24.04", "cache": "ccache", "shard_count": 3,
        "container": "nvidia/cuda:13.0.1-devel-ubuntu24.04@sha256:"
                     "7d2f6a8c2071d911524f95061a0db363e24d27aa51ec831fcccf9e76eb72bc92",
        "shard_partition": "seat", "artifact_pattern": f"shard-{cell}-*-of-3",
        "wheel_artifact": f"wheel-{cell}",
        "needs": [f"shard-demo-py3_11-cu13_0-torch2_9-linux-x86_64-{i}-of-3" for i in range(3)],
    }
    win = "demo-py3.11-cu12.8-torch2.9-windows-amd64"
    assert document["build"]["include"][0] == {
        "id": "build-demo-py3_11-cu12_8-torch2_9-windows-amd64",
        "name": "build demo windows-amd64 py3.11 cu12.8 torch2.9",
        "kind": "build", "package": "demo", "recipe": "recipes/demo.toml", "cell": win,
        "python": "3.11", "cuda": "12.8", "torch": "2.9", "platform": "windows-amd64",
        "runs_on": "windows-2022", "cache": "sccache", "wheel_artifact": f"wheel-{win}",
        "container": "",  # GitHub runs no Linux container on Windows runners
    }


# --- naming ---------------------------------------------------------------------------


def test_long_names_stay_within_github_limits() -> None:
    cell = Cell("a" * 150, "3.12", "13.0", "2.9", "linux-aarch64")
    name = naming.display_name("shard", cell, 11, 12)
    assert len(name) == 100
    assert name.endswith("... linux-aarch64 py3.12 cu13.0 torch2.9 12/12")
    ident = naming.job_id("shard", cell.id, 11, 12)
    assert len(ident) == 100 and re.fullmatch(r"[A-Za-z0-9_-]+", ident)
    other = naming.job_id("shard", cell.id, 10, 12)
    assert other != ident and other[:90] == ident[:90]


def test_short_names_are_untouched() -> None:
    cell = Cell("flash-attn", "3.11", "none", "none", "windows-amd64")
    assert naming.display_name("build", cell) == "build flash-attn windows-amd64 py3.11"
    assert naming.job_id("build", cell.id) == "build-flash-attn-py3_11-windows-amd64"


# --- the command ----------------------------------------------------------------------


def test_matrix_command_json(farm: tuple[Path, list[LoadedRecipe]],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    root, _recipes = farm
    monkeypatch.chdir(root)
    result = CliRunner().invoke(matrix_command, ["--json", "-f", "package=natten"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["counts"]["shard"] == 20
    assert document["link"]["include"][0]["shard_partition"] == "source"
    assert document["build"]["include"][0]["platform"] == "windows-amd64"


def test_matrix_command_explain(farm: tuple[Path, list[LoadedRecipe]],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    root, _recipes = farm
    monkeypatch.chdir(root)
    result = CliRunner().invoke(matrix_command, ["recipes/natten.toml", "--explain"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "natten-py3.12-cu13.0-torch2.9-linux-x86_64" in result.stderr
    assert "20 shards (source) + link" in result.stderr
    assert "2 cells: 1 sharded (20 shard + 1 link jobs), 1 whole (1 build jobs)" in result.stderr


def test_matrix_command_skip_existing_explains(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write_recipe(tmp_path, DEMO)
    write_record(tmp_path / "dist", "demo-py3.11-cu12.8-torch2.9-windows-amd64",
                 "demo-1.0-cp311-cp311-win_amd64.whl")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(matrix_command, ["--skip-existing", "dist", "--json",
                                                 "--explain"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["skipped"] == [{
        "cell": "demo-py3.11-cu12.8-torch2.9-windows-amd64", "package": "demo",
        "reason": "already built: demo-1.0-cp311-cp311-win_amd64.whl and its build record "
        "demo-py3.11-cu12.8-torch2.9-windows-amd64.build.json are in dist",
    }]
    assert "skipped" in result.stderr and "already built" in result.stderr
