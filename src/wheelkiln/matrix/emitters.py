"""CI emitters by name: each writes the workflow that runs the matrix on one CI system.

An emitter is pure: recipes in, workflow text out. The workflow computes its matrix
when it runs (``kiln matrix --json``), so it is written once and stays valid while the
recipes change. A new CI system is one module with a class that has these members, and
one line in :data:`EMITTERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol

from wheelkiln.errors import UsageError
from wheelkiln.matrix.github import GitHubEmitter


class CIEmitter(Protocol):
    """One CI system's workflow writer."""

    @property
    def name(self) -> str:
        """The name ``kiln ci NAME`` takes."""
        ...

    @property
    def default_path(self) -> str:
        """Where the workflow goes in a repository, relative to its root."""
        ...

    def render(self, recipes: Sequence[str] = (), requirement: str | None = None) -> str:
        """The workflow as text. ``recipes``: the recipe paths its matrix job expands
        (none: ``recipes/*.toml`` as the job finds them); ``requirement``: how its jobs
        install kiln (default: this version)."""
        ...


EMITTERS: Final[dict[str, Callable[[], CIEmitter]]] = {
    "github": GitHubEmitter,
}
"""Every CI emitter, by name."""


def make_emitter(name: str) -> CIEmitter:
    """The named emitter, or a :class:`UsageError` that names the known ones."""
    factory = EMITTERS.get(name)
    if factory is None:
        raise UsageError(
            f"Unknown CI emitter {name!r}; the known emitters are: {', '.join(sorted(EMITTERS))}.",
            hint="Pick one of those, or add a module under wheelkiln/matrix/ and register it "
            "in wheelkiln/matrix/emitters.py.",
        )
    return factory()
