"""Recipes: typed loading, the schema, and errors that name the file and the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wheelkiln.errors import RecipeError
from wheelkiln.matrix.cells import expand_cells, select_cell
from wheelkiln.recipe.load import SCHEMA_PATH, load_recipe, render_schema

GOOD = """
name = "pkg"
[source]
path = "src"
[build]
env = { MAX_JOBS = "2" }
[matrix]
python = ["3.11", "3.12"]
platforms = ["linux-x86_64", "linux-aarch64"]
[[matrix.cuda]]
version = "12.8"
arch_list = ["8.0", "9.0"]
[[matrix.cuda]]
version = "13.0"
arch_list = ["9.0"]
[sharding]
count = 4
platforms = ["linux-x86_64"]
[[families]]
name = "sm90"
pattern = "sm90/"
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "src").mkdir(exist_ok=True)
    path = tmp_path / "pkg.toml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(RecipeError) as caught:
        load_recipe(write(tmp_path, text))
    return caught.value.message


def test_good_recipe_loads_frozen_with_every_field(tmp_path: Path) -> None:
    loaded = load_recipe(write(tmp_path, GOOD))
    recipe = loaded.recipe
    assert recipe.sharding.count == 4
    assert [lane.version for lane in recipe.matrix.cuda] == ["12.8", "13.0"]
    assert recipe.families[0].name == "sm90"
    assert recipe.build.env == {"MAX_JOBS": "2"}
    with pytest.raises(Exception, match="frozen"):
        recipe.sharding.count = 2  # type: ignore[misc]


def test_cells_cross_axes_and_collapse_torch(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, GOOD)).recipe
    cells = expand_cells(recipe)
    assert len(cells) == 2 * 2 * 2  # python × cuda × platform; torch collapsed
    assert {c.torch for c in cells} == {"none"}
    assert "pkg-py3.11-cu13.0-linux-x86_64" in {c.id for c in cells}
    assert select_cell(recipe, "python=3.12,cuda=12.8").id == "pkg-py3.12-cu12.8-linux-x86_64"


def test_unknown_key_names_file_dotted_key_and_suggestion(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace("count = 4", "cuont = 4"))
    assert f"{tmp_path / 'pkg.toml'}: unknown key 'sharding.cuont' in [sharding]." in message
    assert "Perhaps you meant 'sharding.count'?" in message


def test_unknown_key_in_array_of_tables(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace('arch_list = ["9.0"]', 'arch_lst = ["9.0"]'))
    assert "unknown key 'matrix.cuda[1].arch_lst'" in message
    assert "Perhaps you meant 'matrix.cuda[1].arch_list'?" in message


def test_wrong_type_names_key(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace("count = 4", 'count = "four"'))
    assert "key 'sharding.count'" in message and "valid integer" in message


def test_missing_source(tmp_path: Path) -> None:
    text = GOOD.replace('[source]\npath = "src"\n', "")
    assert "missing required key 'source'" in error_of(tmp_path, text)


def test_sharding_platform_outside_matrix(tmp_path: Path) -> None:
    message = error_of(
        tmp_path,
        GOOD.replace('platforms = ["linux-x86_64"]\n[[fam', 'platforms = ["windows-amd64"]\n[[fam'),
    )
    assert "key 'sharding.platforms': 'windows-amd64' is not in matrix.platforms" in message


def test_both_partitions_refused(tmp_path: Path) -> None:
    message = error_of(
        tmp_path, GOOD.replace("count = 4", 'count = 4\nsource_globs = ["gen/*.cu"]')
    )
    assert "both partitions would act" in message
    assert "1/N²" in message


def test_pypi_source_needs_pinned_digest(tmp_path: Path) -> None:
    text = GOOD.replace('path = "src"', 'pypi = "pycryptodome==3.20.0"')
    assert "source.pypi needs source.sha256" in error_of(tmp_path, text)


def test_invalid_toml_names_file(tmp_path: Path) -> None:
    message = error_of(tmp_path, "name = \n")
    assert str(tmp_path / "pkg.toml") in message and "not valid TOML" in message


def test_checked_in_schema_is_current() -> None:
    assert SCHEMA_PATH.read_text() == render_schema(), (
        "recipe.schema.json is stale: run `kiln recipe schema > src/wheelkiln/recipe/recipe.schema.json`"
    )


def test_bundled_recipes_are_valid() -> None:
    recipes = sorted(Path(__file__).parents[2].joinpath("recipes").glob("*.toml"))
    assert recipes, "no recipes under recipes/"
    for path in recipes:
        load_recipe(path)


def test_cli_error_is_one_paragraph_without_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("count = 4", "cuont = 4"))
    kiln = Path(sys.executable).with_name("kiln")
    result = subprocess.run(
        [str(kiln), "recipe", "check", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "error: " in result.stderr and "Perhaps you meant 'sharding.count'?" in result.stderr
