"""demo-meson: a wheelkiln example of a sharded meson-python build.

_core holds C and C++ TUs, one source compiled twice with different flags (kernel.c
at two "instruction-set levels"), a generated source and a runtime dispatcher; _cy is
a Cython module over a C helper. checksum() depends on every TU.
"""

from __future__ import annotations

from . import _core, _cy

__version__ = "0.1.0"
__all__ = ["__version__", "checksum", "kernel"]

_MASK = (1 << 64) - 1


def checksum() -> int:
    """Sum mod 2**64 of every TU's part (see tools/expected.py)."""
    return (_core.checksum() + _cy.value()) & _MASK


def kernel(level: int) -> int:
    """The kernel the dispatcher picks for an instruction-set level (1 or 2)."""
    return int(_core.kernel(level))
