"""Every matrix refusal, on its exact message: filters that select nothing, unknown axes
and values, torch on torch-independent packages, lanes, and GitHub's 256-job cap."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.farm import FARM, FarmRecipe, write_farm, write_recipe
from wheelkiln.cli.matrix import matrix_command
from wheelkiln.errors import KilnError, RecipeError, UsageError
from wheelkiln.matrix.filters import parse_filter
from wheelkiln.matrix.inputs import load_recipes
from wheelkiln.matrix.jobs import expand_matrix
from wheelkiln.recipe.load import LoadedRecipe, load_recipe

NAMED = {spec.name: spec for spec in FARM}
DEMO = FarmRecipe(
    "demo", python=("3.11", "3.12"), cuda=("12.8", "13.0"), torch=("2.9",), links_torch=True,
    platforms=("linux-x86_64", "windows-amd64"), shard_count=3,
    shard_platforms=("linux-x86_64",),
)
ALL_PLATFORMS = ("linux-x86_64", "linux-aarch64", "windows-amd64", "macos-arm64",
                 "macos-x86_64")


def load(root: Path, *specs: FarmRecipe) -> list[LoadedRecipe]:
    return [load_recipe(write_recipe(root, spec)) for spec in specs]


def refusal(recipes: list[LoadedRecipe], filters: Sequence[str] = (),
            lane: str | None = None) -> UsageError:
    with pytest.raises(UsageError) as caught:
        expand_matrix(recipes, filters, lane)
    assert caught.value.exit_code == 2
    return caught.value


# --- parsing ----------------------------------------------------------------------------


def test_filter_without_equals() -> None:
    with pytest.raises(UsageError) as caught:
        parse_filter("python")
    assert caught.value.message == "-f python: expected AXIS=VALUE, e.g. -f cuda=13.0."
    assert caught.value.hint == "Axes: package, python, cuda, torch, platform."


def test_unknown_axis_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError) as caught:
        parse_filter("gpu=a100")
    assert caught.value.message == (
        "-f gpu=a100: unknown axis 'gpu'. Valid axes: package, python, cuda, torch, platform."
    )


def test_unknown_axis_suggests_the_nearest() -> None:
    with pytest.raises(UsageError) as caught:
        parse_filter("pytorch=2.9")
    assert caught.value.message == (
        "-f pytorch=2.9: unknown axis 'pytorch'. Perhaps you meant 'torch'? "
        "Valid axes: package, python, cuda, torch, platform."
    )


def test_filter_without_value() -> None:
    with pytest.raises(UsageError) as caught:
        parse_filter("cuda=")
    assert caught.value.message == "-f cuda=: no value after '='."


# --- filters that select nothing --------------------------------------------------------


def test_unknown_value_lists_the_valid_ones(tmp_path: Path) -> None:
    error = refusal(load(tmp_path, DEMO), ["cuda=12.9"])
    assert error.message == "-f cuda=12.9 matches no cell. Valid cuda values: 12.8, 13.0."
    assert error.hint == "Run kiln matrix --explain to see every cell."


def test_valid_values_are_in_version_order(tmp_path: Path) -> None:
    spec = FarmRecipe("old", python=("3.10", "3.9"), platforms=("linux-x86_64", "macos-arm64"))
    error = refusal(load(tmp_path, spec), ["python=3.8"])
    assert error.message == "-f python=3.8 matches no cell. Valid python values: 3.9, 3.10."
    error = refusal(load(tmp_path, spec), ["platform=win"])
    assert error.message == (
        "-f platform=win matches no cell. Valid platform values: linux-x86_64, macos-arm64."
    )


def test_unknown_package(tmp_path: Path) -> None:
    error = refusal(load(tmp_path, DEMO, NAMED["cumm"]), ["package=flash_attn"])
    assert error.message == (
        "-f package=flash_attn matches no cell. Valid package values: cumm, demo."
    )


def test_torch_filter_on_a_torch_independent_package(tmp_path: Path) -> None:
    error = refusal(load(tmp_path, NAMED["cumm"]), ["torch=2.9"])
    assert error.message == (
        "-f torch=2.9 matches no cell: cumm has no torch axis (links_torch = false), "
        "so its wheels do not depend on torch."
    )
    assert error.hint == (
        "Drop -f torch=2.9. Set matrix.links_torch = true only if the wheel links torch."
    )


def test_torch_filter_on_torch_independent_packages_that_list_torch(tmp_path: Path) -> None:
    # spconv lists torch = ["2.9"] but links_torch = false: the axis is collapsed
    error = refusal(load(tmp_path, NAMED["cumm"], NAMED["spconv"]), ["torch=2.9"])
    assert error.message == (
        "-f torch=2.9 matches no cell: cumm, spconv have no torch axis "
        "(links_torch = false), so their wheels do not depend on torch."
    )


def test_unknown_torch_value_names_the_torch_independent_packages(tmp_path: Path) -> None:
    error = refusal(load(tmp_path, NAMED["cumm"], NAMED["flash-attn"]), ["torch=3.0"])
    assert error.message == (
        "-f torch=3.0 matches no cell. Valid torch values: 2.8, 2.9, none. "
        "cumm has no torch axis (links_torch = false)."
    )


def test_unknown_lane(tmp_path: Path) -> None:
    error = refusal(load(tmp_path, NAMED["cumm"], FarmRecipe("plain")), lane="12.9")
    assert error.message == "--lane 12.9 matches no cell. Valid lanes: 12.8, 13.0, none."
    assert error.hint == "A lane is a CUDA version; 'none' selects the cells without CUDA."


def test_filters_that_match_only_apart(tmp_path: Path) -> None:
    mac = FarmRecipe("mac", platforms=("macos-arm64",))
    error = refusal(load(tmp_path, DEMO, mac), ["platform=macos-arm64", "python=3.12"],
                    lane="13.0")
    assert error.message == (
        "-f platform=macos-arm64 -f python=3.12 --lane 13.0: these match no cell together, "
        "though each matches some alone."
    )


def test_two_recipes_with_one_name(tmp_path: Path) -> None:
    first = load_recipe(write_recipe(tmp_path / "a", FarmRecipe("twin")))
    second = load_recipe(write_recipe(tmp_path / "b", FarmRecipe("twin")))
    error = refusal([first, second])
    assert error.message == (
        f"Two recipes are named 'twin': {tmp_path}/a/recipes/twin.toml and "
        f"{tmp_path}/b/recipes/twin.toml."
    )


def test_sharding_without_a_compiler_cache(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, FarmRecipe("nocache", shard_count=4))
    path.write_text(path.read_text() + '\n[cache]\nbackend = "none"\n')
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    assert caught.value.message == (
        f"{path}: keys 'sharding.count' and 'cache.backend': nocache shards 4 ways but has "
        "no compiler cache; the shards hand their work to the link job as a cache, so "
        "without one it would compile everything again. Set cache.backend = 'ccache' "
        "(or 'sccache'), or sharding.count = 1."
    )


def test_no_recipes(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_recipes((), tmp_path)
    assert caught.value.message == f"No recipes given, and none in {tmp_path}/recipes."
    assert refusal([]).message == "No recipes to expand."


# --- the 256-job cap --------------------------------------------------------------------

A = FarmRecipe("a", python=("3.11", "3.12"), cuda=("12.8", "13.0"), torch=("2.8", "2.9"),
               links_torch=True, platforms=("linux-x86_64", "linux-aarch64"), shard_count=10)


def b_recipe(count: int) -> FarmRecipe:
    return FarmRecipe("b", python=("3.10", "3.11", "3.12"), cuda=("12.8", "13.0"),
                      platforms=("linux-x86_64", "linux-aarch64"), shard_count=count)


def test_exactly_256_jobs_fit(tmp_path: Path) -> None:
    plan = expand_matrix(load(tmp_path, A, b_recipe(8)))  # 16 x 10 + 12 x 8
    assert plan.sizes.as_dict() == {"shard": 256, "link": 28, "build": 0}


def test_over_the_cap_proposes_lane_package_and_n_splits(tmp_path: Path) -> None:
    # 16 cells x 10 + 12 cells x 9 = 268 shard jobs
    error = refusal(load(tmp_path, A, b_recipe(9)))
    assert error.message == (
        "The compile-shard matrix would have 268 jobs; GitHub runs at most 256 jobs per "
        "matrix (this dispatch: 268 shard, 28 link, 0 build).\n"
        "Splits (largest matrix per dispatch):\n"
        "  per lane: --lane 12.8 → 134 jobs, --lane 13.0 → 134 jobs\n"
        "  per package: -f package=a → 160 jobs, -f package=b → 108 jobs\n"
        "  smaller N: sharding.count = 9 in a → 252 jobs"
    )
    assert error.hint == (
        "Dispatch once per part (the workflow's lane and filters inputs take the same "
        "values), narrow it with -f python=... or -f platform=..., or lower sharding.count."
    )


def test_each_proposed_split_really_fits(tmp_path: Path) -> None:
    recipes = load(tmp_path, A, b_recipe(9))
    assert expand_matrix(recipes, lane="12.8").sizes.shard == 134
    assert expand_matrix(recipes, ["package=a"]).sizes.shard == 160
    assert expand_matrix(recipes, ["package=b"]).sizes.shard == 108
    capped = FarmRecipe(**{**A.__dict__, "shard_count": 9})
    assert expand_matrix(load(tmp_path / "n", capped, b_recipe(9))).sizes.shard == 252


def x_recipe() -> FarmRecipe:
    """32 cells sharded 20 ways: 640 shard jobs, 320 per lane."""
    return FarmRecipe("x", python=("3.10", "3.11", "3.12", "3.13"), cuda=("12.8", "13.0"),
                      torch=("2.8", "2.9"), links_torch=True,
                      platforms=("linux-x86_64", "linux-aarch64"), shard_count=20)


def test_a_split_that_does_not_fit_says_so(tmp_path: Path) -> None:
    error = refusal(load(tmp_path, x_recipe()))
    assert error.message == (
        "The compile-shard matrix would have 640 jobs; GitHub runs at most 256 jobs per "
        "matrix (this dispatch: 640 shard, 32 link, 0 build).\n"
        "Splits (largest matrix per dispatch):\n"
        "  per lane: does not fit (--lane 12.8 alone → 320 jobs)\n"
        "  smaller N: sharding.count = 8 in x → 256 jobs"
    )


def test_no_shard_count_fits(tmp_path: Path) -> None:
    # 4 py x 2 cuda x 4 torch x 5 platforms = 160 cells; even N = 2 gives 320 shard jobs
    spec = FarmRecipe("wide", python=("3.10", "3.11", "3.12", "3.13"), cuda=("12.8", "13.0"),
                      torch=("2.6", "2.7", "2.8", "2.9"), links_torch=True,
                      platforms=ALL_PLATFORMS, shard_count=2)
    error = refusal(load(tmp_path, spec))
    assert error.message == (
        "The compile-shard matrix would have 320 jobs; GitHub runs at most 256 jobs per "
        "matrix (this dispatch: 320 shard, 160 link, 0 build).\n"
        "Splits (largest matrix per dispatch):\n"
        "  per lane: --lane 12.8 → 160 jobs, --lane 13.0 → 160 jobs\n"
        "  smaller N: does not fit (N = 2 → 320 jobs)"
    )


def many_builds() -> FarmRecipe:
    """7 pythons x 8 torch x 5 platforms = 280 whole cells, no CUDA."""
    return FarmRecipe(
        "many", python=tuple(f"3.{minor}" for minor in range(8, 15)),
        torch=tuple(f"2.{minor}" for minor in range(2, 10)), links_torch=True,
        platforms=ALL_PLATFORMS,
    )


def test_over_the_cap_with_no_split(tmp_path: Path) -> None:
    error = refusal(load(tmp_path, many_builds()))
    assert error.message == (
        "The build matrix would have 280 jobs; GitHub runs at most 256 jobs per matrix "
        "(this dispatch: 0 shard, 0 link, 280 build).\n"
        "No lane, package or shard-count split applies to it."
    )


def test_two_matrices_over_the_cap(tmp_path: Path) -> None:
    error = refusal(load(tmp_path, many_builds(), x_recipe()))
    assert error.message == (
        "The compile-shard matrix would have 640 jobs and the build matrix 280; GitHub runs "
        "at most 256 jobs per matrix (this dispatch: 640 shard, 32 link, 280 build).\n"
        "Splits (largest matrix per dispatch):\n"
        "  per lane: does not fit (--lane 12.8 alone → 320 jobs)\n"
        "  per package: does not fit (-f package=x alone → 640 jobs)\n"
        "  smaller N: does not fit (N = 2 → 280 jobs)"
    )


def test_skipped_cells_do_not_count_toward_the_cap(tmp_path: Path) -> None:
    recipes = load(tmp_path, A, b_recipe(9))
    plan = expand_matrix(recipes, skip_existing=lambda c: "built" if c.package == "b" else None)
    assert plan.sizes.shard == 160


def test_cap_none_expands_anything(tmp_path: Path) -> None:
    assert expand_matrix(load(tmp_path, x_recipe()), cap=None).sizes.shard == 640


def test_farm_over_the_cap_from_the_command(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    write_farm(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(matrix_command, ["--json"])
    assert isinstance(result.exception, UsageError)
    assert result.stdout == ""
    assert result.exception.message == (
        "The compile-shard matrix would have 554 jobs; GitHub runs at most 256 jobs per "
        "matrix (this dispatch: 554 shard, 120 link, 148 build).\n"
        "Splits (largest matrix per dispatch):\n"
        "  per lane: --lane 12.8 → 239 jobs, --lane 13.0 → 239 jobs, --lane none → 76 jobs\n"
        "  per package: 44 dispatches, the largest -f package=flash-attn → 128 jobs\n"
        "  smaller N: sharding.count = 2 in the 20 recipes that shard more → 240 jobs"
    )
    lane = CliRunner().invoke(matrix_command, ["--json", "--lane", "13.0"])
    assert lane.exit_code == 0, lane.output


def test_the_command_raises_kiln_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_recipe(tmp_path, NAMED["cumm"])
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(matrix_command, ["-f", "torch=2.9", "--json"])
    assert isinstance(result.exception, KilnError)
    assert result.exception.message.startswith("-f torch=2.9 matches no cell: cumm has no")
