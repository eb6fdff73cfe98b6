"""Cache backends by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from wheelkiln.cache.backend import CacheBackend, CacheConfig
from wheelkiln.cache.ccache import Ccache
from wheelkiln.cache.sccache import Sccache

BACKENDS: Final[dict[str, Callable[[CacheConfig], CacheBackend]]] = {
    "ccache": Ccache,
    "sccache": Sccache,
}


def make_backend(name: str, config: CacheConfig) -> CacheBackend | None:
    """The named backend, or None for 'none' (no cache)."""
    if name == "none":
        return None
    return BACKENDS[name](config)
