"""Fetching a remote source is safe to do from parallel jobs of one build: the shard
jobs of ``kiln build --shards`` all fetch it on their first build, in one KILN_HOME."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wheelkiln.builder.source import fetch_source
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
