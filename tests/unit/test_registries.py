"""Executors and CI emitters are engines in a registry, found by name: the registries
list their engines, each builds one that does the job, and an unknown name is a usage
error that names the known ones."""

from __future__ import annotations

import pytest

from wheelkiln.errors import UsageError
from wheelkiln.executors.local import LocalExecutor
from wheelkiln.executors.registry import DEFAULT_EXECUTOR, EXECUTORS, make_executor
from wheelkiln.matrix.emitters import EMITTERS, make_emitter
from wheelkiln.matrix.github import WORKFLOW_PATH, render_workflow


def test_the_executor_registry_lists_the_local_engine_and_makes_it() -> None:
    assert "local" in EXECUTORS and DEFAULT_EXECUTOR == "local"
    executor = make_executor("local")
    assert isinstance(executor, LocalExecutor) and executor.name == "local"


def test_an_unknown_executor_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(UsageError) as raised:
        make_executor("slurm")
    assert raised.value.message == (
        f"Unknown executor 'slurm'; the known executors are: {', '.join(sorted(EXECUTORS))}."
    )
    assert "wheelkiln/executors/registry.py" in (raised.value.hint or "")
    assert raised.value.exit_code == 2


def test_the_local_executor_refuses_settings_it_would_ignore() -> None:
    with pytest.raises(UsageError, match="takes no settings; got scheduler"):
        make_executor("local", {"scheduler": "tcp://head:8786"})


def test_the_emitter_registry_lists_github_and_its_emitter_writes_the_workflow() -> None:
    assert "github" in EMITTERS
    emitter = make_emitter("github")
    assert emitter.name == "github" and emitter.default_path == WORKFLOW_PATH
    recipes = ["recipes/natten.toml"]
    assert emitter.render(recipes, "wheelkiln==1.2") == render_workflow(recipes, "wheelkiln==1.2")


def test_an_unknown_emitter_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(UsageError) as raised:
        make_emitter("gitlab")
    assert raised.value.message == (
        f"Unknown CI emitter 'gitlab'; the known emitters are: {', '.join(sorted(EMITTERS))}."
    )
    assert "wheelkiln/matrix/emitters.py" in (raised.value.hint or "")
