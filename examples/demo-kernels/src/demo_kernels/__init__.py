"""demo-kernels: a wheelkiln example of a sharded scikit-build-core + CUDA build.

Every function here runs on the host; no GPU is needed.
"""

from ._core import checksum, families, kernel_count, kernels

__version__ = "0.1.0"
__all__ = ["__version__", "checksum", "families", "kernel_count", "kernels"]
