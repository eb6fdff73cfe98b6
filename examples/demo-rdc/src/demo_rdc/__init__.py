"""demo-rdc: a wheelkiln example of CMake CUDA separable compilation (device link).

Every function here runs on the host; no GPU is needed.
"""

from ._core import answer, stage_count

__version__ = "0.1.0"
__all__ = ["__version__", "answer", "stage_count"]
