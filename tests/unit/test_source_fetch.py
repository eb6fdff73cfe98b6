"""Fetching a remote source is safe to do from parallel jobs of one build: the shard
jobs of ``kiln build --shards`` all fetch it on their first build, in one KILN_HOME."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from wheelkiln.builder.source import _fetch_git, fetch_source
from wheelkiln.errors import SourceError
from wheelkiln.recipe.load import LoadedRecipe, load_recipe


def git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
           "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def git_recipe(upstream: Path, recipe: Path) -> LoadedRecipe:
    """*upstream*'s files committed as one revision, and *recipe*, which pins it."""
    git("init", "--quiet", cwd=upstream)
    git("add", "-A", cwd=upstream)
    git("commit", "--quiet", "-m", "one", cwd=upstream)
    rev = git("rev-parse", "HEAD", cwd=upstream)
    recipe.write_text(f'name = "demo"\n[source]\ngit = "{upstream}"\nrev = "{rev}"\n')
    return load_recipe(recipe)


def test_parallel_fetches_of_one_git_source_share_one_clone(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "setup.py").write_text("# the package\n")
    loaded = git_recipe(upstream, tmp_path / "demo.toml")
    rev = loaded.recipe.source.rev
    store = tmp_path / "home" / "sources"

    with ThreadPoolExecutor(6) as pool:
        trees = list(pool.map(lambda _: fetch_source(loaded, store), range(6)))

    assert len(set(trees)) == 1
    tree = trees[0]
    assert (tree / "setup.py").read_text() == "# the package\n"
    assert git("rev-parse", "HEAD", cwd=tree) == rev
    assert (tree / ".kiln-source").read_text() == f"{upstream}@{rev}\n"


def test_a_rev_that_names_no_commit_is_refused(tmp_path: Path) -> None:
    """`git checkout pyproject.toml` takes the file as a pathspec and stays on HEAD: the
    build went on at HEAD, its marker saying `@pyproject.toml`."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    recipe = tmp_path / "demo.toml"
    git_recipe(upstream, recipe)
    store = tmp_path / "home" / "sources"
    recipe.write_text(f'name = "demo"\n[source]\ngit = "{upstream}"\nrev = "pyproject.toml"\n')
    with pytest.raises(SourceError) as caught:
        fetch_source(load_recipe(recipe), store)
    assert caught.value.message == (
        f"{recipe}: key 'source.rev': 'pyproject.toml' names no commit of {upstream}."
    )
    assert caught.value.hint == "Set source.rev to a commit hash or a tag of that repository."
    assert not [p for p in store.iterdir() if p.is_dir()]  # no checkout kept
    # An option spelled as a rev (the recipe refuses it; the fetch must not run it).
    with pytest.raises(SourceError) as caught:
        _fetch_git(str(upstream), f"--output={tmp_path / 'written'}", store)
    assert caught.value.message == (
        f"source.rev: '--output={tmp_path / 'written'}' names no commit of {upstream}."
    )
    assert not (tmp_path / "written").exists()


def test_a_tag_is_checked_out_as_its_commit(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "setup.py").write_text("# one\n")
    first = git_recipe(upstream, tmp_path / "demo.toml").recipe.source.rev
    git("tag", "-a", "v1", "-m", "v1", cwd=upstream)  # an annotated tag: a tag object
    (upstream / "setup.py").write_text("# two\n")
    git("commit", "--quiet", "-am", "two", cwd=upstream)
    recipe = tmp_path / "tagged.toml"
    recipe.write_text(f'name = "demo"\n[source]\ngit = "{upstream}"\nrev = "v1"\n')
    tree = fetch_source(load_recipe(recipe), tmp_path / "home" / "sources")
    assert git("rev-parse", "HEAD", cwd=tree) == first
    assert (tree / "setup.py").read_text() == "# one\n"
    assert (tree / ".kiln-source").read_text() == f"{upstream}@v1\n"
