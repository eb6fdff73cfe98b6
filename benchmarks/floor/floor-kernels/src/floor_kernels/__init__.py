"""The hot floor of a scikit-build-core CUDA package: one kernel TU, one module TU."""

from ._core import answer

__all__ = ["answer"]
