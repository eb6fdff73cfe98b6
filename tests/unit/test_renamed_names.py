"""Renamed options and recipe keys: the partition mechanism is ``partition`` everywhere
(``--partition``, ``sharding.partition``) and ``kiln link`` takes ``--archives DIR``.
The former names still work, each with one warning that names its replacement; both
names at once with different values is an error. Every case is refused before any work,
so the whole file runs in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_cli_boundaries import RECIPE, run_main
from wheelkiln.errors import RecipeError
from wheelkiln.recipe.load import load_recipe


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["shard", RECIPE, "--index", "5", "--count", "2", "--filter", "seat"],
         "--index 5 is outside 0..1"),
        (["build", RECIPE, "--filter", "seat"], "--filter applies only with --shards N."),
        (["link", RECIPE, "--shards", "{tmp}/nowhere"], "--shards {tmp}/nowhere is not a directory"),
    ],
    ids=["shard --filter", "build --filter", "link --shards"],
)
def test_a_former_option_name_works_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    argv: list[str], message: str,
) -> None:
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, _, err = run_main(monkeypatch, capsys, tmp_path, argv)
    old, new = ("--shards", "--archives") if argv[0] == "link" else ("--filter", "--partition")
    assert code == 2, err
    assert _flat(err).count(f"warning: {old} is deprecated; use {new} (it takes the same values).") == 1
    assert message.format(tmp=tmp_path) in _flat(err)


def test_new_option_names_do_not_warn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_main(monkeypatch, capsys, tmp_path,
                            ["build", RECIPE, "--partition", "source"])
    assert code == 2 and "--partition applies only with --shards N." in _flat(err)
    code, _, err = run_main(monkeypatch, capsys, tmp_path,
                            ["link", RECIPE, "--archives", str(tmp_path / "none")])
    assert code == 2 and f"--archives {tmp_path / 'none'} is not a directory" in _flat(err)
    assert "deprecated" not in err


def test_both_names_that_disagree_are_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_main(monkeypatch, capsys, tmp_path, [
        "shard", RECIPE, "--index", "0", "--partition", "seat", "--filter", "source"])
    assert code == 2, err
    assert ("--partition seat and --filter source disagree (--filter is the former name of "
            "--partition)") in _flat(err)
    code, _, err = run_main(monkeypatch, capsys, tmp_path, ["link", RECIPE])
    assert code == 2 and "Missing option '--archives'" in err


def _recipe(tmp_path: Path, sharding: str) -> Path:
    path = tmp_path / "r.toml"
    path.write_text(f'name = "r"\n[source]\npath = "."\n[sharding]\ncount = 2\n{sharding}\n')
    return path


def test_the_former_recipe_key_is_read_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recipe(tmp_path, 'filter = "source"\nsource_globs = ["gen/*.cpp"]')
    assert load_recipe(path).recipe.sharding.partition == "source"
    assert (f"warning: {path}: key 'sharding.filter' is deprecated; rename it to "
            "'sharding.partition' (same values: 'seat' or 'source').") in _flat(capsys.readouterr().err)
    assert load_recipe(_recipe(tmp_path, 'partition = "seat"')).recipe.sharding.partition == "seat"
    assert "deprecated" not in capsys.readouterr().err
    with pytest.raises(RecipeError, match=r"keys 'sharding.filter' and 'sharding.partition'"):
        load_recipe(_recipe(tmp_path, 'filter = "seat"\npartition = "seat"'))
