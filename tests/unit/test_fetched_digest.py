"""A fetched source (PyPI sdist, git rev) is digested once per `kiln build`: the digest of
kiln's pristine tree is the digest the build's private copy would have, leftovers and
all. A local source.path is the user's and is never taken for the copy's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_source_fetch import git_recipe
from wheelkiln.builder.source import copy_tree, fetch_source, source_digest
from wheelkiln.builder.wheel_cache import fetched_source_digest
from wheelkiln.paths import sources_dir
from wheelkiln.recipe.load import load_recipe


def test_a_fetched_source_digests_as_the_build_s_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    upstream = tmp_path / "upstream"
    (upstream / "src").mkdir(parents=True)
    (upstream / "setup.py").write_text("# the package\n")
    (upstream / "src" / "a.c").write_text("int a(void) { return 1; }\n")
    (upstream / "build").mkdir()  # a leftover the copy (and so the digest) leaves out
    (upstream / "build" / "old.o").write_text("stale\n")
    loaded = git_recipe(upstream, tmp_path / "demo.toml")

    known = fetched_source_digest(loaded)
    copy = tmp_path / "job" / "src"
    copy_tree(fetch_source(loaded, sources_dir()), copy, loaded.recipe.source.exclude)
    assert not (copy / "build").exists()
    assert known == source_digest(copy, loaded.recipe.source.exclude)
    (copy / "src" / "a.c").write_text("int a(void) { return 2; }\n")
    assert known != source_digest(copy, loaded.recipe.source.exclude)


def test_a_local_source_is_digested_by_the_build_itself(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    recipe = tmp_path / "demo.toml"
    recipe.write_text('name = "demo"\n[source]\npath = "pkg"\n')
    assert fetched_source_digest(load_recipe(recipe)) is None
