"""demo-cpp: a wheelkiln example of a sharded setuptools C++ build.

The generated TUs are split over two extension modules that setuptools links one
after the other: demo_cpp._core (group "core") and demo_cpp._extra (group "extra").
"""

from __future__ import annotations

from . import _core, _extra

__version__ = "0.1.0"
__all__ = ["__version__", "checksum", "families", "kernel_count", "kernels"]

_MODULES = (_core, _extra)
_MASK = (1 << 64) - 1


def checksum() -> int:
    """Sum mod 2**64 of every generated TU's checksum (see tools/expected.py)."""
    return sum(m.checksum() for m in _MODULES) & _MASK


def kernel_count() -> int:
    """Number of generated TUs linked into the package."""
    return sum(m.tu_count() for m in _MODULES)


def families() -> dict[str, int]:
    """{group: number of TUs}, one group per extension module."""
    return {m.GROUP: m.tu_count() for m in _MODULES}


def kernels() -> list[tuple[str, str, int]]:
    """[(group, name, checksum)] for every generated TU."""
    return [t for m in _MODULES for t in m.tus()]
