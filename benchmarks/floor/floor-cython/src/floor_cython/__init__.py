"""The hot floor of a meson-python Cython package: one module."""

from floor_cython._m import answer

__all__ = ["answer"]
