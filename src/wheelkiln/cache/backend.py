"""The compiler-cache backend protocol and what every backend reports.

A backend gives the environment a build needs, zeroes and reads its counters as
numbers, and says which TUs missed where it can. ccache is the default backend
(:mod:`wheelkiln.cache.ccache`), sccache the second (:mod:`wheelkiln.cache.sccache`).
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from wheelkiln.errors import ToolNotFoundError


@dataclass(frozen=True)
class CacheConfig:
    """What a build asks of its cache."""

    cache_dir: Path
    """The cache's private local directory."""
    base_dir: Path
    """The workspace: absolute paths below it are hashed as relative paths."""
    namespace: str | None = None
    """A namespace (ccache) or key prefix (sccache) isolating entries."""
    recache: bool = False
    """Compile every TU and overwrite its entry (a truly cold build)."""
    remote: str | None = None
    """Remote storage URL passed through to the backend."""
    stats_log: Path | None = None
    """Where the backend writes per-TU counter lines, where it can."""
    job_dir: Path | None = None
    """The build's own directory below *base_dir* (its tree and build directory). ccache
    writes a path below *base_dir* relative to the compile, which names no job; sccache
    strips a base directory's prefix, so below the workdir a shard's and the link job's
    directory names would stay in the key of every TU compiled by absolute path (CMake):
    it strips this one first."""


@dataclass(frozen=True)
class CacheStats:
    """Counters of one build, as numbers. ``total`` counts cacheable compiles only."""

    hits: int
    misses: int
    uncacheable: int = 0
    errors: int = 0
    remote_errors: int = 0
    """Errors reading or writing remote storage (sccache: its storage's read and write
    errors, which are the remote's when one is set)."""
    raw: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.hits + self.misses

    def as_dict(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "total": self.total,
            "uncacheable": self.uncacheable,
            "errors": self.errors,
        }


@dataclass(frozen=True)
class TUOutcome:
    """One compile's cache result: the source as the compiler saw it, hit or miss."""

    source: str
    hit: bool


class CacheBackend(Protocol):
    """What the build, shard and link jobs need from a compiler cache."""

    name: str
    config: CacheConfig

    def executable(self) -> str:
        """The cache's executable, used as the compiler launcher."""
        ...

    def environment(self) -> dict[str, str]:
        """Variables to set for every compile of the build."""
        ...

    def start(self) -> None:
        """Bring up anything the cache needs (a server), with ``environment()``."""
        ...

    def stop(self) -> None:
        """Shut down what ``start`` brought up."""
        ...

    def zero_stats(self) -> None: ...

    def stats(self) -> CacheStats: ...

    def tu_outcomes(self) -> list[TUOutcome]:
        """Per-TU results since the stats log was cleared, where the backend can say."""
        ...

    def version(self) -> str: ...


CACHE_ENV_PREFIXES = ("CCACHE_", "SCCACHE_")
"""Every variable with one of these prefixes configures a compiler cache."""

USER_CACHE_SETTINGS_KEPT = frozenset(
    {
        # diagnostics: where the cache writes its log and debug files
        "CCACHE_LOGFILE", "CCACHE_DEBUG", "CCACHE_DEBUGDIR", "CCACHE_DEBUGLEVEL",
        "SCCACHE_LOG", "SCCACHE_ERROR_LOG",
        # size limits and scratch space: how much is kept, never what a key means
        "CCACHE_MAXSIZE", "CCACHE_MAXFILES", "CCACHE_TEMPDIR", "CCACHE_UMASK",
        "SCCACHE_CACHE_SIZE",
    }
)  # fmt: skip
"""Cache settings from the caller's environment that a build keeps: none of them can
change what a hit returns or where entries go."""


def scrub_cache_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """*environ* without the caller's compiler-cache settings.

    ``CCACHE_DISABLE``, ``CCACHE_RECACHE``, ``CCACHE_NODEPEND``, ``CCACHE_SLOPPINESS``,
    ``CCACHE_BASEDIR``, ``CCACHE_DIR``, ``CCACHE_CONFIGPATH``, ``SCCACHE_RECACHE``,
    ``SCCACHE_CONF``... left in a user's shell would override the settings kiln makes
    for correctness, or send entries somewhere the shard handoff never looks. Only
    :data:`USER_CACHE_SETTINGS_KEPT` survive; the backend then adds its own.
    """
    return {
        name: value
        for name, value in environ.items()
        if not name.startswith(CACHE_ENV_PREFIXES) or name in USER_CACHE_SETTINGS_KEPT
    }


def find_tool(name: str, extra_hint: str) -> str:
    """Find a cache executable: first beside this interpreter (pip-installed), then PATH."""
    scripts = Path(sysconfig.get_path("scripts"))
    beside = scripts / name
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise ToolNotFoundError(
            f"'{name}' was not found beside {scripts} or on PATH.", hint=extra_hint
        )
    return found
