"""Settings are resolved once: the cascade (recipe, then command line) in one function,
and every derived job's settings keep what the job does not change."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from wheelkiln.recipe.load import LoadedRecipe, parse_recipe
from wheelkiln.settings import (
    BuildOptions,
    JobSetup,
    executor_job,
    link_job,
    resolve_build_settings,
    seat_job,
)


def _loaded(tmp_path: Path) -> LoadedRecipe:
    path = tmp_path / "r.toml"
    recipe = parse_recipe(
        {
            "name": "r",
            "source": {"path": "."},
            "cache": {"backend": "sccache", "namespace": "team", "remote": "redis://cache:6379"},
        },
        path,
    )
    return LoadedRecipe(recipe, path)


def test_the_command_line_wins_over_the_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    loaded = _loaded(tmp_path)
    default = resolve_build_settings(loaded)
    assert (default.cache, default.namespace, default.remote) == (
        "sccache", "team", "redis://cache:6379"
    )
    assert default.workdir == (tmp_path / "home" / "work").resolve()
    assert default.cache_dir is None and default.jobs is None and not default.recache
    given = resolve_build_settings(
        loaded, cache="ccache", namespace="mine", workdir=tmp_path / "w", jobs=3
    )
    assert (given.cache, given.namespace, given.workdir, given.jobs) == (
        "ccache", "mine", (tmp_path / "w").resolve(), 3
    )


def test_derived_jobs_keep_every_setting_they_do_not_change(tmp_path: Path) -> None:
    options = BuildOptions(
        cache="sccache", cache_dir=tmp_path / "c", namespace="ns", recache=True,
        remote="redis://r", workdir=tmp_path / "w", jobs=5, source_date_epoch=42,
        job=JobSetup(extra_env={"A": "1"}, quiet=True),
    )
    kept = {"cache": "sccache", "namespace": "ns", "remote": "redis://r", "jobs": 5,
            "source_date_epoch": 42}

    def fields(o: BuildOptions) -> dict[str, object]:
        return {k: getattr(o, k) for k in kept}

    link = link_job(options, workdir=tmp_path / "x", cache_dir=tmp_path / "m",
                    extra_env={"CCACHE_LOGFILE": "log"})
    assert fields(link) == kept
    assert (link.cache_dir, link.workdir, link.recache) == (tmp_path / "m", tmp_path / "x", False)
    # The link job builds where an unsharded build of the cell does.
    assert link.job == JobSetup(suffix="link", in_cell_directory=True,
                                extra_env={"A": "1", "CCACHE_LOGFILE": "log"}, quiet=True)

    def prepare(tree: Path) -> bool:
        del tree
        return False

    shard = seat_job(options, suffix="shard-1-of-2", workdir=tmp_path / "x", cache_dir=None,
                     extra_env={"KILN_SHARD_INDEX": "0"}, prepare_tree=prepare)
    assert fields(shard) == kept
    assert (shard.recache, shard.cache_dir) == (False, None)
    assert shard.job == JobSetup(suffix="shard-1-of-2", seat_wrapper=True,
                                 extra_env={"A": "1", "KILN_SHARD_INDEX": "0"},
                                 prepare_tree=prepare, quiet=True)

    handed = executor_job(options, tmp_path / "x", jobs=2)
    assert dataclasses.replace(handed, cache_dir=options.cache_dir, workdir=options.workdir,
                               jobs=options.jobs) == options
    assert (handed.cache_dir, handed.jobs) == (None, 2)
    assert executor_job(options, tmp_path / "x").jobs == 5
