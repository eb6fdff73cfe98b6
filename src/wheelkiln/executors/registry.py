"""Executors by name. A new engine is one module with a factory, and one line here.

Factories import their engine when called, so an engine's dependencies (Dask's) are
needed only by whoever uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from wheelkiln.errors import UsageError
from wheelkiln.executors.base import Executor, ExecutorSettings

ExecutorFactory = Callable[[ExecutorSettings], Executor]


def _local(settings: ExecutorSettings) -> Executor:
    from wheelkiln.executors.local import LocalExecutor

    return LocalExecutor.from_settings(settings)


def _dask(settings: ExecutorSettings) -> Executor:
    from wheelkiln.executors.dask import DaskExecutor

    return DaskExecutor.from_settings(settings)


EXECUTORS: Final[dict[str, ExecutorFactory]] = {
    "local": _local,
    "dask": _dask,
}
"""Every engine, by the name ``--executor`` takes."""

DEFAULT_EXECUTOR: Final = "local"


def make_executor(name: str, settings: ExecutorSettings | None = None) -> Executor:
    """The named executor, or a :class:`UsageError` that names the known ones."""
    factory = EXECUTORS.get(name)
    if factory is None:
        raise UsageError(
            f"Unknown executor {name!r}; the known executors are: {', '.join(sorted(EXECUTORS))}.",
            hint="Pick one of those, or add a module under wheelkiln/executors/ and register "
            "its factory in wheelkiln/executors/registry.py.",
        )
    return factory(settings or {})
